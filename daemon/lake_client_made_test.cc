// Copyright 2026 The GMLake Authors.
//
// Leases of capacity (LeaseRequest.client_makes) on a real Lake over host
// chunks: gmlaked grants ids and counts the bytes, makes and exports
// nothing, sends no descriptor for them, and the capacity comes back when
// the chunks are returned or their session ends; free chunks of the lake
// make room by going back to the driver; pressure hands memory from an
// idle session to a busy one as for any lease.

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/vmm.h"
#include "daemon/lake.h"
#include "daemon/lake_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr size_t kChunk = kTestChunk;

absl::StatusOr<LeaseGrant> LeaseCapacity(TestLake& lake, const SessionTicket& t,
                                         uint64_t n, uint64_t chunk_bytes = 0) {
  return lake->Lease(t.id, t.token, 0, n, chunk_bytes, /*no_pressure=*/false,
                     /*client_makes=*/true);
}

TEST(LakeClientMade, ALeaseOfCapacityMakesAndSendsNothing) {
  TestLake lake(TestLakeOptions(64));
  SessionTicket a = lake.Open(1000);
  const VmmCallSnapshot before = lake.backend()->call_stats();
  absl::StatusOr<LeaseGrant> g = LeaseCapacity(lake, a, 10);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->client_makes);
  EXPECT_EQ(g->chunk_ids.size(), 10u);
  const VmmCallSnapshot calls = lake.backend()->call_stats() - before;
  EXPECT_EQ(calls.Count(VmmCall::kCreate), 0u);
  EXPECT_EQ(calls.Count(VmmCall::kExport), 0u);
  // Counted as the session's, against the capacity.
  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 10u);
  EXPECT_EQ(st.devices(0).leased_chunks(), 10u);
  EXPECT_EQ(st.client_made_bytes_total(), 10 * kChunk);
  EXPECT_EQ(st.sessions(0).leased_bytes(), 10 * kChunk);
  // There is no descriptor to claim: asking for one is refused, clearly.
  ASSERT_TRUE(lake->Claim(a.id, a.token, g->lease_id).status().code() ==
              absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<UniqueFd>> fds =
      lake->DupChunkFds(a.id, g->chunk_ids);
  EXPECT_EQ(fds.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fds.status().message(), HasSubstr("makes itself"));
  // Returned, they leave the books: nothing free to release, the capacity
  // is there again.
  ASSERT_TRUE(lake->Return(a.id, a.token, g->chunk_ids).ok());
  st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 0u);
  EXPECT_EQ(st.devices(0).free_chunks(), 0u);
  EXPECT_TRUE(LeaseCapacity(lake, a, 64).ok());
  EXPECT_EQ(lake.backend()->call_stats().Count(VmmCall::kRelease),
            before.Count(VmmCall::kRelease));
}

TEST(LakeClientMade, UnclaimedForeverIsNotTakenBack) {
  LakeOptions o = TestLakeOptions(16);
  o.claim_timeout = absl::Milliseconds(1);
  TestLake lake(std::move(o));
  SessionTicket a = lake.Open(1000);
  ASSERT_TRUE(LeaseCapacity(lake, a, 4).ok());
  absl::SleepFor(absl::Milliseconds(20));
  lake->CheckLiveness();
  EXPECT_EQ(lake.Status().devices(0).leased_chunks(), 4u);
}

