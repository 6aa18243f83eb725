// Copyright 2026 The GMLake Authors.
//
// EmbeddedLake: the in-process chunk source used when no gmlaked runs.

#ifndef GMLAKE_CLIENT_EMBEDDED_LAKE_H_
#define GMLAKE_CLIENT_EMBEDDED_LAKE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/chunk_sizing.h"
#include "client/chunk_source.h"
#include "common/mutex.h"

namespace gmlake {

// Creates chunks through the VMM layer on demand, up to a per-device
// capacity, and keeps chunks returned to it for the next AcquireBytes (creating
// a chunk costs a driver call; reusing one does not). Trim() releases the kept
// ones to the driver.
class EmbeddedLake : public ChunkSource {
 public:
  // Uses `backend`, which must outlive the lake. `chunk_size` 0 means the
  // backend's granularity. New chunks are cut as `growth` says
  // (client/chunk_sizing.h; its unit is set from `chunk_size`): of its base
  // (0: one granule), for a large shortfall of up to its large_chunk (0:
  // never larger than the base), coarser for the most the device held
  // (ForHeld). The default: every chunk one granule.
  EmbeddedLake(VmmBackend* backend, size_t chunk_size,
               const ChunkSizing& growth = {});
  // Owns `backend`.
  EmbeddedLake(std::unique_ptr<VmmBackend> backend, size_t chunk_size,
               const ChunkSizing& growth = {});
  ~EmbeddedLake() override;

  absl::string_view name() const override { return "embedded"; }
  std::string Describe() const override;
  VmmBackend* backend() override { return backend_; }
  size_t chunk_size(int device) const override { return chunk_size_; }
  // Kept chunks that fit first (largest first), then new chunks for the
  // shortfall, cut by PlanChunks for the most the device held (ForHeld).
  absl::StatusOr<std::vector<SizedChunk>> AcquireBytes(int device,
                                                       uint64_t bytes) override;
  void ReturnSized(int device, absl::Span<const SizedChunk> chunks) override;
  uint64_t capacity_bytes(int device) const override;
  absl::Status SetCapacity(int device, uint64_t bytes) override;
  // The embedded lake has no other clients, so it never asks for memory
  // back; the handler is kept for symmetry and never called.
  void SetReclaimHandler(ReclaimHandler handler) override {}

  // Releases the chunks of `device` returned to the lake and not acquired
  // again; Trim, those of every device. Returns how many bytes went back to
  // the driver.
  uint64_t ReleaseKept(int device) override;
  uint64_t Trim();
  // Bytes of chunks handed out and not returned, on `device`.
  uint64_t held_bytes(int device) const;

 private:
  struct DeviceBooks {
    uint64_t capacity = 0;         // 0: no limit.
    uint64_t held = 0;             // chunks out with the allocator
    uint64_t peak_held = 0;        // the most `held` has been (ForHeld)
    std::vector<SizedChunk> idle;  // created, returned, kept
  };
  DeviceBooks& Books(int device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t ReleaseKeptLocked(DeviceBooks& books)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<VmmBackend> owned_backend_;
  VmmBackend* backend_;
  size_t chunk_size_;
  ChunkSizing sizing_;
  mutable Mutex mu_;
  std::vector<DeviceBooks> devices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_EMBEDDED_LAKE_H_
