// Copyright 2026 The GMLake Authors.
//
// The lake's counters that metrics and `gmlakectl status` show: pressure
// rounds and how long leases waited for them, zeroed bytes.

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "daemon/lake.h"
#include "daemon/lake_testing.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace testing {
namespace {

constexpr size_t kChunk = kTestChunk;

TEST(LakeCounters, PressureRoundsAndTheirWaitAreCounted) {
  TestLake lake(TestLakeOptions(4));
  SessionTicket idle = lake.Open(1000, "idle");
  absl::StatusOr<LeaseGrant> held = lake->Lease(idle.id, idle.token, 0, 4);
  ASSERT_TRUE(held.ok());
  auto sink =
      std::make_shared<ReturningSink>(&lake.lake(), idle, held->chunk_ids);
  ASSERT_TRUE(lake->AttachWatcher(idle.id, idle.token, sink).ok());

  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.pressure_rounds(), 0u);
  EXPECT_EQ(st.pressure_wait_seconds().count(), 0u);

  // Another uid's lease: the chunks come back with uid 1000's data and are
  // zeroed for it.
  SessionTicket busy = lake.Open(2000, "busy");
  absl::StatusOr<LeaseGrant> got = lake->Lease(busy.id, busy.token, 0, 3);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(sink->AwaitAnswer().ok());
  st = lake.Status();
  EXPECT_EQ(st.pressure_rounds(), 1u);
  const v1::Histogram& h = st.pressure_wait_seconds();
  EXPECT_EQ(h.count(), 1u);
  EXPECT_GT(h.sum(), 0);
  ASSERT_EQ(h.cumulative_counts_size(), h.upper_bounds_size() + 1);
  EXPECT_EQ(h.cumulative_counts(h.cumulative_counts_size() - 1), 1u);
  EXPECT_EQ(st.zeroed_bytes(), 3 * kChunk);
  EXPECT_EQ(st.chunks_scrubbed(), 3u);

  // A lease served from free memory asks nobody and waits for nothing.
  ASSERT_TRUE(lake->Return(busy.id, busy.token, {got->chunk_ids[0]}).ok());
  ASSERT_TRUE(lake->Lease(busy.id, busy.token, 0, 1).ok());
  st = lake.Status();
  EXPECT_EQ(st.pressure_rounds(), 1u);
  EXPECT_EQ(st.pressure_wait_seconds().count(), 1u);
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
