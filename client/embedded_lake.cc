// Copyright 2026 The GMLake Authors.

#include "client/embedded_lake.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/bytes.h"

namespace gmlake {

EmbeddedLake::EmbeddedLake(VmmBackend* backend, size_t chunk_size)
    : backend_(backend),
      chunk_size_(chunk_size != 0 ? chunk_size : backend->granularity(0)) {
  absl::MutexLock lock(&mu_);
  devices_.resize(backend_->device_count());
}

EmbeddedLake::EmbeddedLake(std::unique_ptr<VmmBackend> backend,
                           size_t chunk_size)
    : EmbeddedLake(backend.get(), chunk_size) {
  owned_backend_ = std::move(backend);
}

EmbeddedLake::~EmbeddedLake() { Trim(); }

std::string EmbeddedLake::Describe() const {
  absl::MutexLock lock(&mu_);
  std::string caps;
  for (size_t d = 0; d < devices_.size(); ++d) {
    absl::StrAppend(&caps, d ? ", " : "", "device ", d, " ",
                    devices_[d].capacity ? FormatBytes(devices_[d].capacity)
                                         : std::string("unlimited"));
  }
  return absl::StrCat(
      "embedded lake (in-process, no gmlaked): ", FormatBytes(chunk_size_),
      " chunks; capacity ", caps, "; on ", backend_->Describe());
}

EmbeddedLake::DeviceBooks& EmbeddedLake::Books(int device) {
  return devices_[device];
}

absl::StatusOr<std::vector<ChunkHandle>> EmbeddedLake::Acquire(int device,
                                                               size_t count) {
  absl::MutexLock lock(&mu_);
  if (device < 0 || device >= static_cast<int>(devices_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedded lake: no device ", device, " (", devices_.size(),
                     " devices)"));
  }
  DeviceBooks& books = Books(device);
  const uint64_t want = uint64_t{count} * chunk_size_;
  if (books.capacity != 0 && books.held + want > books.capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "embedded lake: device ", device, " capacity reached: asked ",
        FormatBytes(want), ", holding ", FormatBytes(books.held), " of ",
        FormatBytes(books.capacity),
        "; raise it with set_capacity / GMLAKE_CONF=capacity:..."));
  }
  std::vector<ChunkHandle> out;
  out.reserve(count);
  while (out.size() < count && !books.idle.empty()) {
    out.push_back(books.idle.back());
    books.idle.pop_back();
  }
  while (out.size() < count) {
    absl::StatusOr<ChunkHandle> h = backend_->CreateChunk(device, chunk_size_);
    if (!h.ok()) {
      // All or nothing: keep what we took for the next caller.
      books.idle.insert(books.idle.end(), out.begin(), out.end());
      return absl::Status(
          h.status().code(),
          absl::StrCat("embedded lake: ", h.status().message(), " (asked ",
                       FormatBytes(want), ", holding ", FormatBytes(books.held),
                       ")"));
    }
    out.push_back(*h);
  }
  books.held += want;
  return out;
}

void EmbeddedLake::Return(int device, absl::Span<const ChunkHandle> chunks) {
  absl::MutexLock lock(&mu_);
  DeviceBooks& books = Books(device);
  books.idle.insert(books.idle.end(), chunks.begin(), chunks.end());
  books.held -= uint64_t{chunks.size()} * chunk_size_;
}

uint64_t EmbeddedLake::capacity_bytes(int device) const {
  absl::MutexLock lock(&mu_);
  return devices_[device].capacity;
}

absl::Status EmbeddedLake::SetCapacity(int device, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (device < 0 || device >= static_cast<int>(devices_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedded lake: no device ", device));
  }
  devices_[device].capacity = bytes;
  return absl::OkStatus();
}

uint64_t EmbeddedLake::Trim() {
  absl::MutexLock lock(&mu_);
  uint64_t released = 0;
  for (DeviceBooks& books : devices_) {
    for (ChunkHandle h : books.idle) {
      if (backend_->ReleaseChunk(h).ok()) released += chunk_size_;
    }
    books.idle.clear();
  }
  return released;
}

uint64_t EmbeddedLake::held_bytes(int device) const {
  absl::MutexLock lock(&mu_);
  return devices_[device].held;
}

}  // namespace gmlake
