// Copyright 2026 The GMLake Authors.
//
// A lake that runs out of descriptors says so, instead of blaming the
// device (issue 8: on the H200 a 40 GiB lease failed at
// cuMemExportToShareableHandle and the log said "the device may hold less
// than --capacity"). Real host chunks; the descriptor limit is lowered for
// the test.

#include <sys/resource.h>

#include "common/fd_usage.h"
#include "daemon/lake.h"
#include "daemon/lake_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Lowers RLIMIT_NOFILE's soft limit for its lifetime.
class FdLimit {
 public:
  explicit FdLimit(rlim_t soft) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit r = saved_;
    r.rlim_cur = soft;
    ok_ = ::setrlimit(RLIMIT_NOFILE, &r) == 0;
  }
  ~FdLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  bool ok_ = false;
};

TEST(LakeDescriptors, RunningOutOfDescriptorsIsNamedNotTheDevice) {
  TestLake lake(TestLakeOptions(400));
  SessionTicket a = lake.Open(1000);
  // Room for about 20 chunks (two descriptors each on the host backend).
  FdLimit limit(CurrentFdUsage().open + 40);
  ASSERT_TRUE(limit.ok());
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 100);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted)
      << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("out of file descriptors"));
  EXPECT_THAT(g.status().message(), HasSubstr("LimitNOFILE="));
  EXPECT_THAT(g.status().message(), Not(HasSubstr("device may hold less")));
  // Nothing leaked: what was made is free in the lake, the books balance.
  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.devices(0).leased_chunks(), 0u);
  EXPECT_EQ(st.devices(0).created_chunks(), st.devices(0).free_chunks());
}

TEST(LakeDescriptors, ExportedDescriptorsAreNotKeptPerChunk) {
  // 200 chunks held by the lake. The host backend's chunk is a memfd (one
  // descriptor each, inherent to that backend; a cuda chunk is a driver
  // handle, none); the exported descriptors come on demand and go with the
  // client's claim.
  const uint64_t before = CurrentFdUsage().open;
  TestLake lake(TestLakeOptions(400, 200));
  const uint64_t held = CurrentFdUsage().open - before;
  EXPECT_LE(held, 200u + 8) << "descriptors for 200 chunks";

  // A lease's descriptors still arrive, each a working export of its chunk.
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 50);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(lake->Claim(a.id, a.token, g->lease_id).ok());
  absl::StatusOr<std::vector<UniqueFd>> fds =
      lake->DupChunkFds(a.id, g->chunk_ids);
  ASSERT_TRUE(fds.ok()) << fds.status();
  ASSERT_EQ(fds->size(), 50u);
  for (const UniqueFd& fd : *fds) EXPECT_TRUE(fd.valid());
  fds->clear();
  EXPECT_LE(CurrentFdUsage().open - before, 200u + 8);

  // A returned chunk's descriptor is not handed out.
  ASSERT_TRUE(lake->Return(a.id, a.token, {g->chunk_ids[0]}).ok());
  EXPECT_EQ(lake->DupChunkFds(a.id, g->chunk_ids).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(LakeDescriptors, AChunkMadeForALeaseIsExportedOnceOnItsWayOut) {
  // Creating a chunk exports it once (proving it can be shared; the costly
  // first export on a GPU, ~63 us on an H200); that descriptor goes to the
  // lease's claim rather than a second export (~26 us a chunk more).
  TestLake lake(TestLakeOptions(64));
  SessionTicket a = lake.Open(1000);
  const VmmCallSnapshot start = lake.backend()->call_stats();
  const uint64_t fds_before = CurrentFdUsage().open;
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 10);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(lake->Claim(a.id, a.token, g->lease_id).ok());
  absl::StatusOr<std::vector<UniqueFd>> fds =
      lake->DupChunkFds(a.id, g->chunk_ids);
  ASSERT_TRUE(fds.ok()) << fds.status();
  ASSERT_EQ(fds->size(), 10u);
  for (const UniqueFd& fd : *fds) EXPECT_TRUE(fd.valid());
  EXPECT_EQ((lake.backend()->call_stats() - start).Count(VmmCall::kExport),
            10u);
  fds->clear();
  // Nothing kept once delivered: the memfds alone (host backend).
  EXPECT_LE(CurrentFdUsage().open - fds_before, 10u + 4);
  // Leased again from the free list: exported on demand, once each.
  ASSERT_TRUE(lake->Return(a.id, a.token, g->chunk_ids).ok());
  g = lake->Lease(a.id, a.token, 0, 10);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(lake->Claim(a.id, a.token, g->lease_id).ok());
  fds = lake->DupChunkFds(a.id, g->chunk_ids);
  ASSERT_TRUE(fds.ok()) << fds.status();
  EXPECT_EQ((lake.backend()->call_stats() - start).Count(VmmCall::kExport),
            20u);
}

TEST(LakeDescriptors, KeepingExportsIsStillAnOption) {
  const uint64_t before = CurrentFdUsage().open;
  LakeOptions o = TestLakeOptions(400, 100);
  o.export_on_demand = false;
  TestLake lake(std::move(o));
  // The memfd and the kept export: two per chunk.
  EXPECT_GE(CurrentFdUsage().open - before, 200u);
  SessionTicket a = lake.Open(1000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 10);
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::vector<UniqueFd>> fds =
      lake->DupChunkFds(a.id, g->chunk_ids);
  ASSERT_TRUE(fds.ok()) << fds.status();
  EXPECT_EQ(fds->size(), 10u);
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
