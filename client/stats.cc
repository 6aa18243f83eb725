// Copyright 2026 The GMLake Authors.

#include "client/stats.h"

#include "absl/strings/str_cat.h"

namespace gmlake {
namespace {

void AddStat(std::string* out, const char* name, const char* pool,
             const StatPair& p) {
  for (const auto& [metric, value] :
       {std::pair<const char*, int64_t>{"current", p.current},
        {"peak", p.peak},
        {"allocated", p.allocated},
        {"freed", p.freed}}) {
    absl::StrAppend(out, "\"", name, pool, metric, "\":", value, ",");
  }
}

void AddPooled(std::string* out, const char* name, const PooledStat& p) {
  AddStat(out, name, ".all.", p);
  AddStat(out, name, ".large_pool.", p.large);
  AddStat(out, name, ".small_pool.", p.small);
}

}  // namespace

void StatPair::Merge(const StatPair& o) {
  current += o.current;
  peak += o.peak;
  allocated += o.allocated;
  freed += o.freed;
}

void PooledStat::ResetPeak() {
  StatPair::ResetPeak();
  large.ResetPeak();
  small.ResetPeak();
}

void PooledStat::ResetAccumulated() {
  StatPair::ResetAccumulated();
  large.ResetAccumulated();
  small.ResetAccumulated();
}

void PooledStat::Merge(const PooledStat& o) {
  StatPair::Merge(o);
  large.Merge(o.large);
  small.Merge(o.small);
}

void AllocatorStats::Merge(const AllocatorStats& o) {
  allocated_bytes.Merge(o.allocated_bytes);
  requested_bytes.Merge(o.requested_bytes);
  active_bytes.Merge(o.active_bytes);
  reserved_bytes.Merge(o.reserved_bytes);
  inactive_split_bytes.Merge(o.inactive_split_bytes);
  inactive_split.Merge(o.inactive_split);
  allocation.Merge(o.allocation);
  segment.Merge(o.segment);
  active.Merge(o.active);
  num_alloc_retries += o.num_alloc_retries;
  num_ooms += o.num_ooms;
  num_sync_all_streams += o.num_sync_all_streams;
  num_mallocs += o.num_mallocs;
  num_frees += o.num_frees;
  stitches += o.stitches;
  stitched_bytes += o.stitched_bytes;
  chunks_stolen += o.chunks_stolen;
  chunks_acquired += o.chunks_acquired;
  chunks_returned += o.chunks_returned;
  cross_stream_reuses += o.cross_stream_reuses;
  host_waits += o.host_waits;
  reclaim_waits += o.reclaim_waits;
  reclaims += o.reclaims;
  reclaim_asked_bytes += o.reclaim_asked_bytes;
  reclaim_returned_bytes += o.reclaim_returned_bytes;
  remade_bytes += o.remade_bytes;
  acquire_us += o.acquire_us;
  slow_path_us += o.slow_path_us;
  dormant_chunks += o.dormant_chunks;
  reactivations += o.reactivations;
  covers += o.covers;
  cached_chunks += o.cached_chunks;
}

void AllocatorStats::ResetPeaks() {
  for (PooledStat* p : {&allocated_bytes, &requested_bytes, &active_bytes,
                        &reserved_bytes, &inactive_split_bytes, &inactive_split,
                        &allocation, &segment, &active}) {
    p->ResetPeak();
  }
}

void AllocatorStats::ResetAccumulated() {
  for (PooledStat* p : {&allocated_bytes, &requested_bytes, &active_bytes,
                        &reserved_bytes, &inactive_split_bytes, &inactive_split,
                        &allocation, &segment, &active}) {
    p->ResetAccumulated();
  }
  num_alloc_retries = 0;
  num_ooms = 0;
}

std::string AllocatorStats::ToJson() const {
  std::string out = "{";
  AddPooled(&out, "allocated_bytes", allocated_bytes);
  AddPooled(&out, "requested_bytes", requested_bytes);
  AddPooled(&out, "active_bytes", active_bytes);
  AddPooled(&out, "reserved_bytes", reserved_bytes);
  AddPooled(&out, "inactive_split_bytes", inactive_split_bytes);
  AddPooled(&out, "inactive_split", inactive_split);
  AddPooled(&out, "allocation", allocation);
  AddPooled(&out, "segment", segment);
  AddPooled(&out, "active", active);
  // GMLake never refuses to split a block, so nothing is "oversize" in
  // PyTorch's sense (max_split_size: -1, no limit, as PyTorch's default).
  AddStat(&out, "oversize_allocations", ".", StatPair());
  AddStat(&out, "oversize_segments", ".", StatPair());
  absl::StrAppend(
      &out, "\"max_split_size\":-1,\"num_alloc_retries\":", num_alloc_retries,
      ",\"num_ooms\":", num_ooms,
      ",\"num_sync_all_streams\":", num_sync_all_streams,
      ",\"num_device_alloc\":",
      driver_calls.count[static_cast<int>(VmmCall::kMap)],
      ",\"num_device_free\":",
      driver_calls.count[static_cast<int>(VmmCall::kUnmap)],
      ",\"gmlake.mallocs\":", num_mallocs, ",\"gmlake.frees\":", num_frees,
      ",\"gmlake.stitches\":", stitches,
      ",\"gmlake.stitched_bytes\":", stitched_bytes,
      ",\"gmlake.chunks_stolen\":", chunks_stolen,
      ",\"gmlake.chunks_acquired\":", chunks_acquired,
      ",\"gmlake.chunks_returned\":", chunks_returned,
      ",\"gmlake.acquire_us\":", acquire_us,
      ",\"gmlake.slow_path_us\":", slow_path_us,
      ",\"gmlake.cross_stream_reuses\":", cross_stream_reuses,
      ",\"gmlake.host_waits\":", host_waits,
      ",\"gmlake.reclaim_waits\":", reclaim_waits,
      ",\"gmlake.reclaims\":", reclaims,
      ",\"gmlake.reclaim_asked_bytes\":", reclaim_asked_bytes,
      ",\"gmlake.reclaim_returned_bytes\":", reclaim_returned_bytes,
      ",\"gmlake.remade_bytes\":", remade_bytes,
      ",\"gmlake.dormant_chunks\":", dormant_chunks,
      ",\"gmlake.reactivations\":", reactivations,
      ",\"gmlake.covers\":", covers,
      ",\"gmlake.cached_chunks\":", cached_chunks);
  for (int i = 0; i < kNumVmmCalls; ++i) {
    absl::StrAppend(&out, ",\"gmlake.driver_calls.",
                    VmmCallName(static_cast<VmmCall>(i)),
                    "\":", driver_calls.count[i]);
  }
  // Wall time in each kind of call, from every thread of the process.
  for (int i = 0; i < kNumVmmCalls; ++i) {
    absl::StrAppend(&out, ",\"gmlake.driver_time_us.",
                    VmmCallName(static_cast<VmmCall>(i)),
                    "\":", driver_calls.nanos[i] / 1000);
  }
  absl::StrAppend(
      &out, ",\"gmlake.driver_calls.total\":", driver_calls.MemoryCalls(),
      ",\"gmlake.driver_us\":", driver_calls.TotalNanos() / 1000, "}");
  return out;
}

}  // namespace gmlake
