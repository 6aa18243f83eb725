// Copyright 2026 The GMLake Authors.
//
// The lake-share benchmark (gmlake-replay --lake): two or more processes
// replay real traces against one gmlaked, in turns, like a trainer beside an
// inference engine on one GPU. While one is busy the others sit idle with
// their caches and whatever their trace left live (weights); when the busy
// one needs memory the lake has not got, gmlaked asks the idle ones to give
// back what they cache and do not use.
//
// It reports the node's peak physical bytes (chunks gmlaked created) beside
// the sum of each process's own peak (what separate processes, each with its
// own cache, would hold) and the floor (the most bytes live across all
// processes at once).

#ifndef GMLAKE_TOOLS_LAKE_SHARE_H_
#define GMLAKE_TOOLS_LAKE_SHARE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/vmm.h"
#include "nlohmann/json_fwd.hpp"

namespace gmlake {

struct LakeShareConfig {
  std::vector<std::string> trace_paths;  // one client process each
  int rounds = 2;                        // each client is busy once a round
  std::string backend = "host";          // gmlaked's backend
  // gmlaked's capacity per device; 0: 1.05 x the floor (the GPU that the
  // processes must share), rounded up to chunks.
  uint64_t capacity = 0;
  // gmlaked reclaims cached memory before creating (--prefer_reclaim).
  bool prefer_reclaim = false;
  // gmlaked's --reclaim_timeout, how long a lease waits for idle processes
  // to give memory back (0: gmlaked's default). Tests on busy machines give
  // it a margin.
  absl::Duration reclaim_timeout = absl::ZeroDuration();
  // More gmlaked flags (when it starts one).
  std::vector<std::string> gmlaked_flags;
  std::string conf;     // GMLAKE_CONF for the clients' allocators
  std::string socket;   // an already running gmlaked; empty: start one
  std::string gmlaked;  // path of gmlaked (empty: beside this binary)
  std::string self;     // path of this binary, for the clients
  bool progress = true;
  // How often the run samples gmlaked's Status for LakeShareResult's
  // timeline (0: no timeline).
  absl::Duration sample_every = absl::Milliseconds(20);
};

// The memory calls of `calls` by name ({"map": 3, ...}; event calls and
// nanoseconds left out), and back.
nlohmann::json MemoryCallCounts(const VmmCallSnapshot& calls);
VmmCallSnapshot MemoryCallCountsFrom(const nlohmann::json& counts);

struct LakePhase {
  int round = 0;
  int client = 0;
  std::string trace;
  uint64_t client_reserved_peak = 0;  // the busy client's own peak
  uint64_t node_bytes = 0;            // chunks gmlaked holds after it
  uint64_t floor_bytes = 0;           // most live across processes in it
  uint64_t pressure_requests = 0;     // sent by gmlaked so far
  // gmlaked's counters after the phase, all so far (StatusResponse).
  uint64_t pressure_rounds = 0;
  uint64_t pressure_asked_bytes = 0;
  uint64_t pressure_returned_bytes = 0;
  uint64_t leases_served = 0;
  uint64_t leases_failed = 0;
  uint64_t leased_chunks = 0;
  uint64_t leased_bytes = 0;
  double seconds = 0;
  double start_seconds = 0;  // since the first phase began
  // The busy client's driver calls in the phase (counts only), and before
  // it, while the others were busy (answering pressure).
  VmmCallSnapshot busy_calls;
  VmmCallSnapshot idle_calls;
};

// The node and each process at one moment, from gmlaked's Status.
struct LakeSample {
  double seconds = 0;                   // since the first phase began
  uint64_t node_bytes = 0;              // chunks gmlaked holds, all devices
  std::vector<uint64_t> process_bytes;  // leased to each client, by index
};

struct LakeShareResult {
  std::vector<LakePhase> phases;
  uint64_t capacity_bytes = 0;
  uint64_t node_peak_bytes = 0;
  uint64_t sum_of_process_peaks_bytes = 0;
  uint64_t floor_bytes = 0;
  double node_peak_over_floor = 0;
  std::vector<std::string> process_names;  // the clients' traces, by index
  std::vector<LakeSample> timeline;        // every config.sample_every
};

// The floor and the capacity the benchmark would use, from the traces
// alone (no processes started): for starting gmlaked separately.
absl::StatusOr<LakeShareResult> PlanLakeShare(const LakeShareConfig& config);

// Runs the benchmark: starts gmlaked (unless config.socket names one) and
// one client process per trace, and drives the phases.
absl::StatusOr<LakeShareResult> RunLakeShare(const LakeShareConfig& config);

// The client side, in the process started with --lake_client: connects to
// gmlaked at `socket`, then answers "run" (free what the last run left,
// replay the trace, keep what it leaves live) and "exit" on stdin, one line
// of JSON on stdout per run.
int LakeClientMain(const std::string& socket, const std::string& trace_path,
                   const std::string& conf);

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_LAKE_SHARE_H_
