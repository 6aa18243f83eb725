// Copyright 2026 The GMLake Authors.

#include "tools/held_report.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = 1 << 20;

TEST(HeldReport, SaysWhyEveryHeldByteIsHeld) {
  v1::StatusResponse st;
  st.set_release_idle_seconds(60);
  v1::DeviceStatus* d = st.add_devices();
  d->set_device(0);
  d->set_created_bytes(20 * kMiB);
  d->set_leased_bytes(10 * kMiB);
  d->set_ending_bytes(4 * kMiB);
  d->set_free_bytes(8 * kMiB);
  d->set_floor_bytes(6 * kMiB);
  d->set_floor_kept_bytes(2 * kMiB);
  d->set_idle_bytes(6 * kMiB);
  d->set_next_release_seconds(47.2);
  d->set_scrubbing_bytes(2 * kMiB);
  v1::DeviceStatus* empty = st.add_devices();
  empty->set_device(1);
  v1::SessionStatus* a = st.add_sessions();
  v1::DeviceLeased* l = a->add_leased();
  l->set_device(0);
  l->set_bytes(6 * kMiB);
  v1::SessionStatus* b = st.add_sessions();
  b->set_ending(true);
  l = b->add_leased();
  l->set_device(0);
  l->set_bytes(4 * kMiB);

  const std::string r = HeldReport(st);
  EXPECT_THAT(r, HasSubstr("device 0: 20.00 MiB created\n"));
  EXPECT_THAT(r, HasSubstr("10.00 MiB leased to 2 sessions (4.00 MiB of it "
                           "to 1 ended session, kept until the process "
                           "exits)\n"));
  EXPECT_THAT(r, HasSubstr("2.00 MiB being zeroed for a lease\n"));
  EXPECT_THAT(r, HasSubstr("2.00 MiB free, kept as the floor of 6.00 MiB "
                           "(--precreate)\n"));
  EXPECT_THAT(r, HasSubstr("6.00 MiB free, going back to the driver once "
                           "idle; the first in 48s unless leased "
                           "(--release_idle=1m)\n"));
  EXPECT_THAT(r, HasSubstr("device 1: nothing created"));
}

TEST(HeldReport, WithoutReleaseFreeMemoryWaitsForTrim) {
  v1::StatusResponse st;
  v1::DeviceStatus* d = st.add_devices();
  d->set_created_bytes(4 * kMiB);
  d->set_free_bytes(4 * kMiB);
  d->set_idle_bytes(4 * kMiB);
  d->set_next_release_seconds(-1);
  const std::string r = HeldReport(st);
  EXPECT_THAT(r, HasSubstr("4.00 MiB free, kept until gmlakectl trim "
                           "(--release_idle=0)"));
  EXPECT_THAT(r, Not(HasSubstr("leased")));
}

}  // namespace
}  // namespace gmlake
