// Copyright 2026 The GMLake Authors.
//
// Allocator: libgmlake's front door. One DeviceAllocator per device over one
// ChunkSource (the embedded lake, or gmlaked).

#ifndef GMLAKE_CLIENT_ALLOCATOR_H_
#define GMLAKE_CLIENT_ALLOCATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/chunk_source.h"
#include "client/device_allocator.h"
#include "client/options.h"
#include "client/stack_capture.h"
#include "client/stats.h"
#include "common/mutex.h"

namespace gmlake {

class Allocator {
 public:
  // Allocates through `source`, which the allocator owns.
  Allocator(std::unique_ptr<ChunkSource> source,
            const AllocatorOptions& options);
  // Allocates through `source`, which must outlive the allocator.
  Allocator(ChunkSource* source, const AllocatorOptions& options);
  ~Allocator();

  // Allocates `size` bytes on `device` for `stream`.
  absl::StatusOr<DevicePtr> Malloc(size_t size, int device,
                                   StreamHandle stream);
  // Frees what Malloc returned (any device). NotFound for anything else.
  absl::Status Free(DevicePtr ptr);
  // Frees what Malloc returned on `device` (as PyTorch names it); only that
  // device's allocator is asked. InvalidArgument for a device that does not
  // exist, NotFound for a pointer that is not live there.
  absl::Status Free(DevicePtr ptr, int device);
  absl::Status RecordStream(DevicePtr ptr, StreamHandle stream);

  // Returns every cached free chunk to the lake, which gives back what it
  // kept to the driver or gmlaked (ChunkSource::ReleaseKept); bytes
  // returned to the lake.
  uint64_t EmptyCache();
  // What the lake's reclaim handler does: gives back at least `bytes` of
  // free cache on `device` (whole chunks), or all of it. Bytes returned.
  uint64_t Reclaim(int device, uint64_t bytes);
  // Limits what this process may hold on `device` (0: no limit) and gives
  // back cached memory above it.
  absl::Status SetCapacity(int device, uint64_t bytes);
  // PyTorch's set_per_process_memory_fraction: the capacity as a fraction
  // [0, 1] of the device's memory (0: no new memory; what is cached still
  // serves). FailedPrecondition when the backend does not know how much
  // memory the device has.
  absl::Status SetMemoryFraction(int device, double fraction);
  // The fraction set, else the capacity as a fraction of the device's
  // memory (1 when uncapped).
  absl::StatusOr<double> MemoryFraction(int device) const;

  // Statistics of one device, or of all summed (device -1).
  AllocatorStats stats(int device = -1) const;
  // Peaks, or allocated/freed totals (PyTorch's reset_peak_memory_stats and
  // reset_accumulated_memory_stats), of one device or all (-1).
  void ResetPeaks(int device = -1);
  void ResetAccumulated(int device = -1);
  // Records each device's history (trace_recorder.h) from now on: the last
  // `max_entries` events (0: stop), with stacks of `stacks` kind on the
  // events `context` says.
  void RecordHistory(size_t max_entries, StackKind stacks,
                     HistoryContext context, bool clear);
  // The "user_metadata" of every event recorded from now on, on every
  // device (torch.cuda.memory._set_memory_metadata).
  void SetHistoryMetadata(const std::string& metadata);
  // torch.cuda.memory._snapshot()-shaped JSON: {"segments": [...],
  // "device_traces": [[...], ...]} (one trace per device).
  std::string SnapshotJson() const;
  absl::Status CheckInvariants() const;

  ChunkSource* source() { return source_; }
  // The allocator of one device (its private pools: device_allocator.h);
  // InvalidArgument for a device that does not exist.
  absl::StatusOr<DeviceAllocator*> device(int device);
  int device_count() const { return static_cast<int>(devices_.size()); }
  // The device's memory, or FailedPrecondition naming what to do instead.
  absl::StatusOr<uint64_t> DeviceMemory(int device) const;

 private:
  absl::Status CheckDevice(int device) const;
  // ResourceExhausted for a request no arena of `device` can hold.
  absl::Status TooLarge(size_t size, int device) const;

  std::unique_ptr<ChunkSource> owned_source_;
  ChunkSource* source_;
  std::vector<std::unique_ptr<DeviceAllocator>> devices_;
  // Per device: the largest request an arena can hold. Checked before the
  // device allocator rounds anything (no size near SIZE_MAX can wrap) and
  // before it reserves an arena for a request that cannot fit in one.
  std::vector<uint64_t> max_request_;
  uint64_t large_arena_ = 0;
  // Per device: the fraction last set with SetMemoryFraction, read back as
  // it was set (the capacity it became is rounded to bytes); -1 once a
  // capacity was set in bytes, or never.
  mutable Mutex fraction_mu_;
  std::vector<double> fraction_ ABSL_GUARDED_BY(fraction_mu_);
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_ALLOCATOR_H_
