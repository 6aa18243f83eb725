// Copyright 2026 The GMLake Authors.

#include "client/chunk_sizing.h"

#include <algorithm>

namespace gmlake {

std::vector<ChunkRun> PlanChunks(uint64_t bytes, const ChunkSizing& sizing) {
  std::vector<ChunkRun> runs;
  if (bytes == 0 || sizing.unit == 0) return runs;
  // base rounded down to whole units, at least one.
  const uint64_t base =
      std::max<uint64_t>(sizing.base / sizing.unit, 1) * sizing.unit;
  const uint64_t split = std::max<uint64_t>(sizing.min_split, 1);
  uint64_t size = base;
  // Doubling while the doubled size still fits `split` times (divided, not
  // multiplied: no overflow) and stays within large_chunk.
  while (size <= sizing.large_chunk / 2 && size * 2 <= bytes / split) {
    size *= 2;
  }
  uint64_t left = bytes;
  if (size > base) {
    runs.push_back({size, left / size});
    left %= size;
  }
  if (left >= base) {
    runs.push_back({base, left / base});
    left %= base;
  }
  const uint64_t rest = sizing.rest_chunk / sizing.unit * sizing.unit;
  if (rest != 0 && rest < base && left >= rest) {
    runs.push_back({rest, left / rest});
    left %= rest;
  }
  // The last piece, whole units (bytes is a multiple of unit).
  if (left > 0) runs.push_back({left, 1});
  return runs;
}

ChunkSizing ForHeld(const ChunkSizing& sizing, uint64_t held) {
  ChunkSizing out = sizing;
  if (sizing.held_divisor == 0 || sizing.held_max == 0) return out;
  uint64_t bound = std::min(held / sizing.held_divisor, sizing.held_max);
  if (sizing.large_chunk != 0) bound = std::min(bound, sizing.large_chunk);
  uint64_t base = std::max(sizing.base, sizing.unit);
  if (base == 0) return out;
  if (base > bound / 2) return out;  // not doubled: as given
  out.rest_chunk = base;
  // Halved, not doubled, in the test: no overflow.
  while (base <= bound / 2) base *= 2;
  out.base = base;
  return out;
}

uint64_t LeaseAheadBytes(const LeaseAhead& ahead, uint64_t unit,
                         uint64_t missing, uint64_t streak_bytes,
                         uint64_t held_bytes, uint64_t room_bytes) {
  if (ahead.max_bytes == 0 || unit == 0) return 0;
  const uint64_t cap = std::max(
      ahead.max_bytes, held_bytes / std::max<uint64_t>(ahead.held_divisor, 1));
  const uint64_t want = std::min({streak_bytes + missing, cap, room_bytes});
  return want / unit * unit;
}

uint64_t LeaseAheadPause(uint64_t refused, uint64_t unit) {
  return std::max(refused, unit);
}

}  // namespace gmlake
