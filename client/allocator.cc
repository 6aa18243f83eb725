// Copyright 2026 The GMLake Authors.

#include "client/allocator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bytes.h"

namespace gmlake {

Allocator::Allocator(std::unique_ptr<ChunkSource> source,
                     const AllocatorOptions& options)
    : Allocator(source.get(), options) {
  owned_source_ = std::move(source);
}

Allocator::Allocator(ChunkSource* source, const AllocatorOptions& options)
    : source_(source) {
  AllocatorOptions o = options;
  // Small blocks never span chunks.
  if (o.small_size > source->chunk_size(0) / 2) {
    o.small_size = source->chunk_size(0) / 2;
  }
  const int n = source->backend()->device_count();
  large_arena_ = o.large_arena;
  fraction_.assign(n, -1.0);
  for (int d = 0; d < n; ++d) {
    devices_.push_back(std::make_unique<DeviceAllocator>(d, source, o));
    // An arena is cut into whole chunk-sized pages (Arena::Create).
    const uint64_t page = source->chunk_size(d);
    max_request_.push_back(page == 0 ? 0 : o.large_arena / page * page);
  }
  source_->SetReclaimHandler([this](int device, uint64_t bytes) -> uint64_t {
    return Reclaim(device, bytes);
  });
  source_->SetUsageProvider([this](int device) {
    if (device < 0 || device >= device_count()) {
      return ChunkSource::AllocatorUsage{};
    }
    return devices_[device]->usage();
  });
}

Allocator::~Allocator() {
  source_->SetUsageProvider(nullptr);
  source_->SetReclaimHandler(nullptr);
  devices_.clear();
}

absl::Status Allocator::CheckDevice(int device) const {
  if (device < 0 || device >= device_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, " does not exist (", device_count(),
        " devices on the ", source_->backend()->name(), " backend)"));
  }
  return absl::OkStatus();
}

absl::Status Allocator::TooLarge(size_t size, int device) const {
  const AllocatorStats s = devices_[device]->stats();
  return absl::ResourceExhaustedError(absl::StrCat(
      "gmlake: out of memory on device ", device, ": tried to allocate ",
      FormatBytes(size), " (", size, " bytes), more than an arena holds (",
      FormatBytes(max_request_[device]), " of address space, large_arena:",
      FormatBytes(large_arena_), "); this process has ",
      FormatBytes(s.allocated_bytes.current), " allocated in ",
      s.allocation.current, " blocks, ", FormatBytes(s.reserved_bytes.current),
      " reserved. Ask for less, or raise large_arena in GMLAKE_CONF."));
}

absl::StatusOr<DevicePtr> Allocator::Malloc(size_t size, int device,
                                            StreamHandle stream) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  if (size > max_request_[device]) return TooLarge(size, device);
  return devices_[device]->Malloc(size, stream);
}

absl::Status Allocator::Free(DevicePtr ptr) {
  if (ptr == 0) return absl::OkStatus();
  absl::Status first;
  for (auto& d : devices_) {
    absl::Status s = d->Free(ptr);
    if (s.ok() || !absl::IsNotFound(s)) return s;
    if (first.ok()) first = s;
  }
  return first;
}

absl::Status Allocator::Free(DevicePtr ptr, int device) {
  if (ptr == 0) return absl::OkStatus();
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  return devices_[device]->Free(ptr);
}

absl::Status Allocator::RecordStream(DevicePtr ptr, StreamHandle stream) {
  absl::Status first;
  for (auto& d : devices_) {
    absl::Status s = d->RecordStream(ptr, stream);
    if (s.ok() || !absl::IsNotFound(s)) return s;
    if (first.ok()) first = s;
  }
  return first;
}

uint64_t Allocator::EmptyCache() {
  uint64_t n = 0;
  for (auto& d : devices_) {
    n += d->EmptyCache();
    source_->ReleaseKept(d->device());
  }
  return n;
}

uint64_t Allocator::Reclaim(int device, uint64_t bytes) {
  if (!CheckDevice(device).ok()) return 0;
  return devices_[device]->Reclaim(bytes);
}

