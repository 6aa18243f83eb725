// Copyright 2026 The GMLake Authors.

#include "client/stats.h"

#include "absl/strings/str_cat.h"

namespace gmlake {
namespace {

void AddPair(std::string* out, const char* name, const StatPair& p) {
  absl::StrAppend(out, "\"", name, ".all.current\":", p.current, ",\"", name,
                  ".all.peak\":", p.peak, ",");
}

void MergePair(StatPair* a, const StatPair& b) {
  a->current += b.current;
  a->peak += b.peak;
}

}  // namespace

void AllocatorStats::Merge(const AllocatorStats& o) {
  MergePair(&allocated_bytes, o.allocated_bytes);
  MergePair(&requested_bytes, o.requested_bytes);
  MergePair(&active_bytes, o.active_bytes);
  MergePair(&reserved_bytes, o.reserved_bytes);
  MergePair(&inactive_split_bytes, o.inactive_split_bytes);
  MergePair(&allocation, o.allocation);
  MergePair(&segment, o.segment);
  MergePair(&active, o.active);
  num_alloc_retries += o.num_alloc_retries;
  num_ooms += o.num_ooms;
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
  dormant_chunks += o.dormant_chunks;
  reactivations += o.reactivations;
  cached_chunks += o.cached_chunks;
}

void AllocatorStats::ResetPeaks() {
  for (StatPair* p :
       {&allocated_bytes, &requested_bytes, &active_bytes, &reserved_bytes,
        &inactive_split_bytes, &allocation, &segment, &active}) {
    p->ResetPeak();
  }
}

std::string AllocatorStats::ToJson() const {
  std::string out = "{";
  AddPair(&out, "allocated_bytes", allocated_bytes);
  AddPair(&out, "requested_bytes", requested_bytes);
  AddPair(&out, "active_bytes", active_bytes);
  AddPair(&out, "reserved_bytes", reserved_bytes);
  AddPair(&out, "inactive_split_bytes", inactive_split_bytes);
  AddPair(&out, "allocation", allocation);
  AddPair(&out, "segment", segment);
  AddPair(&out, "active", active);
  absl::StrAppend(
      &out, "\"num_alloc_retries\":", num_alloc_retries,
      ",\"num_ooms\":", num_ooms, ",\"gmlake.mallocs\":", num_mallocs,
      ",\"gmlake.frees\":", num_frees, ",\"gmlake.stitches\":", stitches,
      ",\"gmlake.stitched_bytes\":", stitched_bytes,
      ",\"gmlake.chunks_stolen\":", chunks_stolen,
      ",\"gmlake.chunks_acquired\":", chunks_acquired,
      ",\"gmlake.chunks_returned\":", chunks_returned,
      ",\"gmlake.cross_stream_reuses\":", cross_stream_reuses,
      ",\"gmlake.host_waits\":", host_waits,
      ",\"gmlake.reclaim_waits\":", reclaim_waits,
      ",\"gmlake.dormant_chunks\":", dormant_chunks,
      ",\"gmlake.reactivations\":", reactivations,
      ",\"gmlake.cached_chunks\":", cached_chunks);
  for (int i = 0; i < kNumVmmCalls; ++i) {
    absl::StrAppend(&out, ",\"gmlake.driver_calls.",
                    VmmCallName(static_cast<VmmCall>(i)),
                    "\":", driver_calls.count[i]);
  }
  absl::StrAppend(
      &out, ",\"gmlake.driver_calls.total\":", driver_calls.MemoryCalls(), "}");
  return out;
}

}  // namespace gmlake
