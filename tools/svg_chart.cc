// Copyright 2026 The GMLake Authors.

#include "tools/svg_chart.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gmlake {
namespace {

// Margins around the plot area, in pixels: room for tick labels, the axis
// titles, the title lines and the legend.
constexpr double kLeft = 72, kRight = 24, kTop = 64, kBottom = 56;
constexpr double kLegendRow = 18;

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

struct Bounds {
  double x0 = std::numeric_limits<double>::infinity();
  double x1 = -std::numeric_limits<double>::infinity();
  double y1 = -std::numeric_limits<double>::infinity();
  void Add(double x, double y) {
    if (!std::isfinite(x) || !std::isfinite(y)) return;
    x0 = std::min(x0, x);
    x1 = std::max(x1, x);
    y1 = std::max(y1, y);
  }
};

// Maps data to pixels inside the plot area.
struct Scale {
  double x0, x1, y0, y1;            // data
  double left, right, top, bottom;  // pixels
  double X(double x) const {
    return left + (x - x0) / (x1 - x0) * (right - left);
  }
  double Y(double y) const {
    return bottom - (y - y0) / (y1 - y0) * (bottom - top);
  }
};

std::string Num(double v) { return absl::StrFormat("%.1f", v); }

std::string Polyline(const ChartSeries& s, const Scale& sc) {
  std::string points;
  double last_y = 0;
  bool have = false;
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
    const double px = sc.X(s.x[i]), py = sc.Y(s.y[i]);
    if (s.steps && have)
      absl::StrAppend(&points, Num(px), ",", Num(last_y), " ");
    absl::StrAppend(&points, Num(px), ",", Num(py), " ");
    last_y = py;
    have = true;
  }
  if (!have) return "";
  return absl::StrCat("<polyline fill=\"none\" stroke=\"", Escape(s.color),
                      "\" stroke-width=\"1.8\" stroke-linejoin=\"round\"",
                      s.dashed ? " stroke-dasharray=\"6,4\"" : "", " points=\"",
                      points, "\"/>\n");
}

// The extent of everything drawn: series, levels (y) and markers (x).
Bounds ChartBounds(const Chart& chart) {
  Bounds b;
  for (const ChartSeries& s : chart.series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      b.Add(s.x[i], s.y[i]);
    }
  }
  for (const ChartLevel& l : chart.levels) {
    if (std::isfinite(l.y)) b.y1 = std::max(b.y1, l.y);
  }
  for (const ChartMarker& m : chart.markers) {
    if (std::isfinite(m.x)) {
      b.x0 = std::min(b.x0, m.x);
      b.x1 = std::max(b.x1, m.x);
    }
  }
  if (!std::isfinite(b.x0)) b.x0 = 0, b.x1 = 1;
  if (!(b.x1 > b.x0)) b.x1 = b.x0 + 1;
  if (!std::isfinite(b.y1) || b.y1 <= 0) b.y1 = 1;
  return b;
}

// The grid, the ticks with their labels, the frame and the axis titles.
void AppendAxes(const Chart& chart, const std::vector<double>& yticks,
                const std::vector<double>& xticks, const Scale& sc,
                std::string* svg) {
  for (double t : yticks) {
    const double y = sc.Y(t);
    absl::StrAppend(svg, "<line x1=\"", Num(sc.left), "\" y1=\"", Num(y),
                    "\" x2=\"", Num(sc.right), "\" y2=\"", Num(y),
                    "\" stroke=\"#e5e5e5\"/>\n", "<text x=\"", Num(sc.left - 6),
                    "\" y=\"", Num(y + 4), "\" text-anchor=\"end\">",
                    TickText(t), "</text>\n");
  }
  for (double t : xticks) {
    const double x = sc.X(t);
    absl::StrAppend(svg, "<line x1=\"", Num(x), "\" y1=\"", Num(sc.bottom),
                    "\" x2=\"", Num(x), "\" y2=\"", Num(sc.bottom + 5),
                    "\" stroke=\"#333\"/>\n", "<text x=\"", Num(x), "\" y=\"",
                    Num(sc.bottom + 18), "\" text-anchor=\"middle\">",
                    TickText(t), "</text>\n");
  }
  absl::StrAppend(svg, "<rect x=\"", Num(sc.left), "\" y=\"", Num(sc.top),
                  "\" width=\"", Num(sc.right - sc.left), "\" height=\"",
                  Num(sc.bottom - sc.top),
                  "\" fill=\"none\" stroke=\"#333\"/>\n");
  absl::StrAppend(svg, "<text x=\"", Num((sc.left + sc.right) / 2), "\" y=\"",
                  Num(sc.bottom + 40), "\" text-anchor=\"middle\">",
                  Escape(chart.x_label), "</text>\n");
  absl::StrAppend(svg, "<text transform=\"translate(18,",
                  Num((sc.top + sc.bottom) / 2),
                  ") rotate(-90)\" text-anchor=\"middle\">",
                  Escape(chart.y_label), "</text>\n");
}

// Vertical dashed lines at the markers inside the x range, labelled.
void AppendMarkers(const Chart& chart, const Bounds& b, const Scale& sc,
                   std::string* svg) {
  for (size_t i = 0; i < chart.markers.size(); ++i) {
    const ChartMarker& m = chart.markers[i];
    if (!std::isfinite(m.x) || m.x < b.x0 || m.x > b.x1) continue;
    const double x = sc.X(m.x);
    // Labels of markers close together stand on three rows.
    const double label_y = sc.top + 12 + (i % 3) * 12;
    // Near the right edge a label reads leftwards, inside the plot.
    const bool leftwards = x > sc.left + 0.8 * (sc.right - sc.left);
    absl::StrAppend(svg, "<line x1=\"", Num(x), "\" y1=\"", Num(sc.top),
                    "\" x2=\"", Num(x), "\" y2=\"", Num(sc.bottom),
                    "\" stroke=\"#999\" stroke-dasharray=\"2,3\"/>\n",
                    "<text x=\"", Num(leftwards ? x - 3 : x + 3), "\" y=\"",
                    Num(label_y), "\"", leftwards ? " text-anchor=\"end\"" : "",
                    " font-size=\"10\" fill=\"#555\">", Escape(m.label),
                    "</text>\n");
  }
}

