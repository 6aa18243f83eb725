// Copyright 2026 The GMLake Authors.

#include "client/lake.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "client/embedded_lake.h"
#include "common/vmm.h"

namespace gmlake {

absl::StatusOr<OpenedLake> OpenLake(const AllocatorOptions& options) {
  std::string why;
  if (options.lake != "embedded") {
    struct stat st;
    const bool socket_there = ::stat(options.socket.c_str(), &st) == 0;
    if (options.lake == "daemon" || socket_there) {
      // The daemon source arrives with gmlaked's client (daemon issue); until
      // it is linked in, say so rather than pretend.
      absl::Status s = absl::UnavailableError(
          absl::StrCat("gmlaked at ", options.socket,
                       " cannot be used by this build of libgmlake"));
      if (options.lake == "daemon") return s;
      why = absl::StrCat(" (", s.message(), ")");
    } else {
      why = absl::StrCat(" (no gmlaked socket at ", options.socket, ")");
    }
  }
  BackendOptions bo;
  bo.kind = options.backend;
  bo.host_capacity_bytes = options.host_capacity;
  absl::StatusOr<std::unique_ptr<VmmBackend>> backend = CreateBackend(bo);
  if (!backend.ok()) return backend.status();
  auto lake = std::make_unique<EmbeddedLake>(
      *std::move(backend), options.chunk_size, options.max_chunk);
  for (int d = 0; d < lake->backend()->device_count(); ++d) {
    if (absl::Status s = lake->SetCapacity(d, options.capacity); !s.ok()) {
      return s;
    }
  }
  OpenedLake out;
  out.description = lake->Describe() + why;
  out.source = std::move(lake);
  return out;
}

}  // namespace gmlake
