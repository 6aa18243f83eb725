// Copyright 2026 The GMLake Authors.
//
// DaemonProcess with a real gmlaked: started and answering, and a gmlaked
// that refuses its flags reported as gone with its status, not after the
// whole readiness wait (gmlake-replay --lake used to wait a minute for it).

#include "tools/daemon_process.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

std::string Gmlaked() { return RunfilePath("daemon/gmlaked"); }

TEST(DaemonProcess, StartsAndAnswers) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> d = DaemonProcess::Start(
      Gmlaked(), {"--backend=host", "--host_capacity=1GiB", "--capacity=1"});
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<v1::StatusResponse> st = (*d)->Status();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->backend(), "host");
}

TEST(DaemonProcess, AGmlakedThatExitsIsReportedAsGone) {
  // A wait far longer than any test's: only noticing the exit ends it.
  absl::StatusOr<std::unique_ptr<DaemonProcess>> d = DaemonProcess::Start(
      Gmlaked(), {"--backend=host", "--capacity=lots"}, absl::Hours(1));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(d.status().message(), HasSubstr("exited with status 1"));
  EXPECT_THAT(d.status().message(), HasSubstr("before it answered"));
}

}  // namespace
}  // namespace gmlake
