// Copyright 2026 The GMLake Authors.
//
// Replays an allocation trace through a fresh GMLake allocator and measures
// what it held, what driver calls it made and how long each call took.

#ifndef GMLAKE_TOOLS_REPLAY_H_
#define GMLAKE_TOOLS_REPLAY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/allocator.h"
#include "client/stats.h"
#include "common/vmm.h"
#include "tools/trace.h"

namespace gmlake {

struct ReplayConfig {
  std::string backend = "host";  // host | accounting | cuda | auto
  std::string conf;              // extra GMLAKE_CONF for the allocator
  bool time_ops = false;         // time every malloc/free
  // Check the allocator's books every this many events (0: never).
  uint64_t check_every = 0;
  // Record what GMLake reserves at about this many evenly spaced points of
  // the replay (0: none), for plots (ReplayResult::reserved_timeline).
  size_t timeline_points = 0;
};

// GMLake's reserved bytes once `events` events of the trace had replayed.
struct ReservedSample {
  uint64_t events;
  uint64_t reserved_bytes;
};

struct ReplayResult {
  bool completed = false;  // false: out of memory at `failed_event`
  uint64_t failed_event = 0;
  std::string error;
  uint64_t peak_reserved_bytes = 0;
  VmmCallSnapshot calls;              // memory-changing calls, whole replay
  VmmCallSnapshot calls_second_half;  // from the middle event on
  AllocatorStats stats;               // at the last event
  // The most bytes live among the first half of the events (the second
  // half's peak is the trace's, when higher).
  uint64_t first_half_peak_live_bytes = 0;
  // The fewest memory calls any allocator with this chunk size makes to
  // map what the second half adds to the first half's live peak: one
  // create and one map per chunk.
  uint64_t calls_for_second_half_peak = 0;
  int64_t allocated_after_frees = 0;  // after freeing what the trace left
  double ns_per_op_p50 = 0;           // over the second half (time_ops)
  double ns_per_op_p99 = 0;
  // What the two clock reads around each call cost by themselves (p50);
  // included in the figures above, as in PyTorch's pytorch_hotpath.py.
  double timer_ns_p50 = 0;
  double seconds = 0;
  // With ReplayConfig::timeline_points: from 0 events to the last one.
  std::vector<ReservedSample> reserved_timeline;
};

// Replays `trace`'s events onto `allocator` (device 0). `ptr` holds the
// live pointers by trace id (trace.num_ids of them, 0 where none), so that
// a caller replaying the trace again frees first what the last run left.
// Stops at the first failure and returns it.
absl::Status ReplayEvents(const Trace& trace, Allocator* allocator,
                          std::vector<DevicePtr>* ptr);

// Replays `trace` once with `capacity` bytes per device (0: none). Errors
// other than out-of-memory (bad backend, broken books) are returned as
// statuses; out-of-memory is a result with completed == false.
absl::StatusOr<ReplayResult> ReplayTrace(const Trace& trace,
                                         const ReplayConfig& config,
                                         uint64_t capacity);

// The smallest capacity (a multiple of `resolution` above `lo`, at most
// `hi`) under which the whole trace replays; `hi` must be known to work.
// `progress` is told each probe.
absl::StatusOr<uint64_t> BisectMinCapacity(
    const Trace& trace, const ReplayConfig& config, uint64_t lo, uint64_t hi,
    uint64_t resolution,
    const std::function<void(uint64_t capacity, bool ok)>& progress);

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_REPLAY_H_
