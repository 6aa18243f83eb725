// Copyright 2026 The GMLake Authors.

#include "daemon/prometheus_text.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(PrometheusText, FamiliesAndSamples) {
  PrometheusText t;
  t.Family("gmlake_free_bytes", "gauge", "Free bytes.\nPer device \\ all.");
  t.Sample("gmlake_free_bytes", {{"device", "0"}},
           uint64_t{18446744073709551615u});
  t.Sample("gmlake_free_bytes", {{"device", "1"}}, 2.5);
  t.Family("gmlake_leases_served_total", "counter", "Leases.");
  t.Sample("gmlake_leases_served_total", {}, uint64_t{3});
  EXPECT_EQ(t.text(),
            "# HELP gmlake_free_bytes Free bytes.\\nPer device \\\\ all.\n"
            "# TYPE gmlake_free_bytes gauge\n"
            "gmlake_free_bytes{device=\"0\"} 18446744073709551615\n"
            "gmlake_free_bytes{device=\"1\"} 2.5\n"
            "# HELP gmlake_leases_served_total Leases.\n"
            "# TYPE gmlake_leases_served_total counter\n"
            "gmlake_leases_served_total 3\n");
}

TEST(PrometheusText, LabelValuesAreEscaped) {
  EXPECT_EQ(PrometheusText::EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  PrometheusText t;
  t.Sample("x", {{"name", "say \"hi\""}, {"b", "2"}}, uint64_t{1});
  EXPECT_EQ(t.text(), "x{name=\"say \\\"hi\\\"\",b=\"2\"} 1\n");
}

TEST(PrometheusText, Values) {
  EXPECT_EQ(PrometheusText::FormatValue(3), "3");
  EXPECT_EQ(PrometheusText::FormatValue(0.0025), "0.0025");
  EXPECT_EQ(PrometheusText::FormatValue(0.1), "0.1");
  EXPECT_EQ(PrometheusText::FormatValue(1.0 / 3), "0.33333333333333331");
  EXPECT_EQ(PrometheusText::FormatValue(-1), "-1");
  EXPECT_EQ(
      PrometheusText::FormatValue(std::numeric_limits<double>::infinity()),
      "+Inf");
  EXPECT_EQ(
      PrometheusText::FormatValue(-std::numeric_limits<double>::infinity()),
      "-Inf");
  EXPECT_EQ(PrometheusText::FormatValue(std::nan("")), "NaN");
}

TEST(PrometheusText, HistogramsHaveBucketsUpToInfSumAndCount) {
  PrometheusText t;
  t.Family("w_seconds", "histogram", "Waits.");
  const double bounds[] = {0.5, 1};
  const uint64_t cumulative[] = {1, 3, 4};
  t.Histogram("w_seconds", {{"device", "0"}}, bounds, cumulative, 7.25, 4);
  EXPECT_EQ(t.text(),
            "# HELP w_seconds Waits.\n"
            "# TYPE w_seconds histogram\n"
            "w_seconds_bucket{device=\"0\",le=\"0.5\"} 1\n"
            "w_seconds_bucket{device=\"0\",le=\"1\"} 3\n"
            "w_seconds_bucket{device=\"0\",le=\"+Inf\"} 4\n"
            "w_seconds_sum{device=\"0\"} 7.25\n"
            "w_seconds_count{device=\"0\"} 4\n");
}

}  // namespace
}  // namespace gmlake
