// Copyright 2026 The GMLake Authors.

#include "client/stitch_policy.h"

#include <optional>

#include "absl/types/span.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

constexpr size_t kPage = 2 << 20;

// ChoosePlacement's answer for `size` bytes in pages of kPage; a failed
// expectation, and a placement no test expects, when there is none.
Placement Place(absl::Span<const GapView> gaps, size_t size) {
  std::optional<Placement> p = ChoosePlacement(gaps, size, kPage);
  EXPECT_TRUE(p.has_value()) << "no placement for " << size << " bytes";
  return p.value_or(Placement{~size_t{0}, ~size_t{0}, ~size_t{0}});
}

TEST(ChoosePlacementTest, JoinsTheFreeTailOfTheLeftSegment) {
  // 2.1 MiB after a 1.9 MiB free tail needs one new chunk, not two.
  const GapView gaps[] = {{10, 100, kPage * 19 / 20, 0}};
  const Placement p = Place(gaps, kPage * 21 / 20);
  EXPECT_EQ(p.first_page, 10u);
  EXPECT_EQ(p.pages, 1u);
}

TEST(ChoosePlacementTest, GrowsTheRightSegmentBackwards) {
  const GapView gaps[] = {{10, 5, 0, kPage / 2}};
  const Placement p = Place(gaps, kPage * 3 / 2);
  EXPECT_EQ(p.pages, 1u);
  EXPECT_EQ(p.first_page, 14u);  // the last page of the gap
}

TEST(ChoosePlacementTest, FillingAGapJoinsBothNeighbours) {
  // 1 page gap between 1 MiB free on each side: 4 MiB fits with one chunk.
  const GapView gaps[] = {{3, 1, kPage / 2, kPage / 2}, {50, 1000, 0, 0}};
  const Placement p = Place(gaps, 2 * kPage);
  EXPECT_EQ(p.gap, 0u);
  EXPECT_EQ(p.pages, 1u);
}

TEST(ChoosePlacementTest, LeavesTheMostRoomToGrowOnATie) {
  // Three pages anywhere: at the start of the largest gap, so that the
  // block can grow in place later (a KV cache grows a page at a time).
  const GapView gaps[] = {{0, 4, 0, 0}, {2000, 1000, 0, 0}, {3000, 8, 0, 0}};
  const Placement p = Place(gaps, 3 * kPage);
  EXPECT_EQ(p.gap, 1u);
  EXPECT_EQ(p.first_page, 2000u);
  EXPECT_EQ(p.pages, 3u);
}

TEST(ChoosePlacementTest, ExtendsTheFreeTailWithTheMostRoomAfterIt) {
  // Two free tails save a page each; the one with room after it wins.
  const GapView gaps[] = {{10, 3, kPage, 0}, {100, 50, kPage, 0}};
  const Placement p = Place(gaps, 3 * kPage);
  EXPECT_EQ(p.gap, 1u);
  EXPECT_EQ(p.first_page, 100u);
  EXPECT_EQ(p.pages, 2u);
}

TEST(ChoosePlacementTest, FewerPagesBeatMoreRoom) {
  // Room to grow never costs a page mapped now.
  const GapView gaps[] = {{10, 2, kPage, 0}, {100, 1000, 0, 0}};
  const Placement p = Place(gaps, 3 * kPage);
  EXPECT_EQ(p.gap, 0u);
  EXPECT_EQ(p.pages, 2u);
}

TEST(ChoosePlacementTest, NothingWhenNoGapIsLargeEnough) {
  const GapView gaps[] = {{0, 2, 0, 0}};
  EXPECT_FALSE(ChoosePlacement(gaps, 5 * kPage, kPage).has_value());
  EXPECT_FALSE(ChoosePlacement({}, kPage, kPage).has_value());
}

TEST(OrderVictimsTest, SmallestBlocksGiveTheirPagesFirst) {
  const VictimView v[] = {{100 * kPage, 100, 1},
                          {3 * kPage, 2, 2},
                          {3 * kPage, 3, 0},
                          {50 * kPage, 49, 3}};
  EXPECT_EQ(OrderVictims(v), (std::vector<size_t>{2, 1, 3, 0}));
}

