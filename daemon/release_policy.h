// Copyright 2026 The GMLake Authors.
//
// The release policy: which free chunks gmlaked gives back to the driver on
// its own, so that memory its clients no longer use returns to the node
// (an inference server, a notebook, anything that does not lease from the
// lake) without anyone running `gmlakectl trim`.
//
//   * A free chunk that has not been leased for `idle_after` goes back.
//   * On a device no one uses (no session open, no chunk of it leased:
//     the last session ended), every free chunk goes back at the
//     next round (rounds come about once a second), whatever its idle
//     time: a job that ended leaves the card to whoever comes next (a
//     plain PyTorch process), while sessions that still run keep their
//     free chunks warm for `idle_after`.
//   * Never below the floor: a device keeps at least `floor_bytes` created
//     (--precreate), whether leased or free. The free chunks that the floor
//     keeps are the most recently used ones; the longest idle go first.
//     Chunks have sizes (chunk_books.h): one goes only if the device stays
//     at or above the floor without it.
//   * At most `max_chunks_per_round` per device per round, so that one
//     round (zeroing, release, a driver call per chunk) does not hold up
//     the daemon's loop for long; the next round takes the rest.
//
// Pure: no lake, no clock. Lake::ReleaseIdle is the mechanism that feeds
// it the books and the time and releases what it picks; FillStatus uses
// the same plan to tell operators what is held and when it will go.

#ifndef GMLAKE_DAEMON_RELEASE_POLICY_H_
#define GMLAKE_DAEMON_RELEASE_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace gmlake {

struct ReleasePolicy {
  // How long a chunk stays free before it goes back; zero: never (only
  // `gmlakectl trim` releases). --release_idle.
  absl::Duration idle_after = absl::Seconds(60);
  size_t max_chunks_per_round = 4096;

  bool enabled() const { return idle_after > absl::ZeroDuration(); }
};

// A free chunk, since when it is free, and its size.
struct FreeChunk {
  uint64_t id = 0;
  absl::Time free_since;
  uint64_t bytes = 0;
};

// One device's books, as the policy needs them.
struct DeviceHoldings {
  uint64_t created_bytes = 0;  // free + leased + scrubbing
  uint64_t floor_bytes = 0;    // kept however idle (--precreate)
  // Some chunk of the device is leased or being leased, or a session is
  // open (Lake::HoldingsLocked).
  bool in_use = true;
  std::vector<FreeChunk> free;  // every free chunk, in any order
};

struct ReleasePlan {
  // To release now, longest idle first.
  std::vector<uint64_t> release;
  uint64_t release_bytes = 0;
  // Free bytes the floor keeps (never released while it holds).
  uint64_t floor_kept_bytes = 0;
  // Free bytes above the floor not released in this round, and when the
  // first of them is due (InfiniteFuture when none is, or never).
  uint64_t later_bytes = 0;
  absl::Time next_due = absl::InfiniteFuture();
};

ReleasePlan PlanRelease(const ReleasePolicy& policy,
                        const DeviceHoldings& device, absl::Time now);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_RELEASE_POLICY_H_
