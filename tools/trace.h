// Copyright 2026 The GMLake Authors.
//
// Allocation traces of real runs (traces/, format in its README.md):
// gzip'd lines "ACTION ADDR SIZE STREAM"; replay uses 'a' (allocate) and
// 'F' (free completed). Loaded once into a compact event list.

#ifndef GMLAKE_TOOLS_TRACE_H_
#define GMLAKE_TOOLS_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gmlake {

struct TraceEvent {
  uint64_t size;   // bytes, for allocations
  uint32_t id;     // allocation id, dense from 0
  uint8_t stream;  // index into Trace::streams
  bool alloc;
};

// PyTorch's own cudaMalloc ('S', bytes > 0) or cudaFree ('s', bytes < 0)
// of a segment, before events[at_event]: what the native allocator had
// reserved when the trace was recorded.
struct SegmentChange {
  uint64_t at_event;
  int64_t bytes;
};

struct Trace {
  std::string name;  // file name without .trace.gz
  std::vector<TraceEvent> events;
  std::vector<SegmentChange> native_segments;
  std::vector<uint64_t> streams;  // the trace's stream ids, by index
  uint32_t num_ids = 0;
  uint64_t peak_live_bytes = 0;  // most bytes live at once
  uint64_t end_live_bytes = 0;   // still live after the last event
};

// Reads a .trace.gz (or plain text) trace. A trace is data from outside:
// anything that is not one (bad gzip data, a line not in the format, an
// address allocated twice without a free between, a free of an address not
// allocated, no allocations at all) is refused with an error that names the
// file, the line and what was expected there.
absl::StatusOr<Trace> LoadTrace(const std::string& path);

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_TRACE_H_
