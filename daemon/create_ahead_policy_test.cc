// Copyright 2026 The GMLake Authors.
//
// The create-ahead policy alone: how much stock a growth streak keeps, and
// when it ends.

#include "daemon/create_ahead_policy.h"

#include "gtest/gtest.h"

namespace gmlake {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kCapacity = 140 * kGiB;

CreateAheadPolicy On() {
  CreateAheadPolicy p;
  p.max_bytes = kGiB;
  return p;
}

TEST(CreateAheadPolicy, OffCreatesNothing) {
  CreateAheadPolicy off;
  GrowthStreak s;
  NoteGrowth(off, &s, 64 * kMiB, kNow);
  EXPECT_EQ(StockTarget(off, s, kCapacity, kNow), 0u);
  EXPECT_EQ(
      ChunksToCreateAhead(off, s, 4 * kMiB, 0, kCapacity, kCapacity, kNow), 0u);
}

TEST(CreateAheadPolicy, NoStreakNoStock) {
  GrowthStreak s;
  EXPECT_TRUE(StreakEnded(On(), s, kNow));
  EXPECT_EQ(StockTarget(On(), s, kCapacity, kNow), 0u);
}

TEST(CreateAheadPolicy, TheStockFollowsTheStreak) {
  GrowthStreak s;
  NoteGrowth(On(), &s, 8 * kMiB, kNow);
  EXPECT_EQ(StockTarget(On(), s, kCapacity, kNow), 8 * kMiB);
  NoteGrowth(On(), &s, 24 * kMiB, kNow + absl::Milliseconds(10));
  EXPECT_EQ(s.bytes, 32 * kMiB);
  EXPECT_EQ(StockTarget(On(), s, kCapacity, kNow + absl::Milliseconds(10)),
            32 * kMiB);
}

TEST(CreateAheadPolicy, CappedByMaxBytesAndByTheCapacity) {
  GrowthStreak s;
  NoteGrowth(On(), &s, 20 * kGiB, kNow);
  EXPECT_EQ(StockTarget(On(), s, kCapacity, kNow), kGiB);
  // A demo's 18 GiB lake: 1/128 of it.
  EXPECT_EQ(StockTarget(On(), s, 18 * kGiB, kNow), 144 * kMiB);
}

TEST(CreateAheadPolicy, AGapEndsTheStreak) {
  GrowthStreak s;
  NoteGrowth(On(), &s, 512 * kMiB, kNow);
  const absl::Time later = kNow + absl::Seconds(1);
  EXPECT_TRUE(StreakEnded(On(), s, later));
  EXPECT_FALSE(StreakEnded(On(), s, later - absl::Milliseconds(1)));
  EXPECT_EQ(StockTarget(On(), s, kCapacity, later), 0u);
  // Growth after the gap starts a new streak, small again.
  NoteGrowth(On(), &s, 4 * kMiB, later);
  EXPECT_EQ(s.bytes, 4 * kMiB);
}

TEST(CreateAheadPolicy, CreatesTheMissingStockInBatchesWithinTheRoom) {
  GrowthStreak s;
  NoteGrowth(On(), &s, 256 * kMiB, kNow);
  // 256 MiB wanted, 40 MiB there: 54 chunks of 4 MiB, one batch of 16.
  EXPECT_EQ(ChunksToCreateAhead(On(), s, 4 * kMiB, 40 * kMiB, kCapacity,
                                kCapacity, kNow),
            16u);
  // Only 12 MiB of room nobody took: 3.
  EXPECT_EQ(ChunksToCreateAhead(On(), s, 4 * kMiB, 40 * kMiB, 12 * kMiB,
                                kCapacity, kNow),
            3u);
  // Stocked already.
  EXPECT_EQ(ChunksToCreateAhead(On(), s, 4 * kMiB, 256 * kMiB, kCapacity,
                                kCapacity, kNow),
            0u);
  // Less than a chunk missing: none.
  EXPECT_EQ(ChunksToCreateAhead(On(), s, 4 * kMiB, 254 * kMiB, kCapacity,
                                kCapacity, kNow),
            0u);
}

}  // namespace
}  // namespace gmlake
