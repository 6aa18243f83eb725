// Copyright 2026 The GMLake Authors.

#include "client/embedded_lake.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bytes.h"
#include "common/mutex.h"

namespace gmlake {

EmbeddedLake::EmbeddedLake(VmmBackend* backend, size_t chunk_size,
                           const ChunkSizing& growth)
    : backend_(backend),
      chunk_size_(chunk_size != 0 ? chunk_size : backend->granularity(0)),
      sizing_(growth) {
  sizing_.unit = chunk_size_;
  MutexLock lock(&mu_);
  devices_.resize(backend_->device_count());
}

EmbeddedLake::EmbeddedLake(std::unique_ptr<VmmBackend> backend,
                           size_t chunk_size, const ChunkSizing& growth)
    : EmbeddedLake(backend.get(), chunk_size, growth) {
  owned_backend_ = std::move(backend);
}

EmbeddedLake::~EmbeddedLake() { Trim(); }

std::string EmbeddedLake::Describe() const {
  MutexLock lock(&mu_);
  std::string caps;
  for (size_t d = 0; d < devices_.size(); ++d) {
    absl::StrAppend(&caps, d ? ", " : "", "device ", d, " ",
                    devices_[d].capacity ? FormatBytes(devices_[d].capacity)
                                         : std::string("unlimited"));
  }
  return absl::StrCat(
      "embedded lake (in-process, no gmlaked): ", FormatBytes(chunk_size_),
      " granularity; capacity ", caps, "; on ", backend_->Describe());
}

EmbeddedLake::DeviceBooks& EmbeddedLake::Books(int device) {
  return devices_[device];
}

absl::StatusOr<std::vector<SizedChunk>> EmbeddedLake::AcquireBytes(
    int device, uint64_t bytes) {
  MutexLock lock(&mu_);
  if (device < 0 || device >= static_cast<int>(devices_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedded lake: no device ", device, " (", devices_.size(),
                     " devices)"));
  }
  if (bytes == 0 || bytes % chunk_size_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedded lake: ", bytes, " bytes is not a multiple of ",
                     "the ", chunk_size_, "-byte granularity"));
  }
  DeviceBooks& books = Books(device);
  if (books.capacity != 0 && books.held + bytes > books.capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "embedded lake: device ", device, " capacity reached: asked ",
        FormatBytes(bytes), ", holding ", FormatBytes(books.held), " of ",
        FormatBytes(books.capacity),
        "; raise it with set_capacity / GMLAKE_CONF=capacity:..."));
  }
  std::vector<SizedChunk> out;
  const uint64_t have = TakeKeptChunks(&books.idle, bytes, 0, &out);
  for (const ChunkRun& run :
       PlanChunks(bytes - have, ForHeld(sizing_, books.peak_held))) {
    for (uint64_t i = 0; i < run.count; ++i) {
      absl::StatusOr<ChunkHandle> h = backend_->CreateChunk(device, run.size);
      if (!h.ok() && absl::IsResourceExhausted(h.status()) &&
          !books.idle.empty()) {
        // Kept chunks of other sizes fill the device: release them (no one
        // holds them) and make this one. The allocator gives back chunks
        // of one arena to take chunks of another size (Remake).
        for (const SizedChunk& c : books.idle) {
          backend_->ReleaseChunk(c.handle).IgnoreError();
        }
        books.idle.clear();
        h = backend_->CreateChunk(device, run.size);
      }
      if (!h.ok()) {
        // All or nothing: keep what we took for the next caller.
        books.idle.insert(books.idle.end(), out.begin(), out.end());
        return absl::Status(
            h.status().code(),
            absl::StrCat("embedded lake: ", h.status().message(), " (asked ",
                         FormatBytes(bytes), ", holding ",
                         FormatBytes(books.held), ")"));
      }
      out.push_back({*h, run.size});
    }
  }
  books.held += bytes;
  books.peak_held = std::max(books.peak_held, books.held);
  return out;
}

void EmbeddedLake::ReturnSized(int device,
                               absl::Span<const SizedChunk> chunks) {
  MutexLock lock(&mu_);
  DeviceBooks& books = Books(device);
  for (const SizedChunk& c : chunks) {
    books.idle.push_back(c);
    books.held -= c.size;
  }
}

uint64_t EmbeddedLake::capacity_bytes(int device) const {
  MutexLock lock(&mu_);
  return devices_[device].capacity;
}

absl::Status EmbeddedLake::SetCapacity(int device, uint64_t bytes) {
  MutexLock lock(&mu_);
  if (device < 0 || device >= static_cast<int>(devices_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedded lake: no device ", device));
  }
  devices_[device].capacity = bytes;
  return absl::OkStatus();
}

uint64_t EmbeddedLake::ReleaseKept(int device) {
  MutexLock lock(&mu_);
  if (device < 0 || device >= static_cast<int>(devices_.size())) return 0;
  return ReleaseKeptLocked(devices_[device]);
}

uint64_t EmbeddedLake::Trim() {
  MutexLock lock(&mu_);
  uint64_t released = 0;
  for (DeviceBooks& books : devices_) released += ReleaseKeptLocked(books);
  return released;
}

uint64_t EmbeddedLake::ReleaseKeptLocked(DeviceBooks& books) {
  uint64_t released = 0;
  for (const SizedChunk& c : books.idle) {
    if (backend_->ReleaseChunk(c.handle).ok()) released += c.size;
  }
  books.idle.clear();
  return released;
}

uint64_t EmbeddedLake::held_bytes(int device) const {
  MutexLock lock(&mu_);
  return devices_[device].held;
}

}  // namespace gmlake
