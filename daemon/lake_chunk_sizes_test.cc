// Copyright 2026 The GMLake Authors.
//
// Leases that name their chunks' size (LeaseRequest.chunk_bytes), on the
// host backend: real memfd chunks of that size, reused by leases of the
// same size, zeroed whole for another uid, recycled into other sizes where
// the capacity is short, and handed from an idle session to a busy one.

#include <sys/mman.h>
#include <sys/stat.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "daemon/lake.h"
#include "daemon/lake_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::gmlake::testing::kTestChunk;
using ::gmlake::testing::ReturningSink;
using ::gmlake::testing::TestLake;
using ::gmlake::testing::TestLakeOptions;
using ::testing::HasSubstr;

constexpr uint64_t kLarge = 16 * kTestChunk;  // 32 MiB

// The chunk's descriptor as the session would get it, mapped here: its
// size, and its bytes.
struct Seen {
  uint64_t size = 0;
  uint8_t first = 0, last = 0;
};
Seen Look(Lake& lake, uint64_t session, uint64_t chunk, int fill_with = -1) {
  absl::StatusOr<std::vector<UniqueFd>> fds =
      lake.DupChunkFds(session, {chunk});
  EXPECT_TRUE(fds.ok()) << fds.status();
  if (!fds.ok()) return {};
  struct stat st;
  EXPECT_EQ(::fstat((*fds)[0].get(), &st), 0);
  Seen seen;
  seen.size = static_cast<uint64_t>(st.st_size);
  void* p = ::mmap(nullptr, seen.size, PROT_READ | PROT_WRITE, MAP_SHARED,
                   (*fds)[0].get(), 0);
  EXPECT_NE(p, MAP_FAILED);
  if (p == MAP_FAILED) return seen;
  auto* bytes = static_cast<uint8_t*>(p);
  if (fill_with >= 0) std::memset(bytes, fill_with, seen.size);
  seen.first = bytes[0];
  seen.last = bytes[seen.size - 1];
  ::munmap(p, seen.size);
  return seen;
}

TEST(LakeChunkSizesTest, ALeaseGetsChunksOfTheSizeItNames) {
  TestLake lake(TestLakeOptions(64));  // 128 MiB
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 2, kLarge);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->chunk_size, kLarge);
  ASSERT_EQ(g->chunk_ids.size(), 2u);
  EXPECT_EQ(Look(lake.lake(), a.id, g->chunk_ids[0]).size, kLarge);
  // No size: the device's unit.
  absl::StatusOr<LeaseGrant> unit = lake->Lease(a.id, a.token, 0, 3);
  ASSERT_TRUE(unit.ok()) << unit.status();
  EXPECT_EQ(unit->chunk_size, kTestChunk);
  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 5u);
  EXPECT_EQ(st.devices(0).created_bytes(), 2 * kLarge + 3 * kTestChunk);
  EXPECT_EQ(st.devices(0).leased_bytes(), 2 * kLarge + 3 * kTestChunk);
  EXPECT_EQ(st.devices(0).chunk_size(), kTestChunk);
  ASSERT_EQ(st.sessions_size(), 1);
  EXPECT_EQ(st.sessions(0).leased_bytes(), 2 * kLarge + 3 * kTestChunk);
  EXPECT_EQ(st.sessions(0).leased(0).chunks(), 5u);
  // Returned, a large chunk goes to the next lease of its size.
  ASSERT_TRUE(lake->Return(a.id, a.token, {g->chunk_ids[1]}).ok());
  absl::StatusOr<LeaseGrant> again = lake->Lease(a.id, a.token, 0, 1, kLarge);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->chunk_ids[0], g->chunk_ids[1]);
  EXPECT_EQ(lake.Status().devices(0).created_chunks(), 5u);
}

