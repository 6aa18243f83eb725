// Copyright 2026 The GMLake Authors.
//
// Lake::ReleaseIdle, the mechanism of the release policy, on real host
// chunks, with the clock passed in: which chunks go back to the driver,
// that the books stay balanced, and what Status says is held and why.

#include <vector>

#include "daemon/lake.h"
#include "daemon/lake_testing.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace testing {
namespace {

constexpr size_t kChunk = kTestChunk;

LakeOptions WithRelease(LakeOptions o, absl::Duration idle) {
  o.release.idle_after = idle;
  return o;
}

void ExpectBalanced(const v1::DeviceStatus& d) {
  EXPECT_EQ(d.created_chunks(),
            d.free_chunks() + d.leased_chunks() + d.scrubbing_chunks());
  EXPECT_EQ(d.free_bytes(), d.floor_kept_bytes() + d.idle_bytes());
}

TEST(LakeRelease, FreeChunksGoBackOnceIdleLeasedOnesStay) {
  TestLake lake(WithRelease(TestLakeOptions(16), absl::Seconds(60)));
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 6);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<uint64_t> give(g->chunk_ids.begin(),
                                   g->chunk_ids.begin() + 4);
  ASSERT_TRUE(lake->Return(a.id, a.token, give).ok());
  const absl::Time now = absl::Now();

  // Not idle long enough: nothing goes, and Status says when it will.
  EXPECT_EQ(lake->ReleaseIdle(now).second, 0u);
  v1::StatusResponse st = lake.Status();
  ExpectBalanced(st.devices(0));
  EXPECT_EQ(st.release_idle_seconds(), 60);
  EXPECT_EQ(st.devices(0).idle_bytes(), 4 * kChunk);
  EXPECT_EQ(st.devices(0).floor_kept_bytes(), 0u);
  EXPECT_GT(st.devices(0).next_release_seconds(), 0);
  EXPECT_LE(st.devices(0).next_release_seconds(), 60);

  // A minute later they go; the leased ones stay.
  const std::pair<uint64_t, uint64_t> r =
      lake->ReleaseIdle(now + absl::Seconds(61));
  EXPECT_EQ(r.first, 4 * kChunk);
  EXPECT_EQ(r.second, 4u);
  st = lake.Status();
  ExpectBalanced(st.devices(0));
  EXPECT_EQ(st.devices(0).created_chunks(), 2u);
  EXPECT_EQ(st.devices(0).leased_chunks(), 2u);
  EXPECT_EQ(st.devices(0).free_chunks(), 0u);
  EXPECT_EQ(st.devices(0).next_release_seconds(), -1);
  EXPECT_EQ(st.released_idle_bytes(), 4 * kChunk);
  // They held uid 1000's data and went back as they were: the release
  // pays no zeroing.
  EXPECT_EQ(st.zeroed_bytes(), 0u);

  // The room they left is there to lease again. The driver may hand the
  // same memory back; to uid 1000, whose data it held, as it is.
  g = lake->Lease(a.id, a.token, 0, 14);
  ASSERT_TRUE(g.ok()) << g.status();
  st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 16u);
  EXPECT_EQ(st.zeroed_bytes(), 0u);
  // Those creations took the memory released: another uid's new chunks
  // owe nothing after them.
  ASSERT_TRUE(lake->Return(a.id, a.token, g->chunk_ids).ok());
  EXPECT_EQ(lake->Trim(0, 0).second, 14u);
  SessionTicket b = lake.Open(2000, "other");
  ASSERT_TRUE(lake->Lease(b.id, b.token, 0, 14).ok());
  // The 14 trimmed held uid 1000's data: b's 14 new chunks are zeroed.
  EXPECT_EQ(lake.Status().zeroed_bytes(), 14 * kChunk);
}

TEST(LakeRelease, MemoryReleasedUnzeroedIsZeroedForAnotherUidOnly) {
  // A trainer and an inference engine of one user take turns, and the
  // lake recycles one's free chunks into the other's sizes: zeroing those
  // (a map, fill and unmap per chunk) protects no one. Another uid's new
  // chunks are zeroed as before.
  TestLake lake(WithRelease(TestLakeOptions(16), absl::Seconds(60)));
  SessionTicket a = lake.Open(1000);
  SessionTicket a2 = lake.Open(1000, "same user");
  SessionTicket b = lake.Open(2000, "other user");
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 8);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(lake->Return(a.id, a.token, g->chunk_ids).ok());
  EXPECT_EQ(lake->Trim(0, 0).second, 8u);
  // The same uid: nothing zeroed, and the debt is settled by as much.
  ASSERT_TRUE(lake->Lease(a2.id, a2.token, 0, 5).ok());
  EXPECT_EQ(lake.Status().zeroed_bytes(), 0u);
  // Another uid: the 3 chunks still owed.
  ASSERT_TRUE(lake->Lease(b.id, b.token, 0, 5).ok());
  EXPECT_EQ(lake.Status().zeroed_bytes(), 3 * kChunk);
}

