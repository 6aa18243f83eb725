// Copyright 2026 The GMLake Authors.
//
// ServiceNotifier against a real datagram socket standing in for systemd's.

#include "daemon/service_notifier.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

// A name no other run has: not the pid's, which runs in sandboxes of their
// own pid namespace (bazel test --runs_per_test) share.
std::string UniqueName(const char* prefix) {
  std::string name = std::string(prefix) + "XXXXXX";
  const int fd = ::mkstemp(name.data());
  EXPECT_GE(fd, 0) << std::strerror(errno);
  ::close(fd);
  ::unlink(name.c_str());
  return name;
}

using ::testing::HasSubstr;

class Notify : public ::testing::Test {
 protected:
  void TearDown() override {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  // A datagram socket like systemd's; `name` "@..." is abstract.
  UniqueFd Listen(const std::string& name) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    EXPECT_TRUE(fd.valid());
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, name.data(), name.size());
    if (name[0] == '@') {
      a.sun_path[0] = '\0';
    } else {
      path_ = name;
    }
    const socklen_t len = offsetof(sockaddr_un, sun_path) + name.size();
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len), 0)
        << std::strerror(errno);
    return fd;
  }

  static std::string Receive(const UniqueFd& fd) {
    char buf[512];
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    return n < 0 ? std::string("<nothing>") : std::string(buf, n);
  }

  std::string path_;
};

TEST_F(Notify, WithoutAServiceManagerNothingIsSentAndAllIsWell) {
  ::unsetenv("NOTIFY_SOCKET");
  ServiceNotifier n = ServiceNotifier::FromEnvironment();
  EXPECT_FALSE(n.enabled());
  EXPECT_TRUE(n.Notify("READY=1").ok());
  EXPECT_EQ(n.watchdog_interval(), absl::ZeroDuration());
}

TEST_F(Notify, ReachesAPathSocket) {
  const std::string path = UniqueName("/tmp/gml.notify.");
  UniqueFd systemd = Listen(path);
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  ServiceNotifier n = ServiceNotifier::FromEnvironment();
  ASSERT_TRUE(n.enabled());
  ASSERT_TRUE(n.Notify("READY=1\nSTATUS=serving").ok());
  EXPECT_EQ(Receive(systemd), "READY=1\nSTATUS=serving");
}

TEST_F(Notify, ReachesAnAbstractSocket) {
  const std::string name = "@" + UniqueName("/tmp/gml.notify.abstract.");
  UniqueFd systemd = Listen(name);
  ::setenv("NOTIFY_SOCKET", name.c_str(), 1);
  ServiceNotifier n = ServiceNotifier::FromEnvironment();
  ASSERT_TRUE(n.Notify("STOPPING=1").ok());
  EXPECT_EQ(Receive(systemd), "STOPPING=1");
}

TEST_F(Notify, ASocketNobodyListensOnIsAnErrorNamingIt) {
  ::setenv("NOTIFY_SOCKET", "/tmp/gml.notify.nobody", 1);
  ServiceNotifier n = ServiceNotifier::FromEnvironment();
  absl::Status s = n.Notify("READY=1");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("NOTIFY_SOCKET=/tmp/gml.notify.nobody"));
  EXPECT_THAT(s.message(), HasSubstr("READY=1"));
}

TEST_F(Notify, ARelativePathIsRefused) {
  ::setenv("NOTIFY_SOCKET", "notify.sock", 1);
  ServiceNotifier n = ServiceNotifier::FromEnvironment();
  EXPECT_FALSE(n.status().ok());
  EXPECT_THAT(n.Notify("READY=1").message(), HasSubstr("absolute"));
}

TEST_F(Notify, TheWatchdogIsOursOnlyWhenItNamesOurPid) {
  ::setenv("WATCHDOG_USEC", "30000000", 1);
  EXPECT_EQ(ServiceNotifier::FromEnvironment().watchdog_interval(),
            absl::Seconds(30));
  ::setenv("WATCHDOG_PID", absl::StrCat(::getpid()).c_str(), 1);
  EXPECT_EQ(ServiceNotifier::FromEnvironment().watchdog_interval(),
            absl::Seconds(30));
  ::setenv("WATCHDOG_PID", "1", 1);
  EXPECT_EQ(ServiceNotifier::FromEnvironment().watchdog_interval(),
            absl::ZeroDuration());
}

}  // namespace
}  // namespace gmlake
