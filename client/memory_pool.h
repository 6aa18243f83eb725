// Copyright 2026 The GMLake Authors.
//
// MemoryPools: the books of private memory pools (PyTorch's MempoolId_t),
// as CUDA graph capture and torch.cuda.MemPool use them. Pure policy: which
// pool a stream's allocations go to, how many graphs hold a pool, and
// whether a capture is under way. No memory, no locks, no driver calls: the
// DeviceAllocator owns one under its lock and does what it says.
//
// A pool is named by PyTorch's id pair and known inside the allocator by a
// tag (1, 2, ...; 0 is the default memory of each stream). Tags are never
// reused, so a block of a released pool can never be taken for a new one.
//   CreateOrIncref  a graph or MemPool takes (a share of) the pool
//   BeginAllocateTo while a stream is captured: the allocations of every
//                   stream the filter accepts come from the pool
//   EndAllocateTo   the capture ended
//   Release         a graph or MemPool let go; at zero the pool is retired:
//                   its free memory goes back to the lake, and each block
//                   still live follows when freed.
//   SetUseOnOom     MemPool(use_on_oom=True): when default memory has
//                   nothing left for a request, the pool's free blocks may
//                   serve it (PyTorch's last resort before out of memory).
//   SetNoSplit      MemPool(no_split=True): each allocation of the pool is
//                   a segment of its own, never split (NCCL registers
//                   windows per segment).

#ifndef GMLAKE_CLIENT_MEMORY_POOL_H_
#define GMLAKE_CLIENT_MEMORY_POOL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "common/vmm.h"

namespace gmlake {

// PyTorch's MempoolId_t: {graph id, 0} for a graph's own pool, {0, n} for
// one made by graph_pool_handle() or MemPool.
using MempoolId = std::pair<uint64_t, uint64_t>;
// Which streams a capture routes into its pool.
using StreamFilter = std::function<bool(StreamHandle)>;

class MemoryPools {
 public:
  // The pool's tag, made on first use with one reference; later calls add
  // one.
  uint32_t CreateOrIncref(MempoolId id);
  // Drops one reference. The tag when that was the last (the pool is
  // retired and forgotten), else nullopt; nullopt too for an unknown id.
  std::optional<uint32_t> Release(MempoolId id);
  // Routes the streams `filter` accepts into pool `id` (made with one
  // reference if unknown, as PyTorch's beginAllocateToPool does) until
  // EndAllocateTo(id). The latest route wins where several accept a stream.
  uint32_t BeginAllocateTo(MempoolId id, StreamFilter filter);
  // Ends every route into `id`. False if there was none.
  bool EndAllocateTo(MempoolId id);

  // The tag a new allocation on `stream` goes to (0: default memory).
  uint32_t Route(StreamHandle stream) const;
  // While any route is open, the allocator must make no event record or
  // query and no host wait (stream capture forbids them).
  bool capturing() const { return !routes_.empty(); }
  // The tag of a live pool, nullopt if unknown.
  std::optional<uint32_t> TagOf(MempoolId id) const;
  // The id of the live pool with `tag`, nullopt for 0 (default memory) and
  // for a retired pool's tag. Linear: for snapshots, not the hot path.
  std::optional<MempoolId> IdOf(uint32_t tag) const;
  int use_count(MempoolId id) const;
  size_t size() const { return pools_.size(); }
  // Marks a live pool as lending its free blocks on a last resort. False
  // for an unknown pool.
  bool SetUseOnOom(MempoolId id, bool use);
  // The tags of the live pools so marked, oldest first.
  std::vector<uint32_t> UseOnOomTags() const;
  // Marks a live pool as splitting no block. False for an unknown pool.
  bool SetNoSplit(MempoolId id);
  // Whether the live pool with `tag` is so marked (false for 0 and for a
  // retired pool).
  bool NoSplit(uint32_t tag) const;

 private:
  struct Entry {
    uint32_t tag = 0;
    int refs = 0;
    bool use_on_oom = false;
  };
  struct Route_ {
    MempoolId id;
    uint32_t tag;
    StreamFilter filter;
  };
  std::map<MempoolId, Entry> pools_;
  std::vector<Route_> routes_;
  // The tags of live no_split pools: looked up on each malloc routed to a
  // pool, few.
  std::vector<uint32_t> no_split_tags_;
  uint32_t next_tag_ = 1;
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_MEMORY_POOL_H_
