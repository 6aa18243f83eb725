// Copyright 2026 The GMLake Authors.
//
// DeviceAllocator's side of CUDA IPC: which chunks hold a live allocation,
// exported as descriptors (client/ipc_share.h carries them to the
// receiving process). A stitched allocation spans several chunks; each is
// mapped whole and the chunks follow one another in the arena, so a
// receiver that maps them whole, one after another, holds the allocation
// at the same offset from the first chunk's start.

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "client/arena.h"
#include "client/device_allocator.h"

namespace gmlake {

absl::StatusOr<DeviceAllocator::Exported> DeviceAllocator::ExportLive(
    DevicePtr ptr) {
  MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return absl::NotFoundError(absl::StrFormat(
        "0x%x is not a live allocation of device %d", ptr, device_));
  }
  const Block* b = it->second;
  const Arena* a = b->segment->arena;
  Exported out;
  out.size = b->size;
  const size_t first = a->PageOf(b->addr);
  const size_t last = a->PageOf(b->end() - 1);
  const size_t start = a->chunk_start[first];
  out.offset = b->addr - a->PageAddr(start);
  for (size_t page = start; page <= last;) {
    const size_t pages = a->chunk_pages[page];
    if (a->chunk[page] == 0 || pages == 0 || a->chunk_start[page] != page) {
      return absl::InternalError(absl::StrFormat(
          "page %d of the arena behind 0x%x holds no chunk start", page, ptr));
    }
    absl::StatusOr<UniqueFd> fd = source_->ExportForSharing(a->chunk[page]);
    if (!fd.ok()) {
      return absl::Status(
          fd.status().code(),
          absl::StrCat("exporting a chunk of 0x", absl::Hex(ptr), ": ",
                       fd.status().message(),
                       backend_->can_export_imports()
                           ? ""
                           : " (the CUDA driver cannot export again a chunk "
                             "this process imported from gmlaked, and its "
                             "descriptor was not kept: the process is near "
                             "its descriptor limit; raise RLIMIT_NOFILE, or "
                             "use the embedded lake)"));
    }
    out.fds.push_back(*std::move(fd));
    out.chunk_sizes.push_back(pages * a->page_size);
    page += pages;
  }
  return out;
}

}  // namespace gmlake
