// Copyright 2026 The GMLake Authors.

#include "client/arena.h"

#include "absl/strings/str_cat.h"

namespace gmlake {

absl::StatusOr<std::unique_ptr<Arena>> Arena::Create(VmmBackend* backend,
                                                     size_t bytes,
                                                     size_t page_size,
                                                     bool small) {
  auto arena = std::make_unique<Arena>();
  arena->page_size = page_size;
  arena->num_pages = bytes / page_size;
  arena->small = small;
  absl::StatusOr<VirtualRange> range =
      VirtualRange::Reserve(backend, arena->num_pages * page_size, page_size);
  if (!range.ok()) {
    return absl::Status(
        range.status().code(),
        absl::StrCat(
            "reserving ", arena->num_pages * page_size,
            " bytes of address space for an arena: ", range.status().message(),
            " (lower large_arena/small_arena in GMLAKE_CONF)"));
  }
  arena->range = *std::move(range);
  arena->chunk.assign(arena->num_pages, 0);
  arena->seg.assign(arena->num_pages, nullptr);
  return arena;
}

absl::Status MapPages(VmmBackend* backend, Arena* arena, size_t first_page,
                      absl::Span<const ChunkHandle> chunks,
                      absl::Span<const int> devices) {
  const size_t ps = arena->page_size;
  size_t mapped = 0;
  absl::Status status;
  for (; mapped < chunks.size(); ++mapped) {
    const size_t page = first_page + mapped;
    status = backend->Map(arena->PageAddr(page), ps, chunks[mapped]);
    if (!status.ok()) break;
    arena->chunk[page] = chunks[mapped];
  }
  if (status.ok()) {
    status = backend->SetAccess(arena->PageAddr(first_page), chunks.size() * ps,
                                devices);
    if (status.ok()) return status;
  }
  for (size_t i = 0; i < mapped; ++i) {
    backend->Unmap(arena->PageAddr(first_page + i), ps).IgnoreError();
    arena->chunk[first_page + i] = 0;
  }
  return status;
}

absl::Status UnmapPages(VmmBackend* backend, Arena* arena, size_t first_page,
                        size_t count, std::vector<ChunkHandle>* out) {
  for (size_t page = first_page; page < first_page + count; ++page) {
    absl::Status s = backend->Unmap(arena->PageAddr(page), arena->page_size);
    if (!s.ok()) return s;
    out->push_back(arena->chunk[page]);
    arena->chunk[page] = 0;
    arena->seg[page] = nullptr;
  }
  return absl::OkStatus();
}

}  // namespace gmlake
