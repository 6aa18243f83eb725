// Copyright 2026 The GMLake Authors.
//
// SplitChunkSource: a ChunkSource that takes each device's chunks from one
// of two chunk sources: gmlaked for the devices it serves, an embedded lake
// in this process for the others (a rank that sees a GPU the node's gmlaked
// does not serve). Both hand out chunks of one backend, the one the
// allocator maps through. Only gmlaked asks for memory back.

#ifndef GMLAKE_CLIENT_SPLIT_CHUNK_SOURCE_H_
#define GMLAKE_CLIENT_SPLIT_CHUNK_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "client/chunk_source.h"

namespace gmlake {

class SplitChunkSource : public ChunkSource {
 public:
  // Device d comes from `shared` where `from_shared[d]`, else from `local`.
  // `local` must hand out chunks of `shared->backend()`, which `shared`
  // owns (it outlives `local` here).
  SplitChunkSource(std::unique_ptr<ChunkSource> shared,
                   std::unique_ptr<ChunkSource> local,
                   std::vector<bool> from_shared);
  ~SplitChunkSource() override;

  // The shared source's name ("daemon").
  absl::string_view name() const override { return shared_->name(); }
  // Both sources, and which device comes from which.
  std::string Describe() const override;
  VmmBackend* backend() override { return shared_->backend(); }
  size_t chunk_size(int device) const override;
  absl::StatusOr<std::vector<SizedChunk>> AcquireBytes(int device,
                                                       uint64_t bytes) override;
  void ReturnSized(int device, absl::Span<const SizedChunk> chunks) override;
  uint64_t ReleaseKept(int device) override;
  uint64_t capacity_bytes(int device) const override;
  absl::Status SetCapacity(int device, uint64_t bytes) override;
  void SetReclaimHandler(ReclaimHandler handler) override;
  // To gmlaked, which reports the devices it serves.
  void SetUsageProvider(UsageProvider provider) override;

 private:
  ChunkSource* For(int device) const;

  // Destroyed in reverse: `local_` (whose chunks live in `shared_`'s
  // backend) first.
  std::unique_ptr<ChunkSource> shared_;
  std::unique_ptr<ChunkSource> local_;
  const std::vector<bool> from_shared_;
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_SPLIT_CHUNK_SOURCE_H_
