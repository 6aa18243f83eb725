// Copyright 2026 The GMLake Authors.
//
// The hand-off benchmark (gmlake-handoff): an idle process holds N bytes
// in its cache, leased from gmlaked, and a busy one asks for N bytes, which
// the lake has only through the idle one. This is an RL trainer beside its
// rollout engine, or two models taking turns on one GPU.
//
// gmlaked's capacity is exactly N, so the busy process's malloc(N) makes
// gmlaked ask the holder to give back, wait for it, and lease the chunks
// again. The time from the malloc to its return is split into:
//   reclaim   gmlaked waiting for the holder (its pressure_wait_seconds),
//             which includes the holder's unmaps and releases;
//   import    the busy process importing each chunk's descriptor;
//   map       mapping them;
//   access    setting access on them;
//   lease and transfer (the rest): the Lease call, creating or exporting
//             descriptors, sending them (SCM_RIGHTS) and the allocator.
// Call counts come with each phase, for tests to assert.

#ifndef GMLAKE_TOOLS_HANDOFF_H_
#define GMLAKE_TOOLS_HANDOFF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/vmm.h"

namespace gmlake {

struct HandoffConfig {
  uint64_t bytes = uint64_t{1} << 30;     // what is handed off
  std::string backend = "host";           // gmlaked's
  uint64_t chunk_size = 0;                // gmlaked's --chunk_size (0: its own)
  std::vector<std::string> daemon_flags;  // more flags for gmlaked
  std::string conf;     // GMLAKE_CONF of both processes' allocators
  std::string gmlaked;  // path (empty: beside this binary)
  std::string self;     // this binary, started again as the holder
  bool progress = true;
};

// One phase of the hand-off: seconds, and the driver calls in it.
struct HandoffPhase {
  std::string name;
  double seconds = 0;
  uint64_t calls = 0;
};

struct HandoffResult {
  uint64_t bytes = 0;
  uint64_t chunk_size = 0;  // gmlaked's unit
  uint64_t chunks = 0;      // the chunks handed over (the busy one's imports)
  double total_seconds = 0;
  std::vector<HandoffPhase> phases;  // in the order of the header
  VmmCallSnapshot taker_calls;       // the busy process's, in its malloc
  VmmCallSnapshot holder_calls;      // the holder's, while it gave back
  uint64_t pressure_rounds = 0;      // gmlaked's, during the malloc
  // gmlaked's own figure for the lease (StatusResponse.handoff_seconds).
  double daemon_handoff_seconds = 0;
  uint64_t holder_chunks_returned = 0;
  std::string backend_description;  // gmlaked's backend
};

// Runs one hand-off: starts gmlaked and the holder, times the malloc.
absl::StatusOr<HandoffResult> RunHandoff(const HandoffConfig& config);

// The holder process (gmlake-handoff --handoff_holder): leases `bytes` from
// the gmlaked at `socket` through an allocator, frees them into its cache,
// prints "ready", then answers "stats" with one JSON line (its driver calls
// and chunks returned since "ready") and exits on "exit".
int HandoffHolderMain(const std::string& socket, uint64_t bytes,
                      const std::string& conf);

// A table of the result for people.
std::string FormatHandoff(const HandoffResult& result);
// The result as one JSON object (numbers as numbers).
std::string HandoffJson(const HandoffResult& result);

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_HANDOFF_H_
