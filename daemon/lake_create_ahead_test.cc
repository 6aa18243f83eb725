// Copyright 2026 The GMLake Authors.
//
// Creating ahead (create_ahead_policy.h) on a real Lake over host chunks:
// a growing session's next lease finds its chunks made and exported; the
// stock stays within its cap and the room nobody took; it goes back when
// the growth pauses; and a chunk whose memory may be another uid's is
// zeroed before that uid's lease, as for any other new chunk.

#include <vector>

#include "absl/time/clock.h"
#include "common/vmm.h"
#include "daemon/lake.h"
#include "daemon/lake_testing.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace testing {
namespace {

constexpr size_t kChunk = kTestChunk;

LakeOptions Ahead(uint64_t capacity_chunks, absl::Duration gap) {
  LakeOptions o = TestLakeOptions(capacity_chunks);
  o.create_ahead.max_bytes = 32 * kChunk;
  o.create_ahead.capacity_divisor = 0;
  o.create_ahead.streak_gap = gap;
  return o;
}

// Waits (up to 10 s) until `done` holds for the lake's status.
template <typename Done>
bool AwaitStatus(TestLake& lake, Done done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (absl::Now() < give_up) {
    if (done(lake.Status())) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return false;
}

// Claims lease `g` and takes its descriptors, as the fd server does.
void Deliver(TestLake& lake, const SessionTicket& t, const LeaseGrant& g) {
  ASSERT_TRUE(lake->Claim(t.id, t.token, g.lease_id).ok());
  absl::StatusOr<std::vector<UniqueFd>> fds =
      lake->DupChunkFds(t.id, g.chunk_ids);
  ASSERT_TRUE(fds.ok()) << fds.status();
  for (const UniqueFd& fd : *fds) EXPECT_TRUE(fd.valid());
}

TEST(LakeCreateAhead, TheNextLeaseOfAGrowingSessionFindsItsChunksMade) {
  TestLake lake(Ahead(256, absl::Seconds(30)));
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 4);
  ASSERT_TRUE(g.ok()) << g.status();
  Deliver(lake, a, *g);
  // The session grew by 4 chunks: as many are made ahead.
  ASSERT_TRUE(AwaitStatus(lake, [](const v1::StatusResponse& st) {
    return st.created_ahead_bytes() == 4 * kChunk;
  }));
  EXPECT_EQ(lake.Status().devices(0).free_chunks(), 4u);

  // Its next lease takes them: no create, and no export on the way out
  // (each keeps its creation's descriptor for its first claim).
  const VmmCallSnapshot before = lake.backend()->call_stats();
  g = lake->Lease(a.id, a.token, 0, 4);
  ASSERT_TRUE(g.ok()) << g.status();
  Deliver(lake, a, *g);
  const VmmCallSnapshot calls = lake.backend()->call_stats() - before;
  EXPECT_EQ(calls.Count(VmmCall::kCreate), 0u);
  EXPECT_EQ(calls.Count(VmmCall::kExport), 0u);
  EXPECT_EQ(lake.Status().ahead_leased_bytes(), 4 * kChunk);

  // The streak is 8 chunks now: the stock follows it.
  ASSERT_TRUE(AwaitStatus(lake, [](const v1::StatusResponse& st) {
    return st.created_ahead_bytes() == 12 * kChunk;
  }));
  const v1::DeviceStatus d = lake.Status().devices(0);
  EXPECT_EQ(d.leased_chunks(), 8u);
  EXPECT_EQ(d.free_chunks(), 8u);
}

TEST(LakeCreateAhead, TheStockStaysWithinItsCapAndTheRoomLeft) {
  TestLake lake(Ahead(40, absl::Seconds(30)));
  SessionTicket a = lake.Open(1000);
  // 30 chunks grown: 32 wanted ahead, 10 of room left.
  ASSERT_TRUE(lake->Lease(a.id, a.token, 0, 30).ok());
  ASSERT_TRUE(AwaitStatus(lake, [](const v1::StatusResponse& st) {
    return st.created_ahead_bytes() == 10 * kChunk;
  }));
  absl::SleepFor(absl::Milliseconds(50));
  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 40u);
  EXPECT_EQ(st.created_ahead_bytes(), 10 * kChunk);

