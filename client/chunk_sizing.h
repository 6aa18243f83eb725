// Copyright 2026 The GMLake Authors.
//
// Which kept chunks serve a request, and how the shortfall left is cut into
// new chunks (pure). Both lakes use it:
// the embedded one when it creates chunks, DaemonChunkSource when it leases
// them (LeaseRequest.chunk_bytes), so a process gets the same chunks from
// either.
//
//   * Chunks of `base` bytes (the allocator's max_chunk in an embedded lake,
//     gmlaked's unit through a daemon): small enough to stitch finely.
//   * A large shortfall, at least 2 x `min_split` x base, in chunks of a
//     power-of-two multiple of base, the largest that still cuts it into at
//     least `min_split` chunks, at most `large_chunk`. Every driver call
//     (create, export, import, map, access) costs per chunk whatever its
//     size (~35 us per cuMemSetAccess on an H200), so 40 GiB in 512 MiB
//     chunks is 80 calls of each where 2 MiB chunks are 20,480; and a chunk
//     of at most 1/min_split of the request it serves still lets a later
//     stitch take it apart in pieces of that size. 64 keeps every shipped
//     trace within its targets; 16 does not (docs/design.md, "Chunk
//     sizes").
//   * What is left over: chunks of base, and one smaller (a multiple of
//     `unit`) for the last piece.
//   * A process that holds or has held much grows in coarser chunks
//     (ForHeld): the base doubles while it stays within 1/`held_divisor`
//     of the most the process has held and within `held_max` (a process
//     that gave its cache back grows back to what it held); what is left below
//     it is still cut in chunks of the base it had. A chunk only part free
//     strands at most its free part, so what coarser chunks can strand
//     scales with the bytes held, not with the request: at 1/2048, a
//     process holding 56 GiB grows in 16 MiB chunks, and the colocation
//     trainer's replay makes 18,653 driver calls instead of 30,122 at
//     1.003 x live instead of 1.001 (docs/design.md, "Chunk sizes").
//
// Sizes are few (powers of two times base), so free chunks of a size are
// found again by the next request that cuts the same way.

#ifndef GMLAKE_CLIENT_CHUNK_SIZING_H_
#define GMLAKE_CLIENT_CHUNK_SIZING_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gmlake {

struct ChunkSizing {
  uint64_t unit = 0;          // every size is a multiple of it (> 0)
  uint64_t base = 0;          // chunks of a small shortfall (0: unit)
  uint64_t large_chunk = 0;   // the largest chunk (0 or <= base: base)
  uint64_t min_split = 64;    // a large shortfall gets at least this many
  uint64_t held_divisor = 0;  // ForHeld: base <= held / this (0: off)
  uint64_t held_max = 0;      // ForHeld: base <= this (0: base stays)
  // What is left below base is cut in chunks of this before the last
  // piece (0 or >= base: none). ForHeld sets it to the base it coarsened.
  uint64_t rest_chunk = 0;
};

// `sizing` for a process that has held at most `held` bytes (both lakes
// pass the most, so that regrowth after giving the cache back is as
// coarse as the growth before it): its base doubled while
// the doubled base is at most held / held_divisor and at most held_max
// (and large_chunk, when set), the base it had for the rest (rest_chunk),
// so that a shortfall of a few pages is cut as before, not into one odd
// piece. The base never shrinks.
ChunkSizing ForHeld(const ChunkSizing& sizing, uint64_t held);

// `count` chunks of `size` bytes.
struct ChunkRun {
  uint64_t size = 0;
  uint64_t count = 0;
  bool operator==(const ChunkRun& o) const {
    return size == o.size && count == o.count;
  }
};

// The chunks for a shortfall of `bytes` (a multiple of sizing.unit), largest
// first; their sizes sum to `bytes`. Empty for 0 bytes.
std::vector<ChunkRun> PlanChunks(uint64_t bytes, const ChunkSizing& sizing);