// Legend, two entries a row, under the x axis title.
void AppendLegend(const Chart& chart, std::string* svg) {
  int entry = 0;
  auto legend = [&](const std::string& label, const std::string& color,
                    bool dashed) {
    const double x = kLeft + (entry % 2) * (chart.width - kLeft - kRight) / 2;
    const double y = chart.height + (entry / 2) * kLegendRow;
    absl::StrAppend(svg, "<line x1=\"", Num(x), "\" y1=\"", Num(y - 4),
                    "\" x2=\"", Num(x + 28), "\" y2=\"", Num(y - 4),
                    "\" stroke=\"", Escape(color), "\" stroke-width=\"2.5\"",
                    dashed ? " stroke-dasharray=\"6,4\"" : "", "/>\n",
                    "<text x=\"", Num(x + 34), "\" y=\"", Num(y), "\">",
                    Escape(label), "</text>\n");
    ++entry;
  };
  for (const ChartSeries& s : chart.series) legend(s.label, s.color, s.dashed);
  for (const ChartLevel& l : chart.levels) legend(l.label, l.color, true);
}

}  // namespace

std::string TickText(double v) {
  if (std::fabs(v) < 1e-12) return "0";
  std::string s = absl::StrFormat("%.6g", v);
  return s;
}

std::vector<double> NiceTicks(double lo, double hi, int count) {
  if (!(hi > lo) || count < 1) return {lo};
  const double raw = (hi - lo) / count;
  const int exponent = static_cast<int>(std::floor(std::log10(raw)));
  const double mag = std::pow(10.0, exponent);
  double m = 1;
  for (double candidate : {1.0, 2.0, 5.0, 10.0}) {
    m = candidate;
    if (m * mag >= raw) break;
  }
  const double step = m * mag;
  // k * m / 10^-e rather than sums of steps: 0.3, not 0.30000000000000004.
  auto tick = [&](int64_t k) {
    return exponent < 0 ? k * m / std::pow(10.0, -exponent)
                        : k * m * std::pow(10.0, exponent);
  };
  std::vector<double> ticks;
  for (int64_t k = static_cast<int64_t>(std::ceil(lo / step - 1e-9));
       tick(k) <= hi + step * 1e-9; ++k) {
    ticks.push_back(tick(k));
  }
  return ticks;
}

std::string RenderSvg(const Chart& chart) {
  const Bounds b = ChartBounds(chart);
  // The y axis starts at 0 (memory) and ends on a round tick above the top.
  std::vector<double> yticks = NiceTicks(0, b.y1 * 1.05, 6);
  if (yticks.size() >= 2 && yticks.back() < b.y1 * 1.05) {
    yticks.push_back(yticks.back() + (yticks[1] - yticks[0]));
  }
  const double ytop = std::max(yticks.back(), b.y1 * 1.05);
  const std::vector<double> xticks = NiceTicks(b.x0, b.x1, 8);

  const double legend_rows =
      static_cast<double>(chart.series.size() + chart.levels.size() + 1) / 2;
  const double w = chart.width;
  const double h = chart.height + std::ceil(legend_rows) * kLegendRow;
  Scale sc{b.x0,  b.x1,       0,    ytop,
           kLeft, w - kRight, kTop, chart.height - kBottom};

  std::string svg =
      absl::StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", w,
                   "\" height=\"", h, "\" viewBox=\"0 0 ", w, " ", h,
                   "\" font-family=\"sans-serif\" font-size=\"12\">\n",
                   "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  absl::StrAppend(&svg, "<text x=\"", kLeft, "\" y=\"22\" font-size=\"16\" ",
                  "font-weight=\"bold\">", Escape(chart.title), "</text>\n");
  if (!chart.subtitle.empty()) {
    absl::StrAppend(&svg, "<text x=\"", kLeft, "\" y=\"40\" fill=\"#555\">",
                    Escape(chart.subtitle), "</text>\n");
  }
  AppendAxes(chart, yticks, xticks, sc, &svg);
  // Markers, levels, then the series on top.
  AppendMarkers(chart, b, sc, &svg);
  for (const ChartLevel& l : chart.levels) {
    if (!std::isfinite(l.y)) continue;
    const double y = sc.Y(l.y);
    absl::StrAppend(&svg, "<line x1=\"", Num(sc.left), "\" y1=\"", Num(y),
                    "\" x2=\"", Num(sc.right), "\" y2=\"", Num(y),
                    "\" stroke=\"", Escape(l.color),
                    "\" stroke-width=\"1.5\" stroke-dasharray=\"8,4\"/>\n");
  }
  for (const ChartSeries& s : chart.series)
    absl::StrAppend(&svg, Polyline(s, sc));
  AppendLegend(chart, &svg);
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

absl::Status WriteSvg(const std::string& path, const std::string& svg) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot write ", path, ": ", std::strerror(errno),
        " (does its folder exist, and may this user write there?)"));
  }
  out << svg;
  out.close();
  if (!out) {
    return absl::DataLossError(
        absl::StrCat("writing ", path, " failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace gmlake
