// Copyright 2026 The GMLake Authors.
//
// SegmentObserver: whoever must know, as it happens, when device memory
// becomes part of the allocator and when it leaves it. PyTorch's allocator
// calls its trace trackers (attachAllocatorTraceTracker) for this; NCCL's
// buffer registration hooks in ProcessGroupNCCL are such trackers: they
// register each new SEGMENT_ALLOC of a pool given to register_mem_pool
// (or every one, with TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK) and
// deregister it at its SEGMENT_FREE, before the memory goes back.
//
// What GMLake reports, and why:
//   * Segments of another allocator's MemPool (MemPool(allocator=...),
//     NCCL's ncclMemAlloc for symmetric memory) are fixed ranges, as in
//     PyTorch: kSegmentAlloc when gmlake takes one, kSegmentFree just before
//     it goes back to that allocator.
//   * gmlake's own pages are mapped and unmapped inside arenas, as PyTorch's
//     expandable segments map theirs: kSegmentMap and kSegmentUnmap. A
//     mapped run is stitched from chunks that come and go, so it is no fixed
//     segment to register; NCCL's hooks ignore these actions, as they do for
//     expandable segments.
//
// One observer per process (the native door's fan-out to PyTorch's
// trackers). It is called on the allocating thread with the device
// allocator's lock held, as PyTorch calls its trackers under its own: it
// must not call into gmlake. Unset, notifying costs one relaxed load.

#ifndef GMLAKE_CLIENT_SEGMENT_OBSERVER_H_
#define GMLAKE_CLIENT_SEGMENT_OBSERVER_H_

#include <cstdint>
#include <utility>

#include "client/trace_recorder.h"
#include "common/vmm.h"

namespace gmlake {

struct SegmentEvent {
  int device = 0;
  TraceAction action = TraceAction::kSegmentMap;  // one of the four above
  DevicePtr addr = 0;
  uint64_t size = 0;
  StreamHandle stream = 0;
  std::pair<uint64_t, uint64_t> pool{0, 0};  // PyTorch's MempoolId_t
};

struct SegmentObserver {
  void (*observe)(void* ctx, const SegmentEvent& event) = nullptr;
  void* ctx = nullptr;
};

// Installs `observer` for the whole process (null or no `observe`: none).
// Once this returns, the previous observer is called no more.
void SetSegmentObserver(const SegmentObserver* observer);

// Whether an observer is installed (one relaxed load).
bool SegmentObserved();

// Tells the observer, if any, of `event`.
void NotifySegment(const SegmentEvent& event);

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_SEGMENT_OBSERVER_H_
