// Copyright 2026 The GMLake Authors.

#include "daemon/chunk_identity.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(ChunkIdentityTest, AMemfdIsNamedByItsInodeWhateverTheDescriptor) {
  const int a = ::memfd_create("t", MFD_CLOEXEC);
  ASSERT_GE(a, 0);
  const int dup = ::fcntl(a, F_DUPFD_CLOEXEC, 0);
  const int b = ::memfd_create("t", MFD_CLOEXEC);
  const ChunkIdentity ia = IdentifyDescriptor(a);
  EXPECT_TRUE(ia.known());
  EXPECT_EQ(ia, IdentifyDescriptor(dup));
  EXPECT_FALSE(ia == IdentifyDescriptor(b));
  EXPECT_NE(ia.ToString().find("inode "), std::string::npos);
  ::close(a);
  ::close(dup);
  ::close(b);
}

TEST(ChunkIdentityTest, FilesOnDiskAreUnknown) {
  // Bazel's test directory is on disk (/tmp may be a tmpfs, whose files
  // are shmem like memfds).
  std::string path = ::testing::TempDir() + "/identity.XXXXXX";
  const int fd = ::mkstemp(path.data());
  ASSERT_GE(fd, 0);
  ::unlink(path.c_str());
  EXPECT_FALSE(IdentifyDescriptor(fd).known());
  ::close(fd);
}

TEST(ChunkIdentityTest, PipesAndClosedDescriptorsAreUnknown) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  EXPECT_FALSE(IdentifyDescriptor(p[0]).known());
  ::close(p[0]);
  ::close(p[1]);
  EXPECT_FALSE(IdentifyDescriptor(p[0]).known());
  EXPECT_FALSE(IdentifyDescriptor(-1).known());
  EXPECT_EQ(IdentifyDescriptor(-1).ToString(), "unknown");
}

}  // namespace
}  // namespace gmlake
