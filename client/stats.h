// Copyright 2026 The GMLake Authors.
//
// AllocatorStats: PyTorch's statistics, with PyTorch's names and meanings,
// plus GMLake's own. docs/stats.md explains each.

#ifndef GMLAKE_CLIENT_STATS_H_
#define GMLAKE_CLIENT_STATS_H_

#include <cstdint>
#include <string>

#include "common/vmm.h"

namespace gmlake {

// PyTorch's Stat: a current value, its peak since the last reset of peaks,
// and the total of increases (allocated) and decreases (freed) since the
// last reset of accumulated figures.
struct StatPair {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;
  void Add(int64_t delta) {
    current += delta;
    if (delta > 0) {
      allocated += delta;
    } else {
      freed -= delta;
    }
    if (current > peak) peak = current;
  }
  void ResetPeak() { peak = current; }
  void ResetAccumulated() { allocated = freed = 0; }
  // Adds another device's figures (peaks are summed: an upper bound).
  void Merge(const StatPair& o);
};

// A statistic PyTorch splits by pool. The inherited figures are the "all"
// pool; `small` is PyTorch's "small_pool" (requests up to small_size, served
// from the small arena) and `large` its "large_pool" (the rest).
struct PooledStat : StatPair {
  StatPair large;
  StatPair small;
  void Add(int64_t delta, bool is_small) {
    StatPair::Add(delta);
    (is_small ? small : large).Add(delta);
  }
  // Moves `bytes` between the pools; "all" stays as it is.
  void Shift(int64_t bytes, bool to_small) {
    (to_small ? large : small).Add(-bytes);
    (to_small ? small : large).Add(bytes);
  }
  void ResetPeak();
  void ResetAccumulated();
  void Merge(const PooledStat& o);
};

struct AllocatorStats {
  // PyTorch's (torch.cuda.memory_stats()):
  PooledStat allocated_bytes;  // blocks handed out (512-byte rounded sizes)
  PooledStat requested_bytes;  // what callers asked for
  PooledStat active_bytes;     // allocated + freed but awaiting other streams
  // Chunks held. small: those mapped in the small arena; large: the rest
  // (mapped in the large arena, or held unmapped).
  PooledStat reserved_bytes;
  PooledStat inactive_split_bytes;  // free bytes inside mapped segments
  PooledStat inactive_split;        // free blocks inside mapped segments
  PooledStat allocation;            // live allocations (count)
  PooledStat segment;               // mapped segments (count)
  PooledStat active;                // active blocks (count)
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
  int64_t num_sync_all_streams = 0;  // waits for every stream of the device
  int64_t num_mallocs = 0;
  int64_t num_frees = 0;
  // GMLake's own:
  int64_t stitches = 0;         // mappings made to serve a request
  int64_t stitched_bytes = 0;   // bytes mapped by them
  int64_t chunks_stolen = 0;    // pages moved from free blocks into stitches
  int64_t chunks_acquired = 0;  // chunks taken from the lake
  int64_t chunks_returned = 0;  // chunks given back to the lake
  // Time malloc spent waiting for the lake's chunks (AcquireBytes: the
  // embedded lake's creates, or gmlaked's lease, claim and imports), us.
  int64_t acquire_us = 0;
  // Wall time mallocs spent in the slow path (no free block fit: growing,
  // stitching, retrying), us. It holds acquire_us and the slow path's
  // driver calls; the rest is the allocator's own planning.
  int64_t slow_path_us = 0;
  int64_t cross_stream_reuses = 0;
  // Times malloc or free blocked the calling thread until GPU work finished
  // (an event or stream synchronisation). The design keeps this at 0 for a
  // program on one stream: docs/design.md, "No waiting in malloc or free".
  int64_t host_waits = 0;
  // The same, for empty_cache and reclaims (memory leaving the process).
  int64_t reclaim_waits = 0;
  // Reclaims the lake (or set_capacity) asked for, and what they returned:
  // each returns at least what is asked (whole chunks), or everything free.
  // empty_cache is not counted.
  int64_t reclaims = 0;
  int64_t reclaim_asked_bytes = 0;
  int64_t reclaim_returned_bytes = 0;
  // Free cache given back by a malloc that found no other way, to be taken
  // again in chunks the request can use (another arena's, another size).
  int64_t remade_bytes = 0;
  // Stitches leave the chunks they take mapped where they were freed
  // ("dormant"), so the same shape later gets them back with no driver
  // call (a reactivation).
  int64_t dormant_chunks = 0;  // such mappings now
  int64_t reactivations = 0;   // requests served from dormant mappings
  // Slow paths whose last pages were a free chunk larger than them, mapped
  // whole: its extra pages a free tail, no new chunk (client/chunk_cover.h).
  int64_t covers = 0;
  int64_t cached_chunks = 0;     // held but unmapped
  VmmCallSnapshot driver_calls;  // of the backend, filled in by stats()

  // Adds another device's figures (peaks are summed: an upper bound).
  void Merge(const AllocatorStats& o);
  void ResetPeaks();
  // PyTorch's reset_accumulated_memory_stats: every allocated/freed total,
  // num_alloc_retries and num_ooms.
  void ResetAccumulated();
  // One JSON object with PyTorch's flat keys ("allocated_bytes.all.current",
  // "reserved_bytes.small_pool.freed", "num_ooms", ...) and GMLake's
  // ("gmlake.stitches", "gmlake.driver_calls.map", ...).
  std::string ToJson() const;
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_STATS_H_
