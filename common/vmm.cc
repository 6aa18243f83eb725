// Copyright 2026 The GMLake Authors.

#include "common/vmm.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace gmlake {
namespace {

constexpr absl::string_view kCallNames[kNumVmmCalls] = {
    "create",      "release",      "export",        "import",
    "reserve",     "free",         "map",           "unmap",
    "set_access",  "event_create", "event_destroy", "event_record",
    "event_query", "event_sync",   "stream_wait",   "capture_query",
};

// Times one call and adds it to the counters when it goes out of scope.
class CallTimer {
 public:
  CallTimer(VmmCallStats* stats, VmmCall call)
      : stats_(stats), call_(call), start_(std::chrono::steady_clock::now()) {}
  ~CallTimer() {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start_)
                        .count();
    stats_->Add(call_, static_cast<uint64_t>(ns));
  }

 private:
  VmmCallStats* stats_;
  VmmCall call_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

bool IsMemoryCall(VmmCall call) {
  // Event and stream calls: everything from kEventCreate on.
  return call < VmmCall::kEventCreate;
}

absl::string_view VmmCallName(VmmCall call) {
  return kCallNames[static_cast<int>(call)];
}

uint64_t VmmCallSnapshot::MemoryCalls() const {
  uint64_t n = 0;
  for (int i = 0; i < kNumVmmCalls; ++i) {
    if (IsMemoryCall(static_cast<VmmCall>(i))) n += count[i];
  }
  return n;
}

uint64_t VmmCallSnapshot::TotalCalls() const {
  uint64_t n = 0;
  for (uint64_t c : count) n += c;
  return n;
}

uint64_t VmmCallSnapshot::TotalNanos() const {
  uint64_t n = 0;
  for (uint64_t c : nanos) n += c;
  return n;
}

VmmCallSnapshot VmmCallSnapshot::operator-(
    const VmmCallSnapshot& earlier) const {
  VmmCallSnapshot d;
  for (int i = 0; i < kNumVmmCalls; ++i) {
    d.count[i] = count[i] - earlier.count[i];
    d.nanos[i] = nanos[i] - earlier.nanos[i];
  }
  return d;
}

VmmCallSnapshot VmmCallStats::Snapshot() const {
  VmmCallSnapshot s;
  for (int i = 0; i < kNumVmmCalls; ++i) {
    s.count[i] = count_[i].load(std::memory_order_relaxed);
    s.nanos[i] = nanos_[i].load(std::memory_order_relaxed);
  }
  return s;
}

// --- Counting wrappers
// ---------------------------------------------------------

absl::StatusOr<ChunkHandle> VmmBackend::CreateChunk(int device, size_t size) {
  CallTimer t(&stats_, VmmCall::kCreate);
  return DoCreateChunk(device, size);
}

absl::Status VmmBackend::ReleaseChunk(ChunkHandle chunk) {
  CallTimer t(&stats_, VmmCall::kRelease);
  return DoReleaseChunk(chunk);
}

absl::StatusOr<UniqueFd> VmmBackend::ExportChunk(ChunkHandle chunk) {
  CallTimer t(&stats_, VmmCall::kExport);
  return DoExportChunk(chunk);
}

absl::StatusOr<ChunkHandle> VmmBackend::ImportChunk(int fd, int device,
                                                    size_t size) {
  CallTimer t(&stats_, VmmCall::kImport);
  return DoImportChunk(fd, device, size);
}

absl::StatusOr<DevicePtr> VmmBackend::ReserveRange(size_t size,
                                                   size_t alignment,
                                                   int device) {
  CallTimer t(&stats_, VmmCall::kReserve);
  return DoReserveRange(size, alignment, device);
}

absl::Status VmmBackend::FreeRange(DevicePtr base, size_t size) {
  CallTimer t(&stats_, VmmCall::kFree);
  return DoFreeRange(base, size);
}

absl::Status VmmBackend::Map(DevicePtr addr, size_t size, ChunkHandle chunk) {
  CallTimer t(&stats_, VmmCall::kMap);
  return DoMap(addr, size, chunk);
}

absl::Status VmmBackend::Unmap(DevicePtr addr, size_t size) {
  CallTimer t(&stats_, VmmCall::kUnmap);
  return DoUnmap(addr, size);
}

absl::Status VmmBackend::SetAccess(DevicePtr addr, size_t size,
                                   absl::Span<const int> devices) {
  CallTimer t(&stats_, VmmCall::kSetAccess);
  return DoSetAccess(addr, size, devices);
}

absl::StatusOr<EventHandle> VmmBackend::CreateEvent(int device) {
  CallTimer t(&stats_, VmmCall::kEventCreate);
  return DoCreateEvent(device);
}

absl::Status VmmBackend::DestroyEvent(EventHandle event) {
  CallTimer t(&stats_, VmmCall::kEventDestroy);
  return DoDestroyEvent(event);
}

absl::Status VmmBackend::RecordEvent(EventHandle event, StreamHandle stream) {
  CallTimer t(&stats_, VmmCall::kEventRecord);
  return DoRecordEvent(event, stream);
}

absl::StatusOr<bool> VmmBackend::QueryEvent(EventHandle event) {
  CallTimer t(&stats_, VmmCall::kEventQuery);
  return DoQueryEvent(event);
}

absl::Status VmmBackend::SyncEvent(EventHandle event) {
  CallTimer t(&stats_, VmmCall::kEventSync);
  return DoSyncEvent(event);
}

absl::Status VmmBackend::WaitEventOnStream(StreamHandle stream,
                                           EventHandle event) {
  CallTimer t(&stats_, VmmCall::kStreamWait);
  return DoWaitEventOnStream(stream, event);
}

absl::StatusOr<std::vector<uint64_t>> VmmBackend::CaptureFrontier(
    StreamHandle stream) {
  CallTimer t(&stats_, VmmCall::kCaptureQuery);
  return DoCaptureFrontier(stream);
}

absl::StatusOr<bool> VmmBackend::CaptureFollows(
    StreamHandle stream, absl::Span<const uint64_t> nodes) {
  CallTimer t(&stats_, VmmCall::kCaptureQuery);
  return DoCaptureFollows(stream, nodes);
}

// --- RAII owners
// ---------------------------------------------------------------

Chunk& Chunk::operator=(Chunk&& o) noexcept {
  if (this != &o) {
    Reset().IgnoreError();
    backend_ = o.backend_;
    handle_ = o.TakeHandle();
    device_ = o.device_;
    size_ = o.size_;
  }
  return *this;
}

absl::StatusOr<Chunk> Chunk::Create(VmmBackend* backend, int device,
                                    size_t size) {
  absl::StatusOr<ChunkHandle> h = backend->CreateChunk(device, size);
  if (!h.ok()) return h.status();
  return Chunk(backend, *h, device, size);
}

absl::Status Chunk::Reset() {
  if (handle_ == 0) return absl::OkStatus();
  return backend_->ReleaseChunk(std::exchange(handle_, 0));
}

VirtualRange& VirtualRange::operator=(VirtualRange&& o) noexcept {
  if (this != &o) {
    Reset().IgnoreError();
    backend_ = o.backend_;
    base_ = o.base_;
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

absl::StatusOr<VirtualRange> VirtualRange::Reserve(VmmBackend* backend,
                                                   size_t size,
                                                   size_t alignment,
                                                   int device) {
  absl::StatusOr<DevicePtr> base =
      backend->ReserveRange(size, alignment, device);
  if (!base.ok()) return base.status();
  return VirtualRange(backend, *base, size);
}

absl::Status VirtualRange::Reset() {
  if (size_ == 0) return absl::OkStatus();
  return backend_->FreeRange(base_, std::exchange(size_, 0));
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    Reset().IgnoreError();
    backend_ = o.backend_;
    addr_ = o.addr_;
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

absl::StatusOr<Mapping> Mapping::Map(VmmBackend* backend, DevicePtr addr,
                                     size_t size, ChunkHandle chunk,
                                     absl::Span<const int> devices) {
  absl::Status s = backend->Map(addr, size, chunk);
  if (!s.ok()) return s;
  Mapping m(backend, addr, size);
  s = backend->SetAccess(addr, size, devices);
  if (!s.ok()) return s;  // m unmaps on the way out.
  return m;
}

absl::Status Mapping::Reset() {
  if (size_ == 0) return absl::OkStatus();
  return backend_->Unmap(addr_, std::exchange(size_, 0));
}

}  // namespace gmlake