// Leasing ahead of need. A process that grows in many small shortfalls (a
// KV cache growing token by token, new batch shapes) would pay a lease
// round trip per shortfall through gmlaked (~290 us per 2 MiB chunk on an
// H200); leased ahead, the next shortfalls are served from chunks already
// imported. The step doubles with the growth (what was leased in this
// streak of growth), so a process growing by G pays O(log G) leases up to
// the cap and G / cap after it. The cap bounds what a pause in growth
// leaves unused: the larger of `max_bytes` and 1/`held_divisor` of what
// the process holds, never past the room left (its limit, the lake's
// capacity). What is leased ahead stays in whole chunks of the unit, so
// the allocator still stitches finely; it is not mapped (the allocator's
// reserved bytes do not count it), and it goes back first under pressure
// and once growth pauses (DaemonChunkSource).
struct LeaseAhead {
  uint64_t max_bytes = 256ull << 20;  // 0: no leasing ahead
  uint64_t held_divisor = 64;
};

// Bytes to lease beyond a shortfall of `missing` (whole `unit`s): the
// streak so far plus this shortfall, within the cap (see LeaseAhead) and
// `room`. 0 when leasing ahead is off.
uint64_t LeaseAheadBytes(const LeaseAhead& ahead, uint64_t unit,
                         uint64_t missing, uint64_t streak_bytes,
                         uint64_t held_bytes, uint64_t room_bytes);

// After a lease ahead of `refused` bytes was refused for want of room: how
// many bytes the process leases as asked before it leases ahead again (or
// until chunks go back). As much as was refused, at least one `unit`. Its
// leases as asked may raise pressure, and pressure brings back what it
// will need (its shortfall, its deficit against its peak), so the lake has
// room again after a turn switch's first round; a lake that stays full
// costs one refused lease ahead per such step. The streak starts over at
// a refusal, so the steps grow from small again: in the lake-share demo
// (1.05 x lake, --prefer_reclaim) resuming at the step refused put the node
// peak at 1.021 x the floor, starting over at 1.018 (pausing until chunks
// went back: 1.011, for 417-611 lease calls in a colocation trainer's turn
// where resuming takes 59-82).
uint64_t LeaseAheadPause(uint64_t refused, uint64_t unit);

// Moves kept chunks (anything with a `size`) from `idle` to `taken` for a
// request of `bytes`: largest first, each only if it fits what is still
// missing, and only of `only_size` when that is nonzero. Returns the bytes
// moved; the request's shortfall is the rest. Leaves `idle` sorted by size.
template <typename Chunk>
uint64_t TakeKeptChunks(std::vector<Chunk>* idle, uint64_t bytes,
                        uint64_t only_size, std::vector<Chunk>* taken) {
  std::sort(idle->begin(), idle->end(),
            [](const Chunk& a, const Chunk& b) { return a.size < b.size; });
  uint64_t have = 0;
  std::vector<Chunk> left;
  for (size_t i = idle->size(); i-- > 0;) {
    const Chunk& c = (*idle)[i];
    const bool fits = only_size != 0 ? c.size == only_size : true;
    if (have < bytes && fits && c.size <= bytes - have) {
      have += c.size;
      taken->push_back(c);
    } else {
      left.push_back(c);
    }
  }
  idle->assign(left.rbegin(), left.rend());
  return have;
}

// Moves kept chunks from `idle` to `taken` for a request of `bytes` cut
// as PlanChunks(bytes, sizing) cuts it: for each of its runs, kept chunks
// of that run's size, up to its count; then larger chunks than the base
// that fit what is still missing. Smaller kept chunks do not stand in for a
// larger planned one: what a process leased ahead in 2 MiB pieces for 2 MiB
// shortfalls would otherwise serve every later shortfall in 2 MiB chunks,
// and each chunk costs its own driver calls. Returns the bytes moved.
template <typename Chunk>
uint64_t TakePlannedChunks(std::vector<Chunk>* idle, uint64_t bytes,
                           const ChunkSizing& sizing,
                           std::vector<Chunk>* taken) {
  uint64_t have = 0;
  for (const ChunkRun& run : PlanChunks(bytes, sizing)) {
    have += TakeKeptChunks(idle, run.size * run.count, run.size, taken);
  }
  std::vector<Chunk> large;
  std::vector<Chunk> rest;
  for (Chunk& c : *idle) (c.size > sizing.base ? large : rest).push_back(c);
  have += TakeKeptChunks(&large, bytes - have, 0, taken);
  rest.insert(rest.end(), large.begin(), large.end());
  *idle = std::move(rest);
  std::sort(idle->begin(), idle->end(),
            [](const Chunk& a, const Chunk& b) { return a.size < b.size; });
  return have;
}

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_CHUNK_SIZING_H_
