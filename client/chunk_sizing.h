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
  uint64_t unit = 0;         // every size is a multiple of it (> 0)
  uint64_t base = 0;         // chunks of a small shortfall (0: unit)
  uint64_t large_chunk = 0;  // the largest chunk (0 or <= base: base)
  uint64_t min_split = 64;   // a large shortfall gets at least this many
};

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

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_CHUNK_SIZING_H_
