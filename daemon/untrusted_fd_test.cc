// Copyright 2026 The GMLake Authors.

#include "daemon/untrusted_fd.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/send_with_fd.h"

namespace gmlake {
namespace {

TEST(UntrustedFd, MemfdIsAChunk) {
  UniqueFd fd(::memfd_create("chunk", MFD_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  DescriptorFacts f;
  ASSERT_TRUE(GetDescriptorFacts(fd.get(), &f).ok());
  EXPECT_EQ(DescribeDescriptor(f), "a memfd");
  EXPECT_TRUE(CheckChunkDescriptorKind(f).ok());
}

TEST(UntrustedFd, SocketsPipesAndPlainFilesAreRefused) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int pp[2];
  ASSERT_EQ(::pipe(pp), 0);
  std::vector<UniqueFd> fds;
  for (int fd : {sv[0], sv[1], pp[0], pp[1]}) fds.emplace_back(fd);
  fds.emplace_back(::open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  for (const UniqueFd& fd : fds) {
    DescriptorFacts f;
    ASSERT_TRUE(GetDescriptorFacts(fd.get(), &f).ok());
    EXPECT_FALSE(CheckChunkDescriptorKind(f).ok()) << DescribeDescriptor(f);
  }
  std::vector<UniqueFd> one;
  one.emplace_back(::memfd_create("chunk", MFD_CLOEXEC));
  one.push_back(std::move(fds[0]));
  absl::Status s = CheckChunkDescriptors(one);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("descriptor 2 of 2: a socket"), std::string::npos)
      << s;
}

TEST(UntrustedFd, CharacterDevicesAndDmaBufsPass) {
  DescriptorFacts chr{S_IFCHR | 0666, false, false};
  EXPECT_TRUE(CheckChunkDescriptorKind(chr).ok());
  DescriptorFacts dmabuf{S_IFREG | 0600, false, true};
  EXPECT_TRUE(CheckChunkDescriptorKind(dmabuf).ok());
  DescriptorFacts anon{0600, false, false};
  EXPECT_TRUE(CheckChunkDescriptorKind(anon).ok());
  DescriptorFacts file{S_IFREG | 0600, false, false};
  EXPECT_FALSE(CheckChunkDescriptorKind(file).ok());
}

// Every descriptor handed over is closed, by the closer thread.
TEST(UntrustedFd, CloseUntrustedClosesThem) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  UniqueFd keep(sv[1]);
  CloseUntrusted(UniqueFd(sv[0]));
  char c;
  // EOF once the other end is closed.
  const timeval tv{30, 0};
  ::setsockopt(keep.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  EXPECT_EQ(::read(keep.get(), &c, 1), 0);
}

TEST(UntrustedFd, RefusedDescriptorsAreRefusedBySendmsg) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  absl::Status s = RefuseDescriptors(b.get());
  if (!s.ok()) GTEST_SKIP() << s;  // a kernel before 6.16
  EXPECT_EQ(testing::SendWithFd(a.get(), "x", a.get()), EPERM);
}

}  // namespace
}  // namespace gmlake