TEST(LakeChunkSizesTest, SizesThatAreNoMultipleOrTooLargeAreRefused) {
  TestLake lake(TestLakeOptions(8));
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> odd =
      lake->Lease(a.id, a.token, 0, 1, 3 * kTestChunk / 2);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(odd.status().message(), HasSubstr("multiples of 2.00 MiB"));
  absl::StatusOr<LeaseGrant> big = lake->Lease(a.id, a.token, 0, 1, kLarge);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("whole capacity"));
  // A count and a size whose product overflows: refused, nothing made.
  absl::StatusOr<LeaseGrant> wrap =
      lake->Lease(a.id, a.token, 0, uint64_t{1} << 63, 2 * kTestChunk);
  EXPECT_EQ(wrap.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(lake.Status().devices(0).created_chunks(), 0u);
}

TEST(LakeChunkSizesTest, ALargeChunkIsZeroedWholeForAnotherUid) {
  TestLake lake(TestLakeOptions(16));  // room for one large chunk
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 1, kLarge);
  ASSERT_TRUE(g.ok()) << g.status();
  Look(lake.lake(), a.id, g->chunk_ids[0], /*fill_with=*/0xAB);
  ASSERT_TRUE(lake->CloseSession(a.id, a.token).ok());
  SessionTicket b = lake.Open(2000);
  absl::StatusOr<LeaseGrant> h = lake->Lease(b.id, b.token, 0, 1, kLarge);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->chunk_ids[0], g->chunk_ids[0]);
  Seen seen = Look(lake.lake(), b.id, h->chunk_ids[0]);
  EXPECT_EQ(seen.first, 0);
  EXPECT_EQ(seen.last, 0);
  EXPECT_EQ(lake.Status().zeroed_bytes(), kLarge);
}

TEST(LakeChunkSizesTest, FreeChunksOfOtherSizesMakeRoomWhenTheLakeIsFull) {
  // 64 MiB, all of it precreated in 2 MiB chunks.
  TestLake lake(TestLakeOptions(32, 32));
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 1, kLarge);
  ASSERT_TRUE(g.ok()) << g.status();
  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.recycled_bytes(), kLarge);
  EXPECT_EQ(st.devices(0).created_chunks(), 17u);  // 16 small + 1 large
  EXPECT_EQ(st.devices(0).created_bytes(), 64u << 20);
  EXPECT_EQ(st.devices(0).free_chunks(), 16u);
  // Without room or free chunks to recycle, and nobody to ask: refused.
  absl::StatusOr<LeaseGrant> more = lake->Lease(a.id, a.token, 0, 2, kLarge);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(more.status().message(), HasSubstr("in chunks of that size"));
}

TEST(LakeChunkSizesTest, LargeChunksHandedFromAnIdleSessionToABusyOne) {
  TestLake lake(TestLakeOptions(64));
  SessionTicket idle = lake.Open(1000, "idle");
  absl::StatusOr<LeaseGrant> held =
      lake->Lease(idle.id, idle.token, 0, 4, kLarge);
  ASSERT_TRUE(held.ok()) << held.status();
  auto sink = std::make_shared<ReturningSink>(&lake.lake(), idle,
                                              held->chunk_ids, kLarge);
  // The idle session's usage report comes late, after the busy lease is
  // through, as it can from a slow thread (issue 16).
  absl::Notification report_gate;
  sink->HoldReportUntil(&report_gate);
  ASSERT_TRUE(lake->AttachWatcher(idle.id, idle.token, sink).ok());
  SessionTicket busy = lake.Open(1000, "busy");
  absl::StatusOr<LeaseGrant> got =
      lake->Lease(busy.id, busy.token, 0, 4, kLarge);
  ASSERT_TRUE(got.ok()) << got.status();
  // Only now does the idle session report, and it reports to a session
  // that is still there: the test awaits the answer before its lake ends.
  report_gate.Notify();
  EXPECT_TRUE(sink->AwaitAnswer().ok());
  // The same chunks, moved as they were: nothing made, nothing recycled.
  EXPECT_THAT(got->chunk_ids,
              ::testing::UnorderedElementsAreArray(held->chunk_ids));
  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 4u);
  EXPECT_EQ(st.recycled_bytes(), 0u);
  EXPECT_EQ(st.handoff_seconds().count(), 1u);
  EXPECT_GT(st.handoff_seconds().sum(), 0.0);
  EXPECT_EQ(st.pressure_wait_seconds().count(), 1u);
}

}  // namespace
}  // namespace gmlake
