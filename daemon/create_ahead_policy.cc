// Copyright 2026 The GMLake Authors.

#include "daemon/create_ahead_policy.h"

#include <algorithm>

namespace gmlake {

void NoteGrowth(const CreateAheadPolicy& policy, GrowthStreak* streak,
                uint64_t grown_bytes, absl::Time now) {
  if (grown_bytes == 0) return;
  if (StreakEnded(policy, *streak, now)) streak->bytes = 0;
  streak->bytes += grown_bytes;
  streak->last = now;
}

bool StreakEnded(const CreateAheadPolicy& policy, const GrowthStreak& streak,
                 absl::Time now) {
  return streak.last == absl::InfinitePast() ||
         now - streak.last >= policy.streak_gap;
}

uint64_t StockTarget(const CreateAheadPolicy& policy,
                     const GrowthStreak& streak, uint64_t capacity_bytes,
                     absl::Time now) {
  if (!policy.enabled() || StreakEnded(policy, streak, now)) return 0;
  uint64_t cap = policy.max_bytes;
  if (policy.capacity_divisor > 0) {
    cap = std::min(cap, capacity_bytes / policy.capacity_divisor);
  }
  return std::min(cap, streak.bytes);
}

uint64_t ChunksToCreateAhead(const CreateAheadPolicy& policy,
                             const GrowthStreak& streak, uint64_t chunk_bytes,
                             uint64_t stock_bytes, uint64_t room_bytes,
                             uint64_t capacity_bytes, absl::Time now) {
  if (chunk_bytes == 0) return 0;
  const uint64_t target = StockTarget(policy, streak, capacity_bytes, now);
  if (stock_bytes >= target) return 0;
  const uint64_t want = std::min(target - stock_bytes, room_bytes);
  return std::min(want / chunk_bytes, policy.batch_chunks);
}

}  // namespace gmlake
