// Copyright 2026 The GMLake Authors.

#include "common/fd_usage.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

TEST(FdUsage, CountsOpenDescriptors) {
  const FdUsage before = CurrentFdUsage();
  EXPECT_GE(before.open, 3u);  // stdin, stdout, stderr at least
  rlimit r{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &r), 0);
  EXPECT_EQ(before.limit, r.rlim_cur);
  std::vector<int> fds;
  for (int i = 0; i < 10; ++i) fds.push_back(::open("/dev/null", O_RDONLY));
  EXPECT_EQ(CurrentFdUsage().open, before.open + 10);
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(CurrentFdUsage().open, before.open);
}

TEST(FdUsage, OutNearTheLimit) {
  EXPECT_FALSE(OutOfDescriptors({100, 20000}));
  EXPECT_TRUE(OutOfDescriptors({19990, 20000}));
  EXPECT_TRUE(OutOfDescriptors({20000, 20000}));
  EXPECT_FALSE(OutOfDescriptors({20000, 0}));  // limit unknown
  EXPECT_THAT(DescribeOutOfDescriptors({19990, 20000}),
              HasSubstr("out of file descriptors (19990 open, limit 20000"));
  EXPECT_THAT(DescribeOutOfDescriptors({19990, 20000}),
              HasSubstr("LimitNOFILE="));
}

}  // namespace
}  // namespace gmlake
