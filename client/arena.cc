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
  arena->dormant.assign(arena->num_pages, 0);
  arena->dormant_pages.assign(arena->num_pages, 0);
  arena->dormant_gen.assign(arena->num_pages, 0);
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

void RecordDormant(Arena* arena, size_t first_page,
                   absl::Span<const SizedChunk> chunks, uint64_t gen) {
  size_t page = first_page;
  for (const SizedChunk& c : chunks) {
    const size_t n = c.size / arena->page_size;
    for (size_t p = page; p < page + n; ++p) arena->dormant[p] = c.handle;
    arena->dormant_pages[page] = static_cast<uint32_t>(n);
    arena->dormant_gen[page] = gen;
    page += n;
  }
  // Join the runs this one touches.
  size_t first = first_page, end = page;
  auto& runs = arena->dormant_runs;
  auto next = runs.lower_bound(first);
  if (next != runs.begin() && std::prev(next)->second == first) {
    --next;
    first = next->first;
    next = runs.erase(next);
  }
  if (next != runs.end() && next->first == end) {
    end = next->second;
    runs.erase(next);
  }
  runs[first] = end;
}

std::vector<SizedChunk> ForgetDormant(Arena* arena, size_t first_page,
                                      size_t end_page) {
  std::vector<SizedChunk> out;
  for (size_t page = first_page; page < end_page;) {
    const size_t n = arena->dormant_pages[page];
    out.push_back({arena->dormant[page], n * arena->page_size});
    for (size_t p = page; p < page + n; ++p) arena->dormant[p] = 0;
    arena->dormant_pages[page] = 0;
    arena->dormant_gen[page] = 0;
    page += n;
  }
  // Cut [first_page, end_page) out of the run holding it.
  auto& runs = arena->dormant_runs;
  auto it = std::prev(runs.upper_bound(first_page));
  const size_t run_first = it->first, run_end = it->second;
  runs.erase(it);
  if (run_first < first_page) runs[run_first] = first_page;
  if (end_page < run_end) runs[end_page] = run_end;
  return out;
}

}  // namespace gmlake
