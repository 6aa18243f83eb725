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

TEST(BetterCoverTest, TheLargestWithinTheBoundForAGrowingTensor) {
  // The large pool: a one-page rest among free chunks of 2, 4 and 8 pages,
  // up to 5: the 4-page chunk, whose three extra pages the next steps of
  // a growing tensor grow into with no call.
  EXPECT_TRUE(BetterCover(2, 0, 1, 5, /*largest=*/true));
  EXPECT_TRUE(BetterCover(4, 2, 1, 5, true));  // more extra pages
  EXPECT_FALSE(BetterCover(2, 4, 1, 5, true));
  EXPECT_FALSE(BetterCover(8, 4, 1, 5, true));  // past the bound
  EXPECT_FALSE(BetterCover(4, 4, 1, 5, true));  // a tie keeps the first
}

TEST(CoverBeforeStealingTest, AFreeBlockOfTheLargePoolGrowingByOnePage) {
  EXPECT_TRUE(CoverBeforeStealing(/*small_pool=*/false,
                                  /*grows_free_block=*/true, 1));
  EXPECT_FALSE(CoverBeforeStealing(false, true, 2));   // a larger shortfall
  EXPECT_FALSE(CoverBeforeStealing(false, false, 1));  // a mapping of its own
  EXPECT_FALSE(CoverBeforeStealing(true, true, 1));    // the small pool
}

TEST(CoverNowTest, TheSmallPoolAtOnceTheLargeOnceEnoughIsStranded) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  EXPECT_TRUE(CoverNow(/*small_pool=*/true, 0, 10 * kGiB, 0.002));
  // 0.2% of 10 GiB is 20.5 MiB: ten one-page rests are not enough.
  EXPECT_FALSE(CoverNow(false, 20 << 20, 10 * kGiB, 0.002));
  EXPECT_TRUE(CoverNow(false, 21 << 20, 10 * kGiB, 0.002));
  EXPECT_TRUE(CoverNow(false, 0, 10 * kGiB, 0));  // 0: at once
}

}  // namespace
}  // namespace gmlake
