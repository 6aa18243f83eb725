// Copyright 2026 The GMLake Authors.

#include "tools/svg_chart.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(NiceTicksTest, RoundStepsCoveringTheRange) {
  EXPECT_THAT(NiceTicks(0, 19.6, 6), ElementsAre(0, 5, 10, 15));
  EXPECT_THAT(NiceTicks(0, 1, 4), ElementsAre(0, 0.5, 1));
  EXPECT_THAT(NiceTicks(0, 1, 10),
              ElementsAre(0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1));
  EXPECT_THAT(NiceTicks(3, 97, 8), ElementsAre(20, 40, 60, 80));
  EXPECT_THAT(NiceTicks(5, 5, 4), ElementsAre(5));  // no range
}

TEST(NiceTicksTest, TickTextIsShort) {
  EXPECT_EQ(TickText(0), "0");
  EXPECT_EQ(TickText(20), "20");
  EXPECT_EQ(TickText(0.25), "0.25");
  EXPECT_EQ(TickText(1e-15), "0");
}

Chart TwoSeries() {
  Chart c;
  c.title = "memory <over> time & more";
  c.subtitle = "a \"quoted\" subtitle";
  c.x_label = "events";
  c.y_label = "GiB";
  ChartSeries a;
  a.label = "live";
  a.color = "#777";
  a.x = {0, 1, 2, 3};
  a.y = {0, 2, 1, 3};
  ChartSeries b;
  b.label = "reserved";
  b.color = "#0072B2";
  b.steps = true;
  b.x = {0, 1, 3};
  b.y = {0, 3, 3};
  c.series = {a, b};
  c.levels = {{"capacity", "#D55E00", 4}};
  c.markers = {{"phase 2", 1.5}};
  return c;
}

TEST(RenderSvgTest, ADocumentWithEverySeriesLevelAndMarker) {
  const std::string svg = RenderSvg(TwoSeries());
  EXPECT_THAT(svg, StartsWith("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(Count(svg, "<polyline"), 2u);
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
  // Text is escaped.
  EXPECT_THAT(svg, HasSubstr("memory &lt;over&gt; time &amp; more"));
  EXPECT_THAT(svg, HasSubstr("a &quot;quoted&quot; subtitle"));
  // The legend names every series and level; the marker is labelled.
  for (const char* label :
       {">live<", ">reserved<", ">capacity<", ">phase 2<"}) {
    EXPECT_THAT(svg, HasSubstr(label));
  }
  // The y axis reaches a round tick above the highest level (4).
  EXPECT_THAT(svg, HasSubstr(">5</text>"));
}

TEST(RenderSvgTest, StepsHoldTheValueUntilTheNextPoint) {
  Chart c = TwoSeries();
  c.series.resize(2);
  const std::string svg = RenderSvg(c);
  // The step series has 3 points and 2 risers: 5 coordinates; the other 4.
  const size_t first = svg.find("<polyline");
  const size_t second = svg.find("<polyline", first + 1);
  const std::string a = svg.substr(first, second - first);
  const std::string b = svg.substr(second, svg.find("/>", second) - second);
  EXPECT_EQ(Count(a, ","), 4u);
  EXPECT_EQ(Count(b, ","), 5u);
}

TEST(RenderSvgTest, PointsThatAreNotNumbersAreLeftOut) {
  Chart c;
  ChartSeries s;
  s.label = "nan";
  s.color = "red";
  s.x = {0, 1};
  s.y = {std::nan(""), std::numeric_limits<double>::infinity()};
  c.series = {s};
  const std::string svg = RenderSvg(c);
  EXPECT_EQ(Count(svg, "<polyline"), 0u);
  EXPECT_EQ(Count(svg, "nan"), 1u);  // only the legend's label
  EXPECT_EQ(RenderSvg(Chart()).substr(0, 4), "<svg");  // nothing at all
}

TEST(WriteSvgTest, WritesTheFileOrNamesThePath) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir ? dir : "/tmp", "/chart.svg");
  ASSERT_TRUE(WriteSvg(path, "<svg/>").ok());
  const absl::Status s = WriteSvg("/nonexistent/dir/chart.svg", "<svg/>");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/dir/chart.svg"));
}

}  // namespace
}  // namespace gmlake
