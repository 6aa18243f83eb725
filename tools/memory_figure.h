// Copyright 2026 The GMLake Authors.
//
// Memory over time, as figures (svg_chart.h):
//   - one trace replayed: the bytes live, what GMLake reserved, what
//     PyTorch's native allocator reserved when the trace was recorded (the
//     trace's own segment events), and the peak PyTorch reserved with
//     expandable segments (baselines.json), where known;
//   - the lake-share demo: what each process held from gmlaked and what the
//     node held, with the lake's capacity and the floor.
// The data is turned into a Chart here; nothing is measured here.

#ifndef GMLAKE_TOOLS_MEMORY_FIGURE_H_
#define GMLAKE_TOOLS_MEMORY_FIGURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tools/lake_share.h"
#include "tools/replay.h"
#include "tools/svg_chart.h"
#include "tools/trace.h"

namespace gmlake {

// A curve over the events of a trace: the value after `events` events.
struct EventCurve {
  std::vector<uint64_t> events;
  std::vector<uint64_t> bytes;
};

// The most bytes live within each of about `points` equal runs of events
// (so no peak is lost however the curve is thinned), at each run's end;
// starts at (0, 0).
EventCurve LiveBytesCurve(const Trace& trace, size_t points);

// What PyTorch's native allocator had reserved, from the trace's segment
// events: a step at each cudaMalloc/cudaFree, ending at the last event.
EventCurve NativeReservedCurve(const Trace& trace);

// PyTorch's figures for a trace, from baselines.json (0: unknown).
struct PyTorchPeaks {
  uint64_t native_reserved = 0;
  uint64_t expandable_reserved = 0;
};

// The figure of one replayed trace. `gmlake` is the replay's
// reserved_timeline.
Chart TraceMemoryChart(const Trace& trace,
                       const std::vector<ReservedSample>& gmlake,
                       const PyTorchPeaks& pytorch);

// The figure of a lake-share run (LakeShareResult::timeline).
Chart LakeMemoryChart(const LakeShareResult& lake);

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_MEMORY_FIGURE_H_
