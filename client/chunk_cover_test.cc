// Copyright 2026 The GMLake Authors.

#include "client/chunk_cover.h"

#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(MaxCoverPagesTest, BoundedByTheExtraAllowedAndTheRoomBeside) {
  EXPECT_EQ(MaxCoverPages(1, 10, 1), 2u);  // one page of tail at most
  EXPECT_EQ(MaxCoverPages(3, 1, 4), 4u);   // one unmapped page beside
  EXPECT_EQ(MaxCoverPages(1, 0, 4), 1u);   // no room: nothing larger
  EXPECT_EQ(MaxCoverPages(1, 10, 0), 1u);  // covering is off
}

TEST(BetterCoverTest, TheSmallestChunkLargerThanTheRest) {
  // A one-page rest among free chunks of 2 and 4 pages, up to 3 pages.
  EXPECT_TRUE(BetterCover(2, 0, 1, 3));
  EXPECT_FALSE(BetterCover(4, 0, 1, 3));  // too many extra pages
  EXPECT_FALSE(BetterCover(1, 0, 1, 3));  // fits: taken by the stitch
  EXPECT_TRUE(BetterCover(2, 3, 1, 3));   // fewer extra pages
  EXPECT_FALSE(BetterCover(3, 2, 1, 3));
  EXPECT_FALSE(BetterCover(2, 2, 1, 3));  // a tie keeps the first
}

}  // namespace
}  // namespace gmlake
