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

absl::Status MapPages(VmmBackend* backend, Arena* arena, size_t first_page,
                      absl::Span<const SizedChunk> chunks,
                      absl::Span<const int> devices) {
  const size_t ps = arena->page_size;
  size_t page = first_page;
  size_t mapped = 0;
  absl::Status status;
  for (; mapped < chunks.size(); ++mapped) {
    const SizedChunk& c = chunks[mapped];
    const size_t n = c.size / ps;
    status = backend->Map(arena->PageAddr(page), c.size, c.handle);
    if (!status.ok()) break;
    for (size_t p = page; p < page + n; ++p) {
      arena->chunk[p] = c.handle;
      arena->chunk_start[p] = static_cast<uint32_t>(page);
    }
    arena->chunk_pages[page] = static_cast<uint32_t>(n);
    page += n;
  }
  if (status.ok()) {
    status = backend->SetAccess(arena->PageAddr(first_page),
                                (page - first_page) * ps, devices);
    if (status.ok()) return status;
  }
  page = first_page;
  for (size_t i = 0; i < mapped; ++i) {
    backend->Unmap(arena->PageAddr(page), chunks[i].size).IgnoreError();
    for (size_t p = page; p < page + chunks[i].size / ps; ++p) {
      arena->chunk[p] = 0;
    }
    page += chunks[i].size / ps;
  }
  return status;
}

absl::Status UnmapPages(VmmBackend* backend, Arena* arena, size_t first_page,
                        size_t end_page, std::vector<SizedChunk>* out) {
  const size_t ps = arena->page_size;
  size_t page = first_page;
  while (page < end_page) {
    const size_t n = arena->chunk_pages[page];
    absl::Status s = backend->Unmap(arena->PageAddr(page), n * ps);
    if (!s.ok()) return s;
    out->push_back({arena->chunk[page], n * ps});
    for (size_t p = page; p < page + n; ++p) {
      arena->chunk[p] = 0;
      arena->seg[p] = nullptr;
    }
    arena->chunk_pages[page] = 0;
    page += n;
  }
  return absl::OkStatus();
}

}  // namespace gmlake
