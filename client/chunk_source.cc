// Copyright 2026 The GMLake Authors.

#include "client/chunk_source.h"

namespace gmlake {

absl::StatusOr<std::vector<SizedChunk>> ChunkSource::AcquireBytes(
    int device, uint64_t bytes) {
  const uint64_t unit = chunk_size(device);
  absl::StatusOr<std::vector<ChunkHandle>> handles =
      Acquire(device, static_cast<size_t>((bytes + unit - 1) / unit));
  if (!handles.ok()) return handles.status();
  std::vector<SizedChunk> out;
  out.reserve(handles->size());
  for (ChunkHandle h : *handles) out.push_back({h, unit});
  return out;
}

void ChunkSource::ReturnSized(int device, absl::Span<const SizedChunk> chunks) {
  std::vector<ChunkHandle> handles;
  handles.reserve(chunks.size());
  for (const SizedChunk& c : chunks) handles.push_back(c.handle);
  Return(device, handles);
}

}  // namespace gmlake
