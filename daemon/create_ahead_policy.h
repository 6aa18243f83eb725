// Copyright 2026 The GMLake Authors.
//
// The create-ahead policy: how many chunks gmlaked creates, exports and
// keeps free, of the size a growing session leases, before that session
// asks for them.
//
// A fresh chunk costs gmlaked a create and its first export (~18 + ~63 us
// on an H200, docs/benchmarks.md) on the lease's own path, while the
// process waits; the client's import, map and access come after. Created
// ahead, on gmlaked's own thread while the process works, the next lease is
// served from free chunks whose export is already made (ChunkBooks keeps it
// until their first claim), and the process pays only its own driver
// calls, as with the embedded lake.
//
//   * A growth streak of a device and chunk size: the bytes that leases
//     took from new chunks (created for them, or created ahead), while no
//     gap of `streak_gap` separates them. The stock (free chunks created
//     ahead and not leased yet) follows the streak: as much as the streak
//     grew so far, so that a session growing by G costs O(log G) waits on
//     a creation, and a short growth leaves little behind.
//   * At most `max_bytes`, and at most 1/`capacity_divisor` of the
//     device's capacity: what a pause leaves unused is bounded on a small
//     lake too (a demo's 18 GiB lake: 144 MiB).
//   * Only in the room nobody has taken: free chunks are never released to
//     make room for the stock, so it never costs a pressure round or another
//     session its chunks.
//   * A streak that pauses for `streak_gap` ends: its stock goes back to the
//     driver, so memory does not pay for it past the growth.
//   * In batches of at most `batch_chunks`, looking again between them: a
//     lease never waits long on capacity set aside for chunks being made.
//
// Pure: no lake, no clock. Lake's create-ahead worker (lake_create_ahead.cc)
// feeds it the books and the time and creates what it says.

#ifndef GMLAKE_DAEMON_CREATE_AHEAD_POLICY_H_
#define GMLAKE_DAEMON_CREATE_AHEAD_POLICY_H_

#include <cstdint>

#include "absl/time/time.h"

namespace gmlake {

struct CreateAheadPolicy {
  uint64_t max_bytes = 0;  // --create_ahead; 0: off
  uint64_t capacity_divisor = 128;
  absl::Duration streak_gap = absl::Seconds(1);
  uint64_t batch_chunks = 16;

  bool enabled() const { return max_bytes > 0; }
};

// One device's growth in chunks of one size.
struct GrowthStreak {
  uint64_t bytes = 0;  // grown in this streak
  absl::Time last = absl::InfinitePast();
};

// A lease took `grown_bytes` of new chunks at `now`: the streak goes on, or
// a new one starts after a gap.
void NoteGrowth(const CreateAheadPolicy& policy, GrowthStreak* streak,
                uint64_t grown_bytes, absl::Time now);

// Whether the streak ended (no growth for streak_gap): its stock goes back.
bool StreakEnded(const CreateAheadPolicy& policy, const GrowthStreak& streak,
                 absl::Time now);

// The stock to keep for the streak, in bytes (0 once it ended).
uint64_t StockTarget(const CreateAheadPolicy& policy,
                     const GrowthStreak& streak, uint64_t capacity_bytes,
                     absl::Time now);

// Chunks of `chunk_bytes` to create now: the target less the stock there
// is, within `room_bytes` (capacity neither created nor set aside), at most
// one batch.
uint64_t ChunksToCreateAhead(const CreateAheadPolicy& policy,
                             const GrowthStreak& streak, uint64_t chunk_bytes,
                             uint64_t stock_bytes, uint64_t room_bytes,
                             uint64_t capacity_bytes, absl::Time now);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_CREATE_AHEAD_POLICY_H_
