// Copyright 2026 The GMLake Authors.
//
// ExternalPool: the books of a private pool whose memory another allocator
// gives: torch.cuda.MemPool(allocator=...), as NCCL's ncclMemAlloc pools
// for symmetric memory, or a program's own cudaMalloc wrapper.
//
// Such memory is the other allocator's: GMLake cannot remap it, stitch it
// or hand it to the lake, and its own chunks never serve such a pool. What
// a program can expect is what PyTorch's caching allocator does with it,
// and that is what these books keep: segments asked of the other allocator
// in PyTorch's sizes, split into blocks at 512 bytes, merged when freed,
// cached until the pool is released or emptied. PyTorch's tests count
// them (test_mempool_with_allocator: two 1 MiB tensors share one 2 MiB
// segment, the third makes a second), memory fractions count them, and
// MemPool(use_on_oom=True) lends their free blocks on a last resort.
//
// Pure books: no calls out, no locks. The DeviceAllocator owns one per such
// pool under its lock, asks the other allocator for the segments these
// books size (ExternalSegmentBytes) and gives back those they let go.

#ifndef GMLAKE_CLIENT_EXTERNAL_POOL_H_
#define GMLAKE_CLIENT_EXTERNAL_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "common/vmm.h"

namespace gmlake {

// The other allocator: a segment of `bytes` for `stream`, and its return.
class ExternalMemory {
 public:
  virtual ~ExternalMemory() = default;
  // 0 when it has no memory.
  virtual DevicePtr Allocate(size_t bytes, StreamHandle stream) = 0;
  virtual void Free(DevicePtr ptr, size_t bytes, StreamHandle stream) = 0;
};

// PyTorch's sizes (c10/cuda/CUDACachingAllocator.cpp): requests round up to
// 512 bytes; those up to 1 MiB are small and come from 2 MiB segments;
// larger ones up to 10 MiB from 20 MiB segments; the rest from segments of
// their size rounded up to 2 MiB.
size_t ExternalBlockBytes(size_t requested);
bool ExternalIsSmall(size_t block_bytes);
size_t ExternalSegmentBytes(size_t block_bytes);
// Whether a free block of `free_bytes` serving `block_bytes` is split, the
// rest staying free: a small one when 512 bytes are left, a large one when
// more than 1 MiB is (PyTorch's should_split).
bool ExternalSplits(size_t free_bytes, size_t block_bytes, bool small);

class ExternalPool {
 public:
  struct Block {
    size_t size = 0;
    size_t requested = 0;  // 0 when free
    bool allocated = false;
  };
  struct Segment {
    size_t size = 0;
    StreamHandle stream = 0;
    bool small = false;
    std::map<DevicePtr, Block> blocks;  // tiling the segment, in order
  };
  // A block handed out.
  struct Taken {
    DevicePtr addr = 0;
    size_t size = 0;
    bool small = false;
  };
  // A block given back.
  struct Freed {
    size_t size = 0;
    size_t requested = 0;
    bool small = false;
    StreamHandle stream = 0;
  };
  // A segment the books let go, for the other allocator's Free.
  struct Released {
    DevicePtr addr = 0;
    size_t size = 0;
    StreamHandle stream = 0;
    bool small = false;
  };

  // MemPool(no_split=True): from now on each segment is one block, sized
  // the request rounded up to 2 MiB, never split.
  void SetNoSplit() { no_split_ = true; }
  bool no_split() const { return no_split_; }
  // The segment a request of `requested` bytes that finds no free block
  // asks the other allocator for: ExternalSegmentBytes, or for a no_split
  // pool the request rounded up to 2 MiB.
  size_t SegmentBytes(size_t requested) const;

  // The best fitting free block of `stream` and of the request's kind
  // (small or large), split as PyTorch splits; nullopt when none fits. In
  // a no_split pool: a free block no larger than SegmentBytes(requested),
  // whole.
  std::optional<Taken> TakeFree(size_t requested, StreamHandle stream);
  // Books a new segment from the other allocator, all of it free, for
  // requests of one kind (`small`: ExternalIsSmall of their blocks; sized
  // ExternalSegmentBytes, or more).
  void AddSegment(DevicePtr addr, size_t size, StreamHandle stream, bool small);
  // Frees the live block at `addr`, merging it with free neighbours.
  // NotFound when no live block starts there.
  absl::StatusOr<Freed> Free(DevicePtr addr);
  // Forgets every segment that is free as a whole, for the caller to give
  // back.
  std::vector<Released> TakeFreeSegments();

  bool empty() const { return segments_.empty(); }
  size_t live_blocks() const { return live_; }
  uint64_t reserved_bytes() const { return reserved_; }
  const std::map<DevicePtr, Segment>& segments() const { return segments_; }

 private:
  // Free blocks by (stream, small, size, address): best fit is the first
  // at or after (stream, small, size, 0).
  using FreeKey = std::tuple<StreamHandle, bool, size_t, DevicePtr>;
  Segment* SegmentOf(DevicePtr addr);

  std::map<DevicePtr, Segment> segments_;
  std::set<FreeKey> free_;
  size_t live_ = 0;
  uint64_t reserved_ = 0;
  bool no_split_ = false;
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_EXTERNAL_POOL_H_