TEST(GrowRatherThanStitchTest, GrowsWhileWithinTheSlack) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  // 1% slack over a 10 GiB peak: 10.1 GiB may be reserved.
  EXPECT_TRUE(GrowRatherThanStitch(10 * kGiB, kGiB / 20, 10 * kGiB, 0.01));
  EXPECT_FALSE(GrowRatherThanStitch(10 * kGiB, kGiB / 5, 10 * kGiB, 0.01));
  // No slack: always stitch when there is something to stitch.
  EXPECT_FALSE(GrowRatherThanStitch(0, 1, 10 * kGiB, 0));
  // The first request grows: nothing is reserved yet.
  EXPECT_TRUE(GrowRatherThanStitch(0, 2 << 20, 2 << 20, 0.005));
}

TEST(GrowSlackForTest, TheLargeSlackOnlyForALargeRequestRaisingThePeak) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  EXPECT_DOUBLE_EQ(GrowSlackFor(64 * kMiB, true, 0.005, 0.0075), 0.0075);
  EXPECT_DOUBLE_EQ(GrowSlackFor(64 * kMiB, false, 0.005, 0.0075), 0.005)
      << "the peak does not rise";
  EXPECT_DOUBLE_EQ(GrowSlackFor(63 * kMiB, true, 0.005, 0.0075), 0.005)
      << "not large";
  EXPECT_DOUBLE_EQ(GrowSlackFor(64 * kMiB, true, 0.005, 0), 0.005)
      << "0: grow_slack";
  EXPECT_DOUBLE_EQ(GrowSlackFor(64 * kMiB, true, 0.01, 0.0075), 0.01)
      << "never less than grow_slack";
  EXPECT_DOUBLE_EQ(GrowSlackFor(64 * kMiB, true, 0, 0.0075), 0)
      << "grow_slack:0 stitches whenever free chunks exist";
}

TEST(GrowInPlaceTest, OnlyABlockShortByAtMostTheReach) {
  const uint64_t mib = 1 << 20;
  EXPECT_TRUE(GrowInPlace(1000 * mib, 1001 * mib, 0.0625));
  EXPECT_TRUE(GrowInPlace(940 * mib, 1000 * mib, 0.0625));  // 6% short
  EXPECT_FALSE(GrowInPlace(930 * mib, 1000 * mib, 0.0625));
  EXPECT_FALSE(GrowInPlace(1000 * mib, 1000 * mib, 0.0625)) << "it fits";
  EXPECT_FALSE(GrowInPlace(1200 * mib, 1000 * mib, 0.0625));
  EXPECT_FALSE(GrowInPlace(1000 * mib, 1001 * mib, 0)) << "0: never";
  // The default reach: 40% of a large request.
  EXPECT_TRUE(GrowInPlace(600 * mib, 1000 * mib, 0.4));
  EXPECT_FALSE(GrowInPlace(590 * mib, 1000 * mib, 0.4));
  EXPECT_TRUE(GrowInPlace(40 * mib, 64 * mib, 0.4)) << "64 MiB is large";
  // Below 64 MiB at most 1/16, whatever the reach.
  EXPECT_FALSE(GrowInPlace(30 * mib, 40 * mib, 0.4));
  EXPECT_TRUE(GrowInPlace(38 * mib, 40 * mib, 0.4));
  EXPECT_FALSE(GrowInPlace(38 * mib, 40 * mib, 0.04)) << "a smaller reach";
}

TEST(BetterFitTest, LargestWithinTheRestElseSmallestBeyondIt) {
  EXPECT_TRUE(BetterFit(2, 1, 3));  // both fit: the larger
  EXPECT_FALSE(BetterFit(1, 2, 3));
  EXPECT_TRUE(BetterFit(3, 4, 3));  // one fits
  EXPECT_FALSE(BetterFit(4, 3, 3));
  EXPECT_TRUE(BetterFit(16, 512, 1));  // neither: the smaller
  EXPECT_FALSE(BetterFit(512, 16, 1));
}

}  // namespace
}  // namespace gmlake