TEST(LakeClientMade, TheSessionsEndGivesTheCapacityBack) {
  TestLake lake(TestLakeOptions(16));
  SessionTicket a = lake.Open(1000);
  ASSERT_TRUE(LeaseCapacity(lake, a, 16).ok());
  SessionTicket b = lake.Open(1000, "b");
  EXPECT_EQ(LeaseCapacity(lake, b, 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  absl::StatusOr<uint64_t> back = lake->CloseSession(a.id, a.token);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, 16 * kChunk);
  EXPECT_EQ(lake.Status().devices(0).created_chunks(), 0u);
  EXPECT_TRUE(LeaseCapacity(lake, b, 16).ok());
}

TEST(LakeClientMade, FreeChunksOfTheLakeGoBackToTheDriverToMakeRoom) {
  TestLake lake(TestLakeOptions(16));
  SessionTicket a = lake.Open(1000);
  // 12 chunks the lake made, free again.
  absl::StatusOr<LeaseGrant> made = lake->Lease(a.id, a.token, 0, 12);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_TRUE(lake->Return(a.id, a.token, made->chunk_ids).ok());
  // 10 as capacity: 4 of room, and 6 of the free chunks released for it
  // (none of them leased: the client makes its own).
  absl::StatusOr<LeaseGrant> g = LeaseCapacity(lake, a, 10);
  ASSERT_TRUE(g.ok()) << g.status();
  for (uint64_t id : g->chunk_ids) {
    EXPECT_THAT(made->chunk_ids, ::testing::Not(::testing::Contains(id)));
  }
  const v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.pressure_rounds(), 0u);
  EXPECT_EQ(st.devices(0).free_chunks(), 6u);
  EXPECT_EQ(st.devices(0).created_chunks(), 16u);
}

TEST(LakeClientMade, PressureHandsAnIdleSessionsMemoryToABusyOne) {
  TestLake lake(TestLakeOptions(16));
  SessionTicket idle = lake.Open(1000, "idle");
  absl::StatusOr<LeaseGrant> held = LeaseCapacity(lake, idle, 12);
  ASSERT_TRUE(held.ok()) << held.status();
  auto sink =
      std::make_shared<ReturningSink>(&lake.lake(), idle, held->chunk_ids);
  ASSERT_TRUE(lake->AttachWatcher(idle.id, idle.token, sink).ok());
  SessionTicket busy = lake.Open(1000, "busy");
  absl::StatusOr<LeaseGrant> got = LeaseCapacity(lake, busy, 10);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(sink->AwaitAnswer().ok());
  const v1::StatusResponse st = lake.Status();
  EXPECT_GE(st.pressure_rounds(), 1u);
  EXPECT_EQ(st.handoff_seconds().count(), 1u);
  EXPECT_LE(st.devices(0).created_chunks(), 16u);
}

// --prefer_reclaim: a lease asks the others before the lake grows. What they
// give back as capacity (chunks their clients made leave the books, nothing
// comes free) is room for the lease that asked: one round, not a round per
// look at the books (the lake-share demo asked 1,387 times before).
TEST(LakeClientMade, UnderPreferReclaimCapacityGivenBackIsRoomForTheAsker) {
  LakeOptions o = TestLakeOptions(64);
  o.prefer_reclaim = true;
  TestLake lake(std::move(o));
  SessionTicket idle = lake.Open(1000, "idle");
  absl::StatusOr<LeaseGrant> held = LeaseCapacity(lake, idle, 40);
  ASSERT_TRUE(held.ok()) << held.status();
  auto sink =
      std::make_shared<ReturningSink>(&lake.lake(), idle, held->chunk_ids);
  // It says it caches the rest too: a lease that did not count what came
  // back as room would ask it again.
  sink->ReportCachedAfter(10 * kChunk);
  ASSERT_TRUE(lake->AttachWatcher(idle.id, idle.token, sink).ok());
  SessionTicket busy = lake.Open(1000, "busy");
  absl::StatusOr<LeaseGrant> got = LeaseCapacity(lake, busy, 30);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(sink->AwaitAnswer().ok());
  const v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.pressure_rounds(), 1u);
  // The lake did not grow past what the two hold: no more than 40 chunks.
  EXPECT_LE(st.devices(0).created_chunks(), 40u);
  uint64_t idle_bytes = 0;
  for (const auto& s : st.sessions()) {
    if (s.session_id() == idle.id) idle_bytes = s.leased_bytes();
  }
  EXPECT_GE(idle_bytes, 10 * kChunk);  // asked once, for what was needed
  EXPECT_GE(st.pressure_returned_bytes(), 30 * kChunk);
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
