// Copyright 2026 The GMLake Authors.

#include "tools/memory_figure.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gmlake {
namespace {

constexpr double kGiB = double{1 << 30};

// Colours that stay apart for readers with the common colour-vision
// deficiencies (Okabe and Ito's palette).
constexpr const char* kBlack = "#000000";
constexpr const char* kOrange = "#E69F00";
constexpr const char* kSky = "#56B4E9";
constexpr const char* kGreen = "#009E73";
constexpr const char* kBlue = "#0072B2";
constexpr const char* kVermillion = "#D55E00";
constexpr const char* kPurple = "#CC79A7";
constexpr const char* kGrey = "#777777";

ChartSeries Series(const std::string& label, const char* color,
                   const EventCurve& c, bool steps) {
  ChartSeries s;
  s.label = label;
  s.color = color;
  s.steps = steps;
  for (size_t i = 0; i < c.events.size(); ++i) {
    s.x.push_back(c.events[i] / 1000.0);
    s.y.push_back(c.bytes[i] / kGiB);
  }
  return s;
}

uint64_t Peak(const EventCurve& c) {
  return c.bytes.empty() ? 0
                         : *std::max_element(c.bytes.begin(), c.bytes.end());
}

std::string Ratio(uint64_t bytes, uint64_t live) {
  return live == 0 ? "" : absl::StrFormat(" (%.3f x)", double(bytes) / live);
}

}  // namespace

EventCurve LiveBytesCurve(const Trace& trace, size_t points) {
  EventCurve c;
  c.events.push_back(0);
  c.bytes.push_back(0);
  const size_t n = trace.events.size();
  const size_t run = std::max<size_t>(
      1, (n + std::max<size_t>(points, 1) - 1) / std::max<size_t>(points, 1));
  std::vector<uint64_t> size(trace.num_ids, 0);
  uint64_t live = 0, run_max = 0;
  for (size_t i = 0; i < n; ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.alloc) {
      size[e.id] = e.size;
      live += e.size;
    } else {
      live -= size[e.id];
    }
    run_max = std::max(run_max, live);
    if ((i + 1) % run == 0 || i + 1 == n) {
      c.events.push_back(i + 1);
      c.bytes.push_back(run_max);
      run_max = 0;
    }
  }
  return c;
}

EventCurve NativeReservedCurve(const Trace& trace) {
  EventCurve c;
  c.events.push_back(0);
  c.bytes.push_back(0);
  int64_t reserved = 0;
  for (const SegmentChange& s : trace.native_segments) {
    reserved = std::max<int64_t>(0, reserved + s.bytes);
    if (c.events.back() == s.at_event) {
      c.bytes.back() = static_cast<uint64_t>(reserved);
    } else {
      c.events.push_back(s.at_event);
      c.bytes.push_back(static_cast<uint64_t>(reserved));
    }
  }
  c.events.push_back(trace.events.size());
  c.bytes.push_back(static_cast<uint64_t>(reserved));
  return c;
}

Chart TraceMemoryChart(const Trace& trace,
                       const std::vector<ReservedSample>& gmlake,
                       const PyTorchPeaks& pytorch) {
  const EventCurve live = LiveBytesCurve(trace, 1000);
  EventCurve ours;
  for (const ReservedSample& s : gmlake) {
    ours.events.push_back(s.events);
    ours.bytes.push_back(s.reserved_bytes);
  }
  Chart chart;
  chart.title = absl::StrCat(trace.name, ": memory over the trace");
  chart.x_label = "events of the trace (allocations and frees), thousands";
  chart.y_label = "GiB";
  const uint64_t live_peak = trace.peak_live_bytes;
  std::string subtitle = absl::StrFormat(
      "peaks: live %.2f GiB; GMLake %.2f GiB%s", live_peak / kGiB,
      Peak(ours) / kGiB, Ratio(Peak(ours), live_peak));
  if (!trace.native_segments.empty()) {
    const EventCurve native = NativeReservedCurve(trace);
    chart.series.push_back(
        Series("PyTorch native reserved (the trace's own segments, H200)",
               kVermillion, native, true));
    absl::StrAppend(&subtitle, absl::StrFormat("; PyTorch native %.2f GiB%s",
                                               Peak(native) / kGiB,
                                               Ratio(Peak(native), live_peak)));
  } else if (pytorch.native_reserved != 0) {
    chart.levels.push_back({"PyTorch native reserved, peak (baselines.json)",
                            kVermillion, pytorch.native_reserved / kGiB});
  }
  if (pytorch.expandable_reserved != 0) {
    chart.levels.push_back(
        {"PyTorch expandable segments, peak reserved (baselines.json)", kPurple,
         pytorch.expandable_reserved / kGiB});
    absl::StrAppend(
        &subtitle,
        absl::StrFormat("; expandable %.2f GiB%s",
                        pytorch.expandable_reserved / kGiB,
                        Ratio(pytorch.expandable_reserved, live_peak)));
  }
  // Live bytes last, on top: GMLake's reserved bytes run just above them.
  chart.series.push_back(
      Series("GMLake reserved (this replay)", kBlue, ours, true));
  chart.series.push_back(
      Series("live bytes (most in each run of events)", kGrey, live, false));
  chart.subtitle = subtitle;
  return chart;
}

Chart LakeMemoryChart(const LakeShareResult& lake) {
  static constexpr const char* kProcessColors[] = {kOrange, kSky, kGreen,
                                                   kPurple, kVermillion};
  Chart chart;
  chart.title = absl::StrFormat("lake-share: %d processes through one gmlaked",
                                lake.process_names.size());
  chart.subtitle = absl::StrFormat(
      "node peak %.2f GiB = %.3f x the floor; separate processes would hold "
      "%.2f GiB",
      lake.node_peak_bytes / kGiB, lake.node_peak_over_floor,
      lake.sum_of_process_peaks_bytes / kGiB);
  chart.x_label = "seconds";
  chart.y_label = "GiB held from gmlaked";
  for (size_t p = 0; p < lake.process_names.size(); ++p) {
    ChartSeries s;
    s.label = lake.process_names[p];
    s.color = kProcessColors[p % (sizeof(kProcessColors) /
                                  sizeof(kProcessColors[0]))];
    s.steps = true;
    for (const LakeSample& t : lake.timeline) {
      if (p >= t.process_bytes.size()) continue;
      s.x.push_back(t.seconds);
      s.y.push_back(t.process_bytes[p] / kGiB);
    }
    chart.series.push_back(std::move(s));
  }
  ChartSeries node;
  node.label = "node: chunks gmlaked holds";
  node.color = kBlack;
  node.steps = true;
  for (const LakeSample& t : lake.timeline) {
    node.x.push_back(t.seconds);
    node.y.push_back(t.node_bytes / kGiB);
  }
  chart.series.push_back(std::move(node));
  chart.levels.push_back(
      {"gmlaked's capacity", kVermillion, lake.capacity_bytes / kGiB});
  chart.levels.push_back({"floor: most bytes live across the processes", kGrey,
                          lake.floor_bytes / kGiB});
  for (const LakePhase& p : lake.phases) {
    chart.markers.push_back(
        {absl::StrCat("r", p.round + 1, " ", p.trace), p.start_seconds});
  }
  return chart;
}

}  // namespace gmlake
