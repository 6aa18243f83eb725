// Copyright 2026 The GMLake Authors.
//
// The release policy alone: what goes back to the driver, and when.

#include "daemon/release_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

ReleasePolicy Policy(absl::Duration idle, size_t per_round = 4096) {
  ReleasePolicy p;
  p.idle_after = idle;
  p.max_chunks_per_round = per_round;
  return p;
}

constexpr uint64_t kC = uint64_t{2} << 20;  // a chunk of the unit size

// Free chunk `id` of `chunks` x kC bytes, free for `idle`.
FreeChunk Idle(uint64_t id, absl::Duration idle, uint64_t chunks = 1) {
  return {id, kNow - idle, chunks * kC};
}

TEST(ReleasePolicy, ChunksIdleLongerThanTheTimeGoLongestIdleFirst) {
  DeviceHoldings d;
  d.created_bytes = 5 * kC;
  d.free = {Idle(1, absl::Seconds(10)), Idle(2, absl::Seconds(90)),
            Idle(3, absl::Seconds(61)), Idle(4, absl::Seconds(30))};
  ReleasePlan p = PlanRelease(Policy(absl::Seconds(60)), d, kNow);
  EXPECT_THAT(p.release, ElementsAre(2, 3));
  EXPECT_EQ(p.later_bytes, 2 * kC);
  // Chunk 4, free for 30 s, is due in 30 s.
  EXPECT_EQ(p.next_due, kNow + absl::Seconds(30));
  EXPECT_EQ(p.floor_kept_bytes, 0 * kC);
}

TEST(ReleasePolicy, ExactlyTheIdleTimeIsDue) {
  DeviceHoldings d;
  d.created_bytes = 1 * kC;
  d.free = {Idle(7, absl::Seconds(60))};
  EXPECT_THAT(PlanRelease(Policy(absl::Seconds(60)), d, kNow).release,
              ElementsAre(7));
}

TEST(ReleasePolicy, NeverBelowTheFloorAndTheFloorKeepsTheWarmestChunks) {
  DeviceHoldings d;
  d.created_bytes = 6 * kC;  // 2 leased, 4 free
  d.floor_bytes = 4 * kC;
  d.free = {Idle(1, absl::Seconds(100)), Idle(2, absl::Seconds(400)),
            Idle(3, absl::Seconds(200)), Idle(4, absl::Seconds(300))};
  ReleasePlan p = PlanRelease(Policy(absl::Seconds(60)), d, kNow);
  // Only 6 - 4 = 2 may go: the two longest idle.
  EXPECT_THAT(p.release, ElementsAre(2, 4));
  EXPECT_EQ(p.floor_kept_bytes, 2 * kC);
  EXPECT_EQ(p.later_bytes, 0 * kC);
  EXPECT_EQ(p.next_due, absl::InfiniteFuture());
}

TEST(ReleasePolicy, LeasedChunksCountTowardsTheFloor) {
  DeviceHoldings d;
  d.created_bytes = 10 * kC;  // 8 leased, 2 free
  d.floor_bytes = 8 * kC;
  d.free = {Idle(1, absl::Hours(1)), Idle(2, absl::Hours(1))};
  EXPECT_THAT(PlanRelease(Policy(absl::Seconds(60)), d, kNow).release,
              ElementsAre(1, 2));
  d.floor_bytes = 10 * kC;
  ReleasePlan p = PlanRelease(Policy(absl::Seconds(60)), d, kNow);
  EXPECT_THAT(p.release, IsEmpty());
  EXPECT_EQ(p.floor_kept_bytes, 2 * kC);
}

TEST(ReleasePolicy, AFloorAboveWhatIsCreatedKeepsEverything) {
  DeviceHoldings d;
  d.created_bytes = 2 * kC;
  d.floor_bytes = 5 * kC;
  d.free = {Idle(1, absl::Hours(1)), Idle(2, absl::Hours(1))};
  ReleasePlan p = PlanRelease(Policy(absl::Seconds(1)), d, kNow);
  EXPECT_THAT(p.release, IsEmpty());
  EXPECT_EQ(p.floor_kept_bytes, 2 * kC);
}

TEST(ReleasePolicy, ZeroIdleTimeMeansNeverButStillSaysWhatCouldGo) {
  DeviceHoldings d;
  d.created_bytes = 3 * kC;
  d.floor_bytes = 1 * kC;
  d.free = {Idle(1, absl::Hours(9)), Idle(2, absl::Hours(9)),
            Idle(3, absl::Hours(9))};
  ReleasePlan p = PlanRelease(Policy(absl::ZeroDuration()), d, kNow);
  EXPECT_THAT(p.release, IsEmpty());
  EXPECT_EQ(p.later_bytes, 2 * kC);
  EXPECT_EQ(p.floor_kept_bytes, 1 * kC);
  EXPECT_EQ(p.next_due, absl::InfiniteFuture());
}

