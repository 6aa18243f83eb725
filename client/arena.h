// Copyright 2026 The GMLake Authors.
//
// Arena: the mechanism half of the allocator. A reserved virtual range cut
// into pages of one chunk each, the chunk mapped at every page (0 where
// none), which segment each mapped page belongs to, and the calls that map
// and unmap runs of pages through the VMM layer. No decisions are made here.

#ifndef GMLAKE_CLIENT_ARENA_H_
#define GMLAKE_CLIENT_ARENA_H_

#include <cstddef>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/block.h"
#include "client/chunk_source.h"
#include "common/vmm.h"

namespace gmlake {

struct Arena {
  VirtualRange range;
  size_t page_size = 0;
  size_t num_pages = 0;
  bool small = false;
  // Per page. A chunk may span several pages; every page it covers holds
  // its handle and its first page, and its first page holds its length.
  std::vector<ChunkHandle> chunk;       // 0: unmapped
  std::vector<uint32_t> chunk_start;    // first page of the chunk here
  std::vector<uint32_t> chunk_pages;    // at a chunk's first page: its pages
  std::vector<Segment*> seg;            // null: unmapped
  std::map<size_t, Segment*> segments;  // by first page
  // Runs of unmapped pages a slow path is mapping into or unmapping from
  // with the lock down: first page -> pages. Nobody else plans there.
  std::map<size_t, size_t> in_flight;
  // Dormant chunks: still mapped at pages no segment covers. A stitch took
  // them to another address and left this mapping in place (kernels queued
  // before it may still use it); a later request of the same shape gets
  // them back here with no driver call (see DeviceAllocator::Reactivate).
  // Same layout as `chunk`: every page a dormant chunk covers holds its
  // handle; its first page holds its length and the generation it went
  // dormant in (whose events tell when it may be unmapped).
  std::vector<ChunkHandle> dormant;
  std::vector<uint32_t> dormant_pages;
  std::vector<uint64_t> dormant_gen;
  // Maximal runs of dormant pages: first page -> end page.
  std::map<size_t, size_t> dormant_runs;

  // Reserves `bytes` (rounded down to whole pages) of address space for
  // `device` (the cuda backend reserves it in that device's context).
  static absl::StatusOr<std::unique_ptr<Arena>> Create(VmmBackend* backend,
                                                       size_t bytes,
                                                       size_t page_size,
                                                       bool small, int device);

  DevicePtr base() const { return range.base(); }
  DevicePtr PageAddr(size_t page) const { return base() + page * page_size; }
  size_t PageOf(DevicePtr addr) const { return (addr - base()) / page_size; }
  bool InFlight(size_t page) const {
    auto it = in_flight.upper_bound(page);
    if (it == in_flight.begin()) return false;
    --it;
    return page < it->first + it->second;
  }
  bool Taken(size_t page) const {
    return chunk[page] != 0 || dormant[page] != 0 || InFlight(page);
  }
  bool Contains(DevicePtr addr) const {
    return addr >= base() && addr < base() + num_pages * page_size;
  }
};

// Pages the chunks cover together.
size_t PagesOf(absl::Span<const SizedChunk> chunks, size_t page_size);

// --- Driver calls (no books; callable without the allocator's lock) ---

// Maps `chunks` one after another from `addr` and gives `devices` access to
// the run (one SetAccess for the run). All or nothing: on error, what was
// mapped is unmapped again.
absl::Status MapChunks(VmmBackend* backend, DevicePtr addr,
                       absl::Span<const SizedChunk> chunks,
                       absl::Span<const int> devices);
// Unmaps `chunks`, mapped one after another from `addr`.
absl::Status UnmapChunks(VmmBackend* backend, DevicePtr addr,
                         absl::Span<const SizedChunk> chunks);

// --- Books (no driver calls) ---

// Notes `chunks` as mapped one after another from `first_page`.
void RecordMapped(Arena* arena, size_t first_page,
                  absl::Span<const SizedChunk> chunks);
// Forgets the chunks mapped at [first_page, end_page) (whole chunks) and
// returns them.
std::vector<SizedChunk> ForgetMapped(Arena* arena, size_t first_page,
                                     size_t end_page);

// Notes `chunks`, mapped one after another from `first_page` outside any
// segment, as dormant since generation `gen`.
void RecordDormant(Arena* arena, size_t first_page,
                   absl::Span<const SizedChunk> chunks, uint64_t gen);
// Forgets the dormant chunks at [first_page, end_page) (whole dormant
// chunks) and returns them in page order.
std::vector<SizedChunk> ForgetDormant(Arena* arena, size_t first_page,
                                      size_t end_page);

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_ARENA_H_
