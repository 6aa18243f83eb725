// Copyright 2026 The GMLake Authors.

#include "daemon/histogram.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::ElementsAre;

TEST(Histogram, BucketsAreCumulativeAndLessOrEqual) {
  Histogram h({0.1, 1, 10});
  h.Observe(0.05);
  h.Observe(0.1);  // on the bound: in its bucket
  h.Observe(0.5);
  h.Observe(20);  // above every bound: +Inf only
  EXPECT_THAT(h.CumulativeCounts(), ElementsAre(2, 3, 3, 4));
  EXPECT_EQ(h.count(), 4u);
  EXPECT_DOUBLE_EQ(h.sum(), 20.65);
}

TEST(Histogram, EmptyHasZerosEverywhere) {
  Histogram h(Histogram::LatencyBounds());
  EXPECT_EQ(h.CumulativeCounts().size(), Histogram::LatencyBounds().size() + 1);
  for (uint64_t c : h.CumulativeCounts()) EXPECT_EQ(c, 0u);
  EXPECT_EQ(h.count(), 0u);
}

TEST(Histogram, LatencyBoundsIncrease) {
  const std::vector<double> b = Histogram::LatencyBounds();
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
}

}  // namespace
}  // namespace gmlake