TEST(ReleasePolicy, ARoundTakesAtMostItsShareAndTheRestIsDueAtOnce) {
  DeviceHoldings d;
  d.created_bytes = 5 * kC;
  for (uint64_t id = 1; id <= 5; ++id) {
    d.free.push_back(Idle(id, absl::Seconds(100 + id)));
  }
  ReleasePlan p = PlanRelease(Policy(absl::Seconds(60), 2), d, kNow);
  EXPECT_THAT(p.release, ElementsAre(5, 4));
  EXPECT_EQ(p.later_bytes, 3 * kC);
  EXPECT_EQ(p.next_due, kNow);
}

TEST(ReleasePolicy, WithNobodyOnTheDeviceEverythingGoesInOneRound) {
  DeviceHoldings d;
  d.in_use = false;
  d.created_bytes = 5 * kC;
  for (uint64_t id = 1; id <= 5; ++id) {
    d.free.push_back(Idle(id, absl::Milliseconds(id)));
  }
  // The cap of 2 a round holds only while someone may need the lock.
  ReleasePlan p = PlanRelease(Policy(absl::Seconds(60), 2), d, kNow);
  EXPECT_EQ(p.release.size(), 5u);
  EXPECT_EQ(p.later_bytes, 0u);
}

TEST(ReleasePolicy, NothingFreeNothingToDo) {
  DeviceHoldings d;
  d.created_bytes = 4 * kC;
  ReleasePlan p = PlanRelease(Policy(absl::Seconds(60)), d, kNow);
  EXPECT_THAT(p.release, IsEmpty());
  EXPECT_EQ(p.later_bytes, 0 * kC);
  EXPECT_EQ(p.floor_kept_bytes, 0 * kC);
}

TEST(ReleasePolicy, TiesInTimeGoInIdOrder) {
  // Chunks precreated together share a time.
  DeviceHoldings d;
  d.created_bytes = 4 * kC;
  d.floor_bytes = 1 * kC;
  d.free = {Idle(9, absl::Hours(1)), Idle(3, absl::Hours(1)),
            Idle(6, absl::Hours(1)), Idle(4, absl::Hours(1))};
  EXPECT_THAT(PlanRelease(Policy(absl::Seconds(1)), d, kNow).release,
              ElementsAre(3, 4, 6));
}

TEST(ReleasePolicy, ChunksOfSeveralSizesGoOnlyWhileTheFloorHolds) {
  DeviceHoldings d;
  d.created_bytes = 40 * kC;  // 8 chunks of 1 leased, the rest free
  d.floor_bytes = 16 * kC;
  // 24 above the floor: the oldest, 16 and 8, fill it; the two of 4 stay.
  d.free = {Idle(1, absl::Hours(4), 16), Idle(2, absl::Hours(3), 8),
            Idle(3, absl::Hours(2), 4), Idle(4, absl::Hours(1), 4)};
  ReleasePlan p = PlanRelease(Policy(absl::Seconds(60)), d, kNow);
  EXPECT_THAT(p.release, ElementsAre(1, 2));
  EXPECT_EQ(p.release_bytes, 24 * kC);
  EXPECT_EQ(p.floor_kept_bytes, 8 * kC);
  EXPECT_EQ(p.later_bytes, 0u);
}

TEST(ReleasePolicy, OnADeviceNobodyUsesEveryFreeChunkAboveTheFloorIsDue) {
  DeviceHoldings d;
  d.created_bytes = 4 * kC;
  d.floor_bytes = 1 * kC;
  d.in_use = false;  // the last session ended a moment ago
  d.free = {Idle(1, absl::Milliseconds(10)), Idle(2, absl::ZeroDuration()),
            Idle(3, absl::Seconds(5)), Idle(4, absl::Seconds(1))};
  ReleasePlan p = PlanRelease(Policy(absl::Seconds(60)), d, kNow);
  // Longest idle first; the floor keeps the warmest.
  EXPECT_THAT(p.release, ElementsAre(3, 4, 1));
  EXPECT_EQ(p.floor_kept_bytes, 1 * kC);
  EXPECT_EQ(p.later_bytes, 0u);
  // --release_idle=0 still means never.
  EXPECT_THAT(PlanRelease(Policy(absl::ZeroDuration()), d, kNow).release,
              IsEmpty());
}

}  // namespace
}  // namespace gmlake