  // The stock is free memory like any other: a lease of another size
  // releases it to make room, with no pressure round.
  SessionTicket b = lake.Open(1000, "other");
  absl::StatusOr<LeaseGrant> g = lake->Lease(b.id, b.token, 0, 2, 4 * kChunk);
  ASSERT_TRUE(g.ok()) << g.status();
  st = lake.Status();
  EXPECT_EQ(st.pressure_rounds(), 0u);
  EXPECT_EQ(st.recycled_bytes(), 8 * kChunk);
}

TEST(LakeCreateAhead, TheStockGoesBackWhenTheGrowthPauses) {
  TestLake lake(Ahead(256, absl::Milliseconds(200)));
  SessionTicket a = lake.Open(1000);
  ASSERT_TRUE(lake->Lease(a.id, a.token, 0, 6).ok());
  ASSERT_TRUE(AwaitStatus(lake, [](const v1::StatusResponse& st) {
    return st.created_ahead_bytes() == 6 * kChunk;
  }));
  ASSERT_TRUE(AwaitStatus(lake, [](const v1::StatusResponse& st) {
    return st.ahead_released_bytes() == 6 * kChunk;
  }));
  const v1::DeviceStatus d = lake.Status().devices(0);
  EXPECT_EQ(d.created_chunks(), 6u);
  EXPECT_EQ(d.free_chunks(), 0u);
}

TEST(LakeCreateAhead, OffCreatesOnlyWhatLeasesAsk) {
  TestLake lake(TestLakeOptions(64));
  SessionTicket a = lake.Open(1000);
  ASSERT_TRUE(lake->Lease(a.id, a.token, 0, 6).ok());
  absl::SleepFor(absl::Milliseconds(100));
  const v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.created_ahead_bytes(), 0u);
  EXPECT_EQ(st.devices(0).created_chunks(), 6u);
}

TEST(LakeCreateAhead, ChunksThatMayHoldAnotherUidsDataAreZeroedForIt) {
  LakeOptions o = Ahead(64, absl::Seconds(30));
  TestLake lake(std::move(o));
  // uid 1000 fills 8 chunks with its data; they go back to the driver
  // unzeroed (a trim), so the driver may hand that memory back.
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 8);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(AwaitStatus(lake, [](const v1::StatusResponse& st) {
    return st.created_ahead_bytes() == 8 * kChunk;
  }));
  ASSERT_TRUE(lake->Return(a.id, a.token, g->chunk_ids).ok());
  // The 8 it held and the 8 made ahead (fresh) go back.
  ASSERT_EQ(lake->Trim(0, 0).second, 16u);
  EXPECT_EQ(lake.Status().zeroed_bytes(), 0u);
  // uid 1000 grows again: its lease's 4 new chunks settle 8 MiB of what it
  // left (its own data: not zeroed for it). The streak is 12 chunks: 12 are
  // made ahead, 4 of them settling the rest of its data (they may hold it),
  // 8 fresh.
  ASSERT_TRUE(lake->Lease(a.id, a.token, 0, 4).ok());
  ASSERT_TRUE(AwaitStatus(lake, [](const v1::StatusResponse& st) {
    return st.created_ahead_bytes() == 20 * kChunk;
  }));
  EXPECT_EQ(lake.Status().zeroed_bytes(), 0u);
  // uid 2000 takes the stock: the 8 fresh ones as made, and the 4 that may
  // hold uid 1000's data zeroed before the grant.
  SessionTicket b = lake.Open(2000, "other");
  g = lake->Lease(b.id, b.token, 0, 12);
  ASSERT_TRUE(g.ok()) << g.status();
  const v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.zeroed_bytes(), 4 * kChunk);
  EXPECT_EQ(st.ahead_leased_bytes(), 8 * kChunk);
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
