// Copyright 2026 The GMLake Authors.

#include "client/split_chunk_source.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gmlake {

SplitChunkSource::SplitChunkSource(std::unique_ptr<ChunkSource> shared,
                                   std::unique_ptr<ChunkSource> local,
                                   std::vector<bool> from_shared)
    : shared_(std::move(shared)),
      local_(std::move(local)),
      from_shared_(std::move(from_shared)) {}

SplitChunkSource::~SplitChunkSource() { local_.reset(); }

ChunkSource* SplitChunkSource::For(int device) const {
  // Devices out of range go to the shared source, which says they do not
  // exist.
  if (device >= 0 && static_cast<size_t>(device) < from_shared_.size() &&
      !from_shared_[device]) {
    return local_.get();
  }
  return shared_.get();
}

std::string SplitChunkSource::Describe() const {
  std::vector<std::string> local;
  for (size_t d = 0; d < from_shared_.size(); ++d) {
    if (from_shared_[d]) continue;
    local.push_back(
        absl::StrCat("device ", d, " (",
                     shared_->backend()->device_uuid(static_cast<int>(d)),
                     "): not served by gmlaked"));
  }
  return absl::StrCat(shared_->Describe(), "; ", absl::StrJoin(local, ", "),
                      ", so served from this process's ", local_->Describe());
}

size_t SplitChunkSource::chunk_size(int device) const {
  return For(device)->chunk_size(device);
}

absl::StatusOr<std::vector<SizedChunk>> SplitChunkSource::AcquireBytes(
    int device, uint64_t bytes) {
  return For(device)->AcquireBytes(device, bytes);
}

void SplitChunkSource::ReturnSized(int device,
                                   absl::Span<const SizedChunk> chunks) {
  For(device)->ReturnSized(device, chunks);
}

uint64_t SplitChunkSource::ReleaseKept(int device) {
  return For(device)->ReleaseKept(device);
}

uint64_t SplitChunkSource::capacity_bytes(int device) const {
  return For(device)->capacity_bytes(device);
}

absl::Status SplitChunkSource::SetCapacity(int device, uint64_t bytes) {
  return For(device)->SetCapacity(device, bytes);
}

void SplitChunkSource::SetReclaimHandler(ReclaimHandler handler) {
  // The embedded lake has no one else to ask for memory for.
  shared_->SetReclaimHandler(std::move(handler));
}

void SplitChunkSource::SetUsageProvider(UsageProvider provider) {
  shared_->SetUsageProvider(std::move(provider));
}

}  // namespace gmlake
