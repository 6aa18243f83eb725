// Copyright 2026 The GMLake Authors.
//
// A lake that runs out of descriptors says so, instead of blaming the
// device (issue 8: on the H200 a 40 GiB lease failed at
// cuMemExportToShareableHandle and the log said "the device may hold less
// than --capacity"). Real host chunks; the descriptor limit is lowered for
// the test.

#include <sys/resource.h>

#include "daemon/fd_usage.h"
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

}  // namespace
}  // namespace testing
}  // namespace gmlake