TEST(LakeRelease, ZeroOnReleaseZeroesBeforeTheyGo) {
  LakeOptions o = WithRelease(TestLakeOptions(16), absl::Seconds(60));
  o.zero_on_release = true;
  TestLake lake(o);
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 6);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(lake->Return(a.id, a.token, g->chunk_ids).ok());
  EXPECT_EQ(lake->ReleaseIdle(absl::Now() + absl::Seconds(61)).second, 6u);
  EXPECT_EQ(lake.Status().zeroed_bytes(), 6 * kChunk);
  // Nothing owed: new chunks are not zeroed again.
  g = lake->Lease(a.id, a.token, 0, 6);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(lake.Status().zeroed_bytes(), 6 * kChunk);
}

TEST(LakeRelease, WithNoSessionOpenEverythingGoesAtTheNextWake) {
  LakeOptions o = WithRelease(TestLakeOptions(16), absl::Seconds(60));
  o.release.max_chunks_per_round = 3;
  TestLake lake(o);
  SessionTicket a = lake.Open(1000);
  SessionTicket b = lake.Open(1000, "other");
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 10);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(lake->Claim(a.id, a.token, g->lease_id).ok());
  ASSERT_TRUE(lake->CloseSession(a.id, a.token).ok());
  // Another session is open: the wake's call leaves them (they stay warm
  // for --release_idle).
  EXPECT_EQ(lake->ReleaseIdle(absl::Now(), true).second, 0u);
  ASSERT_TRUE(lake->CloseSession(b.id, b.token).ok());
  // Nobody left: all ten go in one round, past the cap of three.
  EXPECT_EQ(lake->ReleaseIdle(absl::Now(), true).second, 10u);
  EXPECT_EQ(lake.Status().devices(0).created_chunks(), 0u);
}

TEST(LakeRelease, TheFloorStays) {
  TestLake lake(WithRelease(TestLakeOptions(16, 4), absl::Seconds(1)));
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 10);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(lake->Claim(a.id, a.token, g->lease_id).ok());
  ASSERT_TRUE(lake->CloseSession(a.id, a.token).ok());
  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.devices(0).free_chunks(), 10u);
  EXPECT_EQ(st.devices(0).floor_bytes(), 4 * kChunk);
  EXPECT_EQ(st.devices(0).floor_kept_bytes(), 4 * kChunk);
  EXPECT_EQ(st.devices(0).idle_bytes(), 6 * kChunk);
  // The chunks came back from a session that ended holding them (claimed:
  // delivered to its process).
  EXPECT_EQ(st.reclaimed_bytes(), 10 * kChunk);

  EXPECT_EQ(lake->ReleaseIdle(absl::Now() + absl::Seconds(2)).second, 6u);
  st = lake.Status();
  ExpectBalanced(st.devices(0));
  EXPECT_EQ(st.devices(0).created_bytes(), 4 * kChunk);
  EXPECT_EQ(st.devices(0).floor_kept_bytes(), 4 * kChunk);
  EXPECT_EQ(st.devices(0).idle_bytes(), 0u);
  // And stays, however long.
  EXPECT_EQ(lake->ReleaseIdle(absl::Now() + absl::Hours(24)).second, 0u);
  EXPECT_EQ(lake.Status().devices(0).created_bytes(), 4 * kChunk);
}

TEST(LakeRelease, ZeroIdleTimeKeepsEverythingUntilTrim) {
  TestLake lake(WithRelease(TestLakeOptions(8), absl::ZeroDuration()));
  SessionTicket a = lake.Open(1000);
  ASSERT_TRUE(lake->Lease(a.id, a.token, 0, 3).ok());
  ASSERT_TRUE(lake->CloseSession(a.id, a.token).ok());
  EXPECT_EQ(lake->ReleaseIdle(absl::Now() + absl::Hours(24)).second, 0u);
  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 3u);
  EXPECT_EQ(st.devices(0).idle_bytes(), 3 * kChunk);
  EXPECT_EQ(st.devices(0).next_release_seconds(), -1);
  EXPECT_EQ(lake->Trim(-1, 0).second, 3u);
  EXPECT_EQ(lake.Status().trimmed_bytes(), 3 * kChunk);
}

TEST(LakeRelease, ChunksFreedLaterGoLater) {
  TestLake lake(WithRelease(TestLakeOptions(8), absl::Seconds(60)));
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 2);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(lake->Return(a.id, a.token, {g->chunk_ids[0]}).ok());
  const absl::Time first = absl::Now();
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(lake->Return(a.id, a.token, {g->chunk_ids[1]}).ok());
  const absl::Time second = absl::Now();
  // Due for the first, not yet for the second.
  EXPECT_EQ(lake->ReleaseIdle(first + absl::Seconds(60)).second, 1u);
  EXPECT_EQ(lake.Status().devices(0).free_chunks(), 1u);
  EXPECT_EQ(lake->ReleaseIdle(second + absl::Seconds(60)).second, 1u);
  EXPECT_EQ(lake.Status().devices(0).created_chunks(), 0u);
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
