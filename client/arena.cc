// Copyright 2026 The GMLake Authors.

#include "client/arena.h"

#include "absl/strings/str_cat.h"

namespace gmlake {

absl::StatusOr<std::unique_ptr<Arena>> Arena::Create(VmmBackend* backend,
                                                     size_t bytes,
                                                     size_t page_size,
                                                     bool small, int device) {
  auto arena = std::make_unique<Arena>();
  arena->page_size = page_size;
  arena->num_pages = bytes / page_size;
  arena->small = small;
  absl::StatusOr<VirtualRange> range = VirtualRange::Reserve(
      backend, arena->num_pages * page_size, page_size, device);
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
  arena->chunk_start.assign(arena->num_pages, 0);
  arena->chunk_pages.assign(arena->num_pages, 0);
  arena->seg.assign(arena->num_pages, nullptr);
  return arena;
}

size_t PagesOf(absl::Span<const SizedChunk> chunks, size_t page_size) {
  size_t pages = 0;
  for (const SizedChunk& c : chunks) pages += c.size / page_size;
  return pages;
}

absl::Status MapChunks(VmmBackend* backend, DevicePtr addr,
                       absl::Span<const SizedChunk> chunks,
                       absl::Span<const int> devices) {
  DevicePtr at = addr;
  size_t mapped = 0;
  absl::Status status;
  for (; mapped < chunks.size(); ++mapped) {
    status = backend->Map(at, chunks[mapped].size, chunks[mapped].handle);
    if (!status.ok()) break;
    at += chunks[mapped].size;
  }
  if (status.ok()) {
    status = backend->SetAccess(addr, at - addr, devices);
    if (status.ok()) return status;
  }
  UnmapChunks(backend, addr, chunks.subspan(0, mapped)).IgnoreError();
  return status;
}

absl::Status UnmapChunks(VmmBackend* backend, DevicePtr addr,
                         absl::Span<const SizedChunk> chunks) {
  absl::Status first;
  for (const SizedChunk& c : chunks) {
    absl::Status s = backend->Unmap(addr, c.size);
    if (!s.ok() && first.ok()) first = s;
    addr += c.size;
  }
  return first;
}

void RecordMapped(Arena* arena, size_t first_page,
                  absl::Span<const SizedChunk> chunks) {
  size_t page = first_page;
  for (const SizedChunk& c : chunks) {
    const size_t n = c.size / arena->page_size;
    for (size_t p = page; p < page + n; ++p) {
      arena->chunk[p] = c.handle;
      arena->chunk_start[p] = static_cast<uint32_t>(page);
    }
    arena->chunk_pages[page] = static_cast<uint32_t>(n);
    page += n;
  }
}

std::vector<SizedChunk> ForgetMapped(Arena* arena, size_t first_page,
                                     size_t end_page) {
  std::vector<SizedChunk> out;
  size_t page = first_page;
  while (page < end_page) {
    const size_t n = arena->chunk_pages[page];
    out.push_back({arena->chunk[page], n * arena->page_size});
    for (size_t p = page; p < page + n; ++p) {
      arena->chunk[p] = 0;
      arena->seg[p] = nullptr;
    }
    arena->chunk_pages[page] = 0;
    page += n;
  }
  return out;
}

}  // namespace gmlake