absl::Status Allocator::SetCapacity(int device, uint64_t bytes) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  absl::Status s = source_->SetCapacity(device, bytes);
  if (!s.ok()) return s;
  {
    MutexLock lock(&fraction_mu_);
    fraction_[device] = -1.0;
  }
  const AllocatorStats st = devices_[device]->stats();
  const uint64_t reserved = static_cast<uint64_t>(st.reserved_bytes.current);
  if (bytes != 0 && reserved > bytes) {
    devices_[device]->Reclaim(reserved - bytes);
  }
  return absl::OkStatus();
}

AllocatorStats Allocator::stats(int device) const {
  if (device >= 0 && device < device_count()) {
    return devices_[device]->stats();
  }
  AllocatorStats all;
  for (const auto& d : devices_) all.Merge(d->stats());
  all.driver_calls = source_->backend()->call_stats();
  return all;
}

void Allocator::ResetPeaks(int device) {
  for (auto& d : devices_) {
    if (device < 0 || d->device() == device) d->ResetPeaks();
  }
}

void Allocator::ResetAccumulated(int device) {
  for (auto& d : devices_) {
    if (device < 0 || d->device() == device) d->ResetAccumulated();
  }
}

absl::StatusOr<uint64_t> Allocator::DeviceMemory(int device) const {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  const uint64_t whole = source_->backend()->device_memory_bytes(device);
  if (whole == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", source_->backend()->name(), " backend does not report device ",
        device,
        "'s memory, so a fraction of it means nothing: set a capacity in "
        "bytes instead (GMLAKE_CONF=capacity:...)"));
  }
  return whole;
}

absl::Status Allocator::SetMemoryFraction(int device, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory fraction ", fraction, " is not in [0, 1]"));
  }
  absl::StatusOr<uint64_t> whole = DeviceMemory(device);
  if (!whole.ok()) return whole.status();
  // A capacity of 0 is none at all: 1 byte lets no chunk in.
  const uint64_t bytes =
      std::max<uint64_t>(static_cast<uint64_t>(fraction * *whole), 1);
  if (absl::Status s = SetCapacity(device, bytes); !s.ok()) return s;
  MutexLock lock(&fraction_mu_);
  fraction_[device] = fraction;
  return absl::OkStatus();
}

absl::StatusOr<double> Allocator::MemoryFraction(int device) const {
  absl::StatusOr<uint64_t> whole = DeviceMemory(device);
  if (!whole.ok()) return whole.status();
  {
    MutexLock lock(&fraction_mu_);
    if (fraction_[device] >= 0) return fraction_[device];
  }
  const uint64_t cap = source_->capacity_bytes(device);
  if (cap == 0 || cap >= *whole) return 1.0;
  return static_cast<double>(cap) / static_cast<double>(*whole);
}

void Allocator::RecordHistory(size_t max_entries, StackKind stacks,
                              HistoryContext context, bool clear) {
  for (auto& d : devices_) {
    d->trace().Configure(max_entries, stacks, context, clear);
  }
}

void Allocator::SetHistoryMetadata(const std::string& metadata) {
  for (auto& d : devices_) d->trace().SetUserMetadata(metadata);
}

std::string Allocator::SnapshotJson() const {
  std::string segments = "[";
  std::string traces = "[";
  for (size_t i = 0; i < devices_.size(); ++i) {
    std::string s = devices_[i]->SegmentsJson();
    // Join the per-device arrays into one.
    if (s.size() > 2) {
      absl::StrAppend(&segments, segments.size() > 1 ? "," : "",
                      s.substr(1, s.size() - 2));
    }
    absl::StrAppend(&traces, i ? "," : "", devices_[i]->trace().ToJson());
  }
  return absl::StrCat("{\"segments\":", segments,
                      "],\"device_traces\":", traces, "]}");
}

absl::Status Allocator::CheckInvariants() const {
  for (const auto& d : devices_) {
    if (absl::Status s = d->CheckInvariants(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceAllocator*> Allocator::device(int device) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  return devices_[device].get();
}

}  // namespace gmlake
