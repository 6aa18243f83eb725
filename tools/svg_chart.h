// Copyright 2026 The GMLake Authors.
//
// A line chart as a self-contained SVG document: axes with round ticks,
// one polyline per series, dashed reference lines, labelled vertical
// markers, a legend. Enough for memory-over-time figures that open in any
// browser; no dependency beyond the standard library.

#ifndef GMLAKE_TOOLS_SVG_CHART_H_
#define GMLAKE_TOOLS_SVG_CHART_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gmlake {

struct ChartSeries {
  std::string label;         // in the legend
  std::string color;         // any SVG colour, e.g. "#1f77b4"
  std::vector<double> x, y;  // same length; non-finite points are skipped
  bool dashed = false;
  // Drawn as steps (the value holds until the next point), as memory a
  // process holds does; otherwise points are joined by straight lines.
  bool steps = false;
};

// A horizontal line across the chart at `y`.
struct ChartLevel {
  std::string label;
  std::string color;
  double y = 0;
};

// A vertical line at `x`, labelled at the top.
struct ChartMarker {
  std::string label;
  double x = 0;
};

struct Chart {
  std::string title;
  std::string subtitle;  // one smaller line under the title
  std::string x_label;
  std::string y_label;
  std::vector<ChartSeries> series;
  std::vector<ChartLevel> levels;
  std::vector<ChartMarker> markers;
  int width = 960;
  int height = 480;
};

// "1", "2.5", "0.25": the shortest text of a tick value.
std::string TickText(double v);

// Round tick values covering [lo, hi], about `count` of them (steps of 1,
// 2 or 5 times a power of ten).
std::vector<double> NiceTicks(double lo, double hi, int count);

// The chart as an SVG document. Text is escaped, so labels may hold any
// characters.
std::string RenderSvg(const Chart& chart);

// Writes `svg` to `path` (NotFound/PermissionDenied naming the path).
absl::Status WriteSvg(const std::string& path, const std::string& svg);

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_SVG_CHART_H_
