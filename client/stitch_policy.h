// Copyright 2026 The GMLake Authors.
//
// The stitching policy: pure decisions, no mapping, no state.
//
// When no free block of a pool fits a request, the allocator maps chunks
// into a gap of its virtual arena. Which gap, and where in it, is decided
// here from a description of each gap: how many unmapped pages it has, and
// how many free bytes of the requesting pool sit right before and after it
// (the free tail of the segment on its left, the free head of the one on its
// right). Using those free bytes means mapping fewer new chunks: a 2.1 MiB
// request after a 1.9 MiB free tail needs one chunk, not two.
//
// Where the chunks come from is the other half: free chunks held unmapped
// first, then whole pages taken from free blocks elsewhere (the "stitch":
// physical memory that was not adjacent becomes adjacent in the new range),
// and only then new chunks from the lake. OrderVictims says which free
// blocks give up their pages first.

#ifndef GMLAKE_CLIENT_STITCH_POLICY_H_
#define GMLAKE_CLIENT_STITCH_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"

namespace gmlake {

struct GapView {
  size_t first_page = 0;   // first unmapped page of the gap
  size_t pages = 0;        // unmapped pages in the gap
  size_t free_before = 0;  // free bytes of the pool ending at the gap
  size_t free_after = 0;   // free bytes of the pool starting after it
};

struct Placement {
  size_t gap = 0;         // index into the gaps given
  size_t first_page = 0;  // first page to map
  size_t pages = 0;       // how many chunks to map (the cost)
};

// Chooses where to map chunks for a request of `size` bytes with pages of
// `page_size`: the fewest new pages; on a tie the most unmapped pages left
// right after the mapping, then the lowest address. nullopt when no gap can
// hold it (the arena is full).
//
// The room after is for a block that grows: a KV cache's tensors grow a
// page at a time, each step's larger copy landing in the free block its
// copy of two steps before left. A block with unmapped pages after it grows
// in place by a page (or a cover); one hemmed in by the next mapping is
// stitched anew, every chunk of it mapped again. Placing fresh mappings
// in the smallest gap that held them (the rule before, to keep large gaps
// whole; address space is 512 GiB an arena) hemmed them in: a replay of a
// stand-in for a 320-token decode made 72,597 driver calls that way and
// 53,453 this way (docs/design.md, "Room to grow"); the training traces are
// the same.
std::optional<Placement> ChoosePlacement(absl::Span<const GapView> gaps,
                                         size_t size, size_t page_size);

// A free block that has whole free pages to give.
struct VictimView {
  size_t block_size = 0;
  size_t free_pages = 0;
  uint64_t order = 0;  // caller's tie-breaker (e.g. address)
};

// Indices of `victims` in the order their pages should be taken: the
// smallest free blocks first, so that large free blocks stay whole for the
// large requests that made them (training repeats its sizes every step).
std::vector<size_t> OrderVictims(absl::Span<const VictimView> victims);

// Whether a request that no free block fits should map `grow_bytes` of new
// chunks from the lake rather than stitch free chunks: while `reserved`
// plus them stays within (1 + `slack`) x `allocated_peak` (the most
// allocated at once, this request included).
bool GrowRatherThanStitch(uint64_t reserved, uint64_t grow_bytes,
                          uint64_t allocated_peak, double slack);

// The slack GrowRatherThanStitch uses for a request of `size` bytes: the
// larger of `slack` and `slack_large` for one of 64 MiB or more that raises
// the allocated peak (`raises_peak`: what is allocated, the request
// included, is more than ever before), else `slack`. A `slack` of 0 (stitch
// whenever free chunks exist) is 0 for every request.
//
// A larger slack for every large request (0.0075 from 64 MiB) cut the
// recorded 320-token decode's driver calls by 23%, but other traces' counts
// then move at random with the slack: a grow early on changes which free
// blocks exist later, hence which are stolen from, when the dormant pages
// pass max_dormant (a purge of 270-2,300 unmaps each) and which KV blocks
// are hemmed in and mapped anew whole. colocate_infer ranged 24,756-29,198
// calls over slacks 0.005-0.01 in steps of 0.0002, and
// llama1b_hf_trainer_dynamic's second half went from 78 calls to 1,480 at
// 0.0094. Only while the allocated peak rises (a KV cache growing in a
// first decode) is what a grow maps memory the program goes on to hold.
// There alone, 0.0075 cuts the decode's calls by 23% (28% on the host backend);
// colocate_infer, llama3b_infer_large and hf_trainer_dynamic make the calls
// they make with `slack` (up to 0.011, 0.008 and 0.015).
double GrowSlackFor(uint64_t size, bool raises_peak, double slack,
                    double slack_large);

// Whether a free block of `block_size` bytes should grow in place to serve
// `size` (clearing the way if need be) rather than the request take a new
// view: when it misses at most `reach` x `size`, for a request of 64 MiB or
// more; below that at most 1/16 of it (or `reach` if smaller).
//
// Growing maps the shortfall where a new view maps every page. The tensors
// that grow a little each step (a KV cache's, each layer's K and V copied
// into one a token longer) are large, and a fresh view of one is 100-200
// chunks. A reach of 0.4 for them, not 1/16: the recorded 320-token decode
// makes 67,098 driver calls instead of 83,042, colocate_infer 24,816
// instead of 26,672, colocate_train 17,528 instead of 18,653;
// llama3b_infer_large 26,049 instead of 25,308 (and llama3b_full_ckpt 2
// more); colocate_infer reserves 1.0058 x live instead of 1.0054, every
// other trace as much or less. Smaller requests keep 1/16: the wider
// reach for them too cost llama1b_full_offload 1-3 calls over the bound
// issue 19 set it (2 with it from 32 MiB). docs/design.md, "How far a
// block grows in place".
bool GrowInPlace(uint64_t block_size, uint64_t size, double reach);

// Whether a chunk of `pages` serves a reclaim's `rest` (pages still to give
// back) better than one of `best`: the largest no larger than the rest (no
// more leaves than asked), else the smallest (the least beyond it).
bool BetterFit(size_t pages, size_t best, size_t rest);

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_STITCH_POLICY_H_
