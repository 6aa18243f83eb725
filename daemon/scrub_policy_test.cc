// Copyright 2026 The GMLake Authors.

#include "daemon/scrub_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

TEST(ScrubPolicyTest, Parse) {
  EXPECT_EQ(*ParseScrubPolicy("always"), ScrubPolicy::kAlways);
  EXPECT_EQ(*ParseScrubPolicy("cross-uid"), ScrubPolicy::kCrossUid);
  EXPECT_EQ(*ParseScrubPolicy("cross_uid"), ScrubPolicy::kCrossUid);
  EXPECT_EQ(*ParseScrubPolicy("never"), ScrubPolicy::kNever);
  EXPECT_THAT(ParseScrubPolicy("sometimes").status().message(),
              HasSubstr("always, cross-uid or never"));
  for (ScrubPolicy p :
       {ScrubPolicy::kAlways, ScrubPolicy::kCrossUid, ScrubPolicy::kNever}) {
    EXPECT_EQ(*ParseScrubPolicy(ScrubPolicyName(p)), p);
  }
}

TEST(ScrubPolicyTest, WhoGetsZeroedMemory) {
  // Fresh chunks never need it.
  for (ScrubPolicy p :
       {ScrubPolicy::kAlways, ScrubPolicy::kCrossUid, ScrubPolicy::kNever}) {
    EXPECT_FALSE(NeedsScrub(p, kNoUid, 1000));
  }
  EXPECT_TRUE(NeedsScrub(ScrubPolicy::kAlways, 1000, 1000));
  EXPECT_TRUE(NeedsScrub(ScrubPolicy::kCrossUid, 1000, 2000));
  EXPECT_FALSE(NeedsScrub(ScrubPolicy::kCrossUid, 1000, 1000));
  EXPECT_TRUE(NeedsScrub(ScrubPolicy::kCrossUid, 0, 65534));
  EXPECT_FALSE(NeedsScrub(ScrubPolicy::kNever, 1000, 2000));
}

}  // namespace
}  // namespace gmlake
