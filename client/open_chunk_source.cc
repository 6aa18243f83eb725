// Copyright 2026 The GMLake Authors.

#include "client/open_chunk_source.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "client/daemon_chunk_source.h"
#include "client/embedded_lake.h"
#include "client/split_chunk_source.h"
#include "common/vmm.h"

namespace gmlake {

ChunkSizing GrowthSizing(const AllocatorOptions& options) {
  ChunkSizing s;
  s.base = options.max_chunk;
  s.large_chunk = options.large_chunk;
  s.held_divisor = options.held_chunk_divisor;
  s.held_max = options.held_chunk_max;
  return s;
}

namespace {

absl::StatusOr<OpenedChunkSource> OpenEmbedded(const AllocatorOptions& options,
                                               const std::string& why) {
  BackendOptions bo;
  bo.kind = options.backend;
  bo.host_capacity_bytes = options.host_capacity;
  absl::StatusOr<std::unique_ptr<VmmBackend>> backend = CreateBackend(bo);
  if (!backend.ok()) return backend.status();
  auto lake = std::make_unique<EmbeddedLake>(
      *std::move(backend), options.chunk_size, GrowthSizing(options));
  for (int d = 0; d < lake->backend()->device_count(); ++d) {
    if (absl::Status s = lake->SetCapacity(d, options.capacity); !s.ok()) {
      return s;
    }
  }
  OpenedChunkSource out;
  out.description = lake->Describe() + why;
  out.source = std::move(lake);
  return out;
}

// gmlaked alone when it serves every device of this process; else a split:
// an embedded lake over the same backend for the devices it does not serve
// (a rank that sees a GPU the node's gmlaked does not), said at start.
std::unique_ptr<ChunkSource> WithEmbeddedWhereUnserved(
    std::unique_ptr<DaemonChunkSource> daemon,
    const AllocatorOptions& options) {
  std::vector<bool> served;
  bool all = true;
  for (int d = 0; d < daemon->backend()->device_count(); ++d) {
    served.push_back(daemon->serves(d));
    all = all && served.back();
  }
  if (all) return daemon;
  auto local = std::make_unique<EmbeddedLake>(
      daemon->backend(), options.chunk_size, GrowthSizing(options));
  return std::make_unique<SplitChunkSource>(std::move(daemon), std::move(local),
                                            std::move(served));
}

}  // namespace

DaemonSourceOptions DaemonSourceOptionsFor(const AllocatorOptions& options) {
  DaemonSourceOptions d;
  d.socket_path = options.socket;
  d.idle_watermark_bytes = options.idle_watermark;
  d.chunks = GrowthSizing(options);
  d.lease_ahead_max = options.lease_ahead;
  d.lease_ahead_in_background = options.lease_ahead_background;
  d.make_chunks = options.make_chunks;
  return d;
}

absl::StatusOr<OpenedChunkSource> OpenChunkSource(
    const AllocatorOptions& options) {
  if (options.lake == "embedded") return OpenEmbedded(options, "");
  DaemonSourceOptions d = DaemonSourceOptionsFor(options);
  const char* name = std::getenv("GMLAKE_NAME");
  d.name = name != nullptr ? name : absl::StrCat("pid ", getpid());
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> daemon =
      DaemonChunkSource::Connect(d);
  if (!daemon.ok()) {
    if (options.lake == "daemon") {
      return absl::Status(
          daemon.status().code(),
          absl::StrCat(daemon.status().message(),
                       " (GMLAKE_CONF has lake:daemon; start gmlaked, point "
                       "socket: at it, or use lake:auto)"));
    }
    // lake:auto: no daemon here is normal; anything else is worth saying.
    return OpenEmbedded(
        options,
        absl::StrCat(" (gmlaked not used: ", daemon.status().message(), ")"));
  }
  std::unique_ptr<ChunkSource> source =
      WithEmbeddedWhereUnserved(*std::move(daemon), options);
  for (int dev = 0; dev < source->backend()->device_count(); ++dev) {
    if (options.capacity == 0) break;
    if (absl::Status s = source->SetCapacity(dev, options.capacity); !s.ok()) {
      return s;
    }
  }
  OpenedChunkSource out;
  out.description = source->Describe();
  out.source = std::move(source);
  return out;
}

}  // namespace gmlake
