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
#include "client/stats.h"

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
  absl::Status RecordStream(DevicePtr ptr, StreamHandle stream);

  // Returns every cached free chunk to the lake; bytes returned.
  uint64_t EmptyCache();
  // Limits what this process may hold on `device` (0: no limit) and gives
  // back cached memory above it.
  absl::Status SetCapacity(int device, uint64_t bytes);

  // Statistics of one device, or of all summed (device -1).
  AllocatorStats stats(int device = -1) const;
  void ResetPeaks();
  // torch.cuda.memory._snapshot()-shaped JSON: {"segments": [...],
  // "device_traces": [[]...]}.
  std::string SnapshotJson() const;
  absl::Status CheckInvariants() const;

  ChunkSource* source() { return source_; }
  int device_count() const { return static_cast<int>(devices_.size()); }

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
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_ALLOCATOR_H_
