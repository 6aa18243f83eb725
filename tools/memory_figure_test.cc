// Copyright 2026 The GMLake Authors.
//
// The figures' data: live bytes keep every peak however thinned, PyTorch's
// reserved bytes follow the trace's segment events, and the charts carry
// every curve and reference line they promise.

#include "tools/memory_figure.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// a0 100, a1 200, F0, a2 50, F1, F2: live 100, 300, 200, 250, 50, 0.
Trace SmallTrace() {
  Trace t;
  t.name = "small";
  t.events = {{100, 0, 0, true}, {200, 1, 0, true}, {0, 0, 0, false},
              {50, 2, 0, true},  {0, 1, 0, false},  {0, 2, 0, false}};
  t.num_ids = 3;
  t.streams = {0};
  t.peak_live_bytes = 300;
  t.native_segments = {{0, 1000}, {0, 24}, {2, 500}, {3, -1000}};
  return t;
}

TEST(LiveBytesCurveTest, EveryEventWhenThereIsRoom) {
  const EventCurve c = LiveBytesCurve(SmallTrace(), 100);
  EXPECT_THAT(c.events, ElementsAre(0, 1, 2, 3, 4, 5, 6));
  EXPECT_THAT(c.bytes, ElementsAre(0, 100, 300, 200, 250, 50, 0));
}

TEST(LiveBytesCurveTest, ThinnedCurvesKeepThePeaks) {
  const EventCurve c = LiveBytesCurve(SmallTrace(), 2);
  EXPECT_THAT(c.events, ElementsAre(0, 3, 6));
  EXPECT_THAT(c.bytes, ElementsAre(0, 300, 250));
}

TEST(NativeReservedCurveTest, StepsAtTheSegmentEvents) {
  const EventCurve c = NativeReservedCurve(SmallTrace());
  EXPECT_THAT(c.events, ElementsAre(0, 2, 3, 6));
  EXPECT_THAT(c.bytes, ElementsAre(1024, 1524, 524, 524));
}

TEST(TraceMemoryChartTest, LiveGmlakeNativeAndExpandable) {
  Trace t = SmallTrace();
  t.peak_live_bytes = 10 * kGiB;
  t.native_segments = {{0, static_cast<int64_t>(14 * kGiB)}};
  const std::vector<ReservedSample> ours = {{0, 0}, {6, 10 * kGiB + kGiB / 10}};
  PyTorchPeaks peaks;
  peaks.expandable_reserved = 11 * kGiB;
  const Chart chart = TraceMemoryChart(t, ours, peaks);
  std::vector<std::string> labels;
  for (const ChartSeries& s : chart.series) labels.push_back(s.label);
  ASSERT_EQ(labels.size(), 3u);
  EXPECT_THAT(labels[0], HasSubstr("PyTorch native reserved"));
  EXPECT_THAT(labels[1], HasSubstr("GMLake reserved"));
  EXPECT_THAT(labels[2], HasSubstr("live bytes"));
  ASSERT_EQ(chart.levels.size(), 1u);
  EXPECT_THAT(chart.levels[0].label, HasSubstr("expandable"));
  EXPECT_DOUBLE_EQ(chart.levels[0].y, 11.0);
  EXPECT_THAT(chart.subtitle, HasSubstr("GMLake 10.10 GiB (1.010 x)"));
  EXPECT_THAT(chart.subtitle, HasSubstr("PyTorch native 14.00 GiB (1.400 x)"));
  EXPECT_THAT(chart.subtitle, HasSubstr("expandable 11.00 GiB (1.100 x)"));
  EXPECT_NEAR(chart.series[1].y.back(), 10.1, 1e-6);
  EXPECT_DOUBLE_EQ(chart.series[1].x.back(), 0.006);  // thousands of events
}

TEST(TraceMemoryChartTest, WithoutSegmentsThePeakFromTheBaselines) {
  Trace t = SmallTrace();
  t.native_segments.clear();
  PyTorchPeaks peaks;
  peaks.native_reserved = 2 * kGiB;
  const Chart chart = TraceMemoryChart(t, {}, peaks);
  EXPECT_EQ(chart.series.size(), 2u);
  ASSERT_EQ(chart.levels.size(), 1u);
  EXPECT_THAT(chart.levels[0].label, HasSubstr("native"));
}

TEST(LakeMemoryChartTest, EachProcessTheNodeCapacityFloorAndPhases) {
  LakeShareResult r;
  r.process_names = {"trainer", "inference"};
  r.capacity_bytes = 8 * kGiB;
  r.floor_bytes = 7 * kGiB;
  r.node_peak_bytes = 7 * kGiB + kGiB / 2;
  r.node_peak_over_floor = 7.5 / 7;
  r.sum_of_process_peaks_bytes = 12 * kGiB;
  r.timeline = {{0.0, 0, {0, 0}},
                {1.0, 6 * kGiB, {6 * kGiB, 0}},
                {2.0, 7 * kGiB, {3 * kGiB, 4 * kGiB}}};
  LakePhase a, b;
  a.trace = "trainer";
  b.trace = "inference";
  b.start_seconds = 1.5;
  r.phases = {a, b};
  const Chart chart = LakeMemoryChart(r);
  ASSERT_EQ(chart.series.size(), 3u);
  EXPECT_EQ(chart.series[0].label, "trainer");
  EXPECT_THAT(chart.series[0].y, ElementsAre(0, 6, 3));
  EXPECT_THAT(chart.series[1].y, ElementsAre(0, 0, 4));
  EXPECT_THAT(chart.series[2].label, HasSubstr("node"));
  EXPECT_THAT(chart.series[2].y, ElementsAre(0, 6, 7));
  ASSERT_EQ(chart.levels.size(), 2u);
  EXPECT_DOUBLE_EQ(chart.levels[0].y, 8);
  EXPECT_DOUBLE_EQ(chart.levels[1].y, 7);
  ASSERT_EQ(chart.markers.size(), 2u);
  EXPECT_EQ(chart.markers[1].label, "r1 inference");
  EXPECT_DOUBLE_EQ(chart.markers[1].x, 1.5);
  EXPECT_THAT(chart.subtitle, HasSubstr("1.071 x the floor"));
}

}  // namespace
}  // namespace gmlake
