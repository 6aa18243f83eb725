// Copyright 2026 The GMLake Authors.
//
// OpenChunkSource against a real gmlaked (fork+exec by the harness, host
// backend), with the allocator on top: which lake serves which device.

#include "client/open_chunk_source.h"

#include <stdlib.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/allocator.h"
#include "client/options.h"
#include "common/vmm_books.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_harness.h"

namespace gmlake {
namespace {

using testing::Daemon;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

uint64_t LeasedOn(Daemon* daemon, int device) {
  absl::StatusOr<v1::StatusResponse> st = daemon->Status();
  EXPECT_TRUE(st.ok()) << st.status();
  uint64_t chunks = 0;
  for (const auto& s : st->sessions()) {
    for (const auto& l : s.leased()) {
      if (l.device() == device) chunks += l.chunks();
    }
  }
  return chunks;
}

// A process pinned to the node's devices 1 and 5 (as CUDA_VISIBLE_DEVICES=1,5
// pins a rank) next to a gmlaked serving devices 0 and 1: its device 0 is
// gmlaked's 1, and its device 1, which gmlaked does not serve, gets an
// embedded lake of its own, said at start (issue 11).
TEST(OpenChunkSourceTest, ADeviceGmlakedDoesNotServeGetsAnEmbeddedLake) {
  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start({"--capacity=64MiB", "--host_devices=2"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  // Only this process (the daemon started already).
  ASSERT_EQ(setenv("GMLAKE_HOST_VISIBLE_DEVICES", "1,5", 1), 0);
  absl::StatusOr<AllocatorOptions> o = ParseConf(
      absl::StrCat("backend:host,lake:daemon,log:false,lease_ahead:0,socket:",
                   (*daemon)->socket()));
  ASSERT_TRUE(o.ok()) << o.status();
  absl::StatusOr<OpenedChunkSource> opened = OpenChunkSource(*o);
  unsetenv("GMLAKE_HOST_VISIBLE_DEVICES");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_THAT(opened->description, HasSubstr((*daemon)->socket()));
  EXPECT_THAT(opened->description,
              HasSubstr(absl::StrCat("device 1 (", EmulatedDeviceUuid(5),
                                     "): not served by gmlaked")));
  EXPECT_THAT(opened->description, HasSubstr("embedded lake"));
  {
    Allocator a(std::move(opened->source), *o);
    ASSERT_EQ(a.device_count(), 2);
    absl::StatusOr<DevicePtr> p0 = a.Malloc(8 * kMiB, 0, 0);
    ASSERT_TRUE(p0.ok()) << p0.status();
    absl::StatusOr<DevicePtr> p1 = a.Malloc(8 * kMiB, 1, 0);
    ASSERT_TRUE(p1.ok()) << p1.status();
    std::memset(reinterpret_cast<void*>(*p0), 1, 8 * kMiB);
    std::memset(reinterpret_cast<void*>(*p1), 2, 8 * kMiB);
    // Device 0's chunks are gmlaked's device 1's (8 MiB in two of the
    // allocator's max_chunk, as the embedded lake cuts it); device 1's are
    // not gmlaked's at all.
    EXPECT_EQ(LeasedOn(daemon->get(), 1), 2u);
    EXPECT_EQ(LeasedOn(daemon->get(), 0), 0u);
    EXPECT_EQ(reinterpret_cast<const char*>(*p0)[8 * kMiB - 1], 1);
    EXPECT_EQ(reinterpret_cast<const char*>(*p1)[0], 2);
    ASSERT_TRUE(a.Free(*p0).ok());
    ASSERT_TRUE(a.Free(*p1).ok());
    EXPECT_EQ(a.EmptyCache(), 16 * kMiB);
    EXPECT_TRUE(a.CheckInvariants().ok());
  }
  EXPECT_EQ(LeasedOn(daemon->get(), 1), 0u);
  EXPECT_TRUE((*daemon)->CheckBooks().ok());
}

}  // namespace
}  // namespace gmlake
