// Copyright 2026 The GMLake Authors.

#include "daemon/pressure_policy.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {

bool operator==(const PressureAsk& a, const PressureAsk& b) {
  return a.session == b.session && a.bytes == b.bytes;
}
void PrintTo(const PressureAsk& a, std::ostream* os) {
  *os << "{session " << a.session << ", " << a.bytes << " bytes}";
}

namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(PressurePolicyTest, NobodyToAsk) {
  EXPECT_THAT(ChoosePressure({}, 100), IsEmpty());
  // Holding nothing: nothing to give.
  EXPECT_THAT(ChoosePressure({{1, 50, 0}}, 100), IsEmpty());
  EXPECT_THAT(ChoosePressure({{1, 50, 80}}, 0), IsEmpty());
}

TEST(PressurePolicyTest, LargestCacheFirstAndOnlyWhatIsShort) {
  // Session 2 caches the most: it alone covers the shortfall.
  EXPECT_THAT(ChoosePressure({{1, 10, 100}, {2, 60, 100}, {3, 0, 500}}, 40),
              ElementsAre(PressureAsk{2, 40}));
  // Caches first, largest first, across sessions.
  EXPECT_THAT(ChoosePressure({{1, 10, 100}, {2, 60, 100}, {3, 0, 500}}, 65),
              ElementsAre(PressureAsk{2, 60}, PressureAsk{1, 5}));
}

TEST(PressurePolicyTest, CachesThenTheRestOfWhatTheyHold) {
  // Caches give 70; the other 30 come from holdings, largest cache first
  // (session 2 gives more than its cache).
  EXPECT_THAT(ChoosePressure({{1, 10, 100}, {2, 60, 100}}, 100),
              ElementsAre(PressureAsk{2, 90}, PressureAsk{1, 10}));
  // Nothing cached: the largest holder first.
  EXPECT_THAT(ChoosePressure({{1, 0, 100}, {2, 0, 300}}, 350),
              ElementsAre(PressureAsk{2, 300}, PressureAsk{1, 50}));
}

TEST(PressurePolicyTest, NeverMoreThanHeld) {
  // A report of more cache than held counts only what is held.
  EXPECT_THAT(ChoosePressure({{1, 1000, 100}}, 500),
              ElementsAre(PressureAsk{1, 100}));
  EXPECT_THAT(ChoosePressure({{1, 0, 100}, {2, 0, 100}}, 1000),
              ElementsAre(PressureAsk{1, 100}, PressureAsk{2, 100}));
}

TEST(PressurePolicyTest, TheOrderDoesNotDependOnTheInput) {
  const std::vector<PressureAsk> a =
      ChoosePressure({{1, 0, 100}, {2, 0, 100}, {3, 0, 100}}, 150);
  const std::vector<PressureAsk> b =
      ChoosePressure({{3, 0, 100}, {1, 0, 100}, {2, 0, 100}}, 150);
  EXPECT_EQ(a, b);
  EXPECT_THAT(a, ElementsAre(PressureAsk{1, 100}, PressureAsk{2, 50}));
}

}  // namespace
}  // namespace gmlake
