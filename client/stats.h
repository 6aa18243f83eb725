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

// A current value and its peak since the last reset.
struct StatPair {
  int64_t current = 0;
  int64_t peak = 0;
  void Add(int64_t delta) {
    current += delta;
    if (current > peak) peak = current;
  }
  void ResetPeak() { peak = current; }
};

struct AllocatorStats {
  // PyTorch's (torch.cuda.memory_stats(), the "all" pool):
  StatPair allocated_bytes;  // blocks handed out (512-byte rounded sizes)
  StatPair requested_bytes;  // what callers asked for
  StatPair active_bytes;     // allocated + freed but awaiting other streams
  StatPair reserved_bytes;   // chunks held (mapped or cached unmapped)
  StatPair inactive_split_bytes;  // free bytes inside mapped segments
  StatPair allocation;            // live allocations (count)
  StatPair segment;               // mapped segments (count)
  StatPair active;                // active blocks (count)
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
  int64_t num_mallocs = 0;
  int64_t num_frees = 0;
  // GMLake's own:
  int64_t stitches = 0;         // mappings made to serve a request
  int64_t stitched_bytes = 0;   // bytes mapped by them
  int64_t chunks_stolen = 0;    // pages moved from free blocks into stitches
  int64_t chunks_acquired = 0;  // chunks taken from the lake
  int64_t chunks_returned = 0;  // chunks given back to the lake
  int64_t cross_stream_reuses = 0;
  // Times malloc or free blocked the calling thread until GPU work finished
  // (an event or stream synchronisation). The design keeps this at 0 for a
  // program on one stream: docs/design.md, "No waiting in malloc or free".
  int64_t host_waits = 0;
  // The same, for empty_cache and reclaims (memory leaving the process).
  int64_t reclaim_waits = 0;
  // Stitches leave the chunks they take mapped where they were freed
  // ("dormant"), so the same shape later gets them back with no driver
  // call (a reactivation).
  int64_t dormant_chunks = 0;    // such mappings now
  int64_t reactivations = 0;     // requests served from dormant mappings
  int64_t cached_chunks = 0;     // held but unmapped
  VmmCallSnapshot driver_calls;  // of the backend, filled in by stats()

  // Adds another device's figures (peaks are summed: an upper bound).
  void Merge(const AllocatorStats& o);
  void ResetPeaks();
  // One JSON object with PyTorch's flat keys ("allocated_bytes.all.current",
  // ...) and GMLake's ("gmlake.stitches", "gmlake.driver_calls.map", ...).
  std::string ToJson() const;
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_STATS_H_
