// Copyright 2026 The GMLake Authors.
//
// The VMM layer: the one interface through which GMLake touches GPU memory.
//
// Nothing else in the project calls the CUDA driver. A backend provides
// physical chunks (create / release / export as a POSIX file descriptor /
// import), virtual ranges (reserve / free), mappings of a whole chunk at an
// offset of a range (map / unmap / set access), events on streams, and a way
// to fill and read memory for tests. Backends:
//
//   cuda        the CUDA driver API, loaded with dlopen at run time
//               (cuda_backend.h); chunks carry POSIX-fd shareable handles.
//   host        the same semantics on the CPU with memfd + mmap
//               (host_backend.h): real memory, real descriptors, real
//               cross-process sharing. What CI tests.
//   accounting  keeps the books of the host backend without any memory
//               (accounting_backend.h): for replaying a trace many times
//               where only the allocator's decisions matter.
//
// The public methods are non-virtual: they count and time every call by kind
// (VmmCallStats) and then call the backend's Do* implementation, so every
// backend reports driver calls the same way.
//
// A chunk can only be mapped whole (the CUDA driver refuses a non-zero offset
// into a handle; measured in docs/gpu.md, "What the VMM calls cost on an
// H200"), so Map takes a chunk and maps all of it.

#ifndef GMLAKE_COMMON_VMM_H_
#define GMLAKE_COMMON_VMM_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"

namespace gmlake {

// An address in a reserved virtual range (device memory on cuda, host memory
// on the host backend).
using DevicePtr = uintptr_t;

// Backend-specific opaque handles. 0 is never a valid handle.
using ChunkHandle = uint64_t;
using EventHandle = uint64_t;
// A stream; 0 is the device's default (null) stream.
using StreamHandle = uint64_t;

// For ReserveRange: no device in particular.
inline constexpr int kAnyDevice = -1;

// Every kind of call the layer makes, for the counters.
enum class VmmCall : int {
  kCreate = 0,
  kRelease,
  kExport,
  kImport,
  kReserve,
  kFree,
  kMap,
  kUnmap,
  kSetAccess,
  kEventCreate,
  kEventDestroy,
  kEventRecord,
  kEventQuery,
  kEventSync,
  kStreamWait,
  kCaptureQuery,
  kNumCalls,
};
inline constexpr int kNumVmmCalls = static_cast<int>(VmmCall::kNumCalls);

// The short name of a call kind ("create", "map", ...), for tables and JSON.
absl::string_view VmmCallName(VmmCall call);
// Whether a call kind changes memory state (not an event or stream call).
bool IsMemoryCall(VmmCall call);

// A plain copy of the counters at one moment.
struct VmmCallSnapshot {
  std::array<uint64_t, kNumVmmCalls> count{};
  std::array<uint64_t, kNumVmmCalls> nanos{};

  uint64_t Count(VmmCall c) const { return count[static_cast<int>(c)]; }
  uint64_t Nanos(VmmCall c) const { return nanos[static_cast<int>(c)]; }
  // Calls that change memory state: everything but event calls.
  uint64_t MemoryCalls() const;
  // All calls.
  uint64_t TotalCalls() const;
  uint64_t TotalNanos() const;
  VmmCallSnapshot operator-(const VmmCallSnapshot& earlier) const;
};

// Thread-safe counters of calls and wall time spent in them, by kind.
class VmmCallStats {
 public:
  void Add(VmmCall call, uint64_t nanos) {
    const int i = static_cast<int>(call);
    count_[i].fetch_add(1, std::memory_order_relaxed);
    nanos_[i].fetch_add(nanos, std::memory_order_relaxed);
  }
  VmmCallSnapshot Snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, kNumVmmCalls> count_{};
  std::array<std::atomic<uint64_t>, kNumVmmCalls> nanos_{};
};

// The interface. All methods are thread-safe unless noted.
class VmmBackend {
 public:
  virtual ~VmmBackend() = default;

  // "cuda", "host" or "accounting".
  virtual absl::string_view name() const = 0;
  // A one-line description for start-up logs (driver version, devices,
  // capacity).
  virtual std::string Describe() const = 0;
  // Number of devices this backend serves (>= 1 once created).
  virtual int device_count() const = 0;
  // The device's UUID as nvidia-smi writes it ("GPU-8e6a2c1f-..."), the
  // same in every process whatever its device numbering (which
  // CUDA_VISIBLE_DEVICES changes): how a client and gmlaked agree on a
  // device. The emulated backends make stable ones ("GPU-686f7374-...").
  // Empty for a device that does not exist.
  virtual std::string device_uuid(int device) const = 0;
  // Size every chunk must be a multiple of, on `device`.
  virtual size_t granularity(int device) const = 0;
  // Whether mapped memory is readable through Fill/CopyToHost/CopyFromHost
  // (false for the accounting backend).
  virtual bool has_memory() const { return true; }
  // Whether ExportChunk works on a chunk this backend imported. The CUDA
  // driver refuses it (cuMemExportToShareableHandle on an imported handle:
  // CUDA_ERROR_INVALID_VALUE, seen on an H200 with driver 580); a client
  // that must show such a chunk again keeps the descriptor it received.
  virtual bool can_export_imports() const { return true; }
  // Bytes of memory `device` has in all, for settings given as a fraction
  // of the card (gmlaked --capacity=0.9); 0 when the backend cannot tell.
  virtual uint64_t device_memory_bytes(int /*device*/) const { return 0; }

  // --- Physical chunks -----------------------------------------------------

  // Creates a physical chunk of `size` bytes (a positive multiple of
  // granularity(device)) on `device`. Returns ResourceExhausted when the
  // device has no room, InvalidArgument for a bad size or device.
  absl::StatusOr<ChunkHandle> CreateChunk(int device, size_t size);
  // Releases a chunk created or imported here. Unmap it first: the memory
  // itself lives on while any mapping (in any process) still refers to it,
  // as with the driver.
  absl::Status ReleaseChunk(ChunkHandle chunk);
  // Exports a chunk as a new POSIX file descriptor that the caller owns and
  // may send to another process (SCM_RIGHTS).
  absl::StatusOr<UniqueFd> ExportChunk(ChunkHandle chunk);
  // Imports a chunk of `size` bytes on `device` from a descriptor made by
  // ExportChunk (in any process). Does not take ownership of `fd`: close it
  // when it is no longer needed (the chunk stays valid).
  absl::StatusOr<ChunkHandle> ImportChunk(int fd, int device, size_t size);

  // --- Virtual ranges and mappings -----------------------------------------

  // Reserves `size` bytes of virtual address space (a multiple of the
  // granularity), aligned to `alignment` (0: granularity). Nothing is
  // accessible until mapped and given access. `device` is the device the
  // range is for: the cuda backend reserves (and frees) it in that device's
  // context, so a process touches no other device; kAnyDevice: a device
  // this backend already uses (device 0 if none).
  absl::StatusOr<DevicePtr> ReserveRange(size_t size, size_t alignment = 0,
                                         int device = kAnyDevice);
  // Frees a range from ReserveRange. All of it must be unmapped.
  absl::Status FreeRange(DevicePtr base, size_t size);
  // Maps all of `chunk` at `addr` (granularity-aligned, inside a reserved
  // range, not mapped already); `size` is the chunk's size.
  absl::Status Map(DevicePtr addr, size_t size, ChunkHandle chunk);
  // Unmaps `size` bytes at `addr`, which must be whole mapped chunks.
  // Access does not survive an unmap: a new mapping needs SetAccess again.
  absl::Status Unmap(DevicePtr addr, size_t size);
  // Gives read/write access to mapped memory [addr, addr+size) to each of
  // `devices`.
  absl::Status SetAccess(DevicePtr addr, size_t size,
                         absl::Span<const int> devices);

  // --- Events on streams ---------------------------------------------------

  absl::StatusOr<EventHandle> CreateEvent(int device);
  absl::Status DestroyEvent(EventHandle event);
  // Records `event` on `stream`: it completes when the work queued on the
  // stream before it has finished.
  absl::Status RecordEvent(EventHandle event, StreamHandle stream);
  // Whether the work before the event's last record has finished.
  absl::StatusOr<bool> QueryEvent(EventHandle event);
  // Blocks until it has.
  absl::Status SyncEvent(EventHandle event);
  // Makes the work queued on `stream` from now on wait, on the device, for
  // the work before `event`'s last record. The host does not wait: this is
  // how memory last used on one stream is handed to another without
  // stopping the caller (cuStreamWaitEvent).
  absl::Status WaitEventOnStream(StreamHandle stream, EventHandle event);

  // --- Stream capture (CUDA graphs) ---------------------------------------
  // What a capture's dependency graph says, for reusing memory inside one
  // capture without an event (capture forbids event queries and waits).
  // The nodes the next work captured on `stream` would depend on
  // (cuStreamGetCaptureInfo). FailedPrecondition when `stream` is not
  // being captured; Unimplemented where the backend cannot tell.
  absl::StatusOr<std::vector<uint64_t>> CaptureFrontier(StreamHandle stream);
  // Whether every node of `nodes` is in `stream`'s capture frontier or an
  // ancestor of it (cuGraphNodeGetDependencies): the work captured on
  // `stream` from now on runs after all of them.
  absl::StatusOr<bool> CaptureFollows(StreamHandle stream,
                                      absl::Span<const uint64_t> nodes);

  // --- Memory access, for tests and scrubbing -------------------------------

  // Sets `size` bytes at `addr` to `value` (mapped memory with access).
  virtual absl::Status Fill(DevicePtr addr, uint8_t value, size_t size) = 0;
  virtual absl::Status CopyToHost(void* dst, DevicePtr src, size_t size) = 0;
  virtual absl::Status CopyFromHost(DevicePtr dst, const void* src,
                                    size_t size) = 0;

  // Calls made through this backend so far, with wall time.
  VmmCallSnapshot call_stats() const { return stats_.Snapshot(); }

 protected:
  virtual absl::StatusOr<ChunkHandle> DoCreateChunk(int device,
                                                    size_t size) = 0;
  virtual absl::Status DoReleaseChunk(ChunkHandle chunk) = 0;
  virtual absl::StatusOr<UniqueFd> DoExportChunk(ChunkHandle chunk) = 0;
  virtual absl::StatusOr<ChunkHandle> DoImportChunk(int fd, int device,
                                                    size_t size) = 0;
  virtual absl::StatusOr<DevicePtr> DoReserveRange(size_t size,
                                                   size_t alignment,
                                                   int device) = 0;
  virtual absl::Status DoFreeRange(DevicePtr base, size_t size) = 0;
  virtual absl::Status DoMap(DevicePtr addr, size_t size,
                             ChunkHandle chunk) = 0;
  virtual absl::Status DoUnmap(DevicePtr addr, size_t size) = 0;
  virtual absl::Status DoSetAccess(DevicePtr addr, size_t size,
                                   absl::Span<const int> devices) = 0;
  virtual absl::StatusOr<EventHandle> DoCreateEvent(int device) = 0;
  virtual absl::Status DoDestroyEvent(EventHandle event) = 0;
  virtual absl::Status DoRecordEvent(EventHandle event,
                                     StreamHandle stream) = 0;
  virtual absl::StatusOr<bool> DoQueryEvent(EventHandle event) = 0;
  virtual absl::Status DoSyncEvent(EventHandle event) = 0;
  virtual absl::Status DoWaitEventOnStream(StreamHandle stream,
                                           EventHandle event) = 0;
  virtual absl::StatusOr<std::vector<uint64_t>> DoCaptureFrontier(
      StreamHandle /*stream*/) {
    return absl::UnimplementedError(
        "this backend cannot read a capture's dependency graph");
  }
  virtual absl::StatusOr<bool> DoCaptureFollows(
      StreamHandle /*stream*/, absl::Span<const uint64_t> /*nodes*/) {
    return absl::UnimplementedError(
        "this backend cannot read a capture's dependency graph");
  }

 private:
  VmmCallStats stats_;
};

// --- RAII owners -------------------------------------------------------------

// A physical chunk that releases itself. Move-only.
class Chunk {
 public:
  Chunk() = default;
  Chunk(VmmBackend* backend, ChunkHandle handle, int device, size_t size)
      : backend_(backend), handle_(handle), device_(device), size_(size) {}
  ~Chunk() { Reset().IgnoreError(); }
  Chunk(Chunk&& o) noexcept { *this = std::move(o); }
  Chunk& operator=(Chunk&& o) noexcept;
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  // Creates a chunk through `backend`.
  static absl::StatusOr<Chunk> Create(VmmBackend* backend, int device,
                                      size_t size);

  ChunkHandle handle() const { return handle_; }
  int device() const { return device_; }
  size_t size() const { return size_; }
  explicit operator bool() const { return handle_ != 0; }
  // Gives up ownership, like unique_ptr::release: the caller must release
  // the handle (VmmBackend::ReleaseChunk). The chunk is not released here.
  ChunkHandle TakeHandle() { return std::exchange(handle_, 0); }
  // Releases the chunk now; errors are returned rather than dropped.
  absl::Status Reset();

 private:
  VmmBackend* backend_ = nullptr;
  ChunkHandle handle_ = 0;
  int device_ = 0;
  size_t size_ = 0;
};

// A reserved virtual range that frees itself. Move-only.
class VirtualRange {
 public:
  VirtualRange() = default;
  VirtualRange(VmmBackend* backend, DevicePtr base, size_t size)
      : backend_(backend), base_(base), size_(size) {}
  ~VirtualRange() { Reset().IgnoreError(); }
  VirtualRange(VirtualRange&& o) noexcept { *this = std::move(o); }
  VirtualRange& operator=(VirtualRange&& o) noexcept;
  VirtualRange(const VirtualRange&) = delete;
  VirtualRange& operator=(const VirtualRange&) = delete;

  static absl::StatusOr<VirtualRange> Reserve(VmmBackend* backend, size_t size,
                                              size_t alignment = 0,
                                              int device = kAnyDevice);

  DevicePtr base() const { return base_; }
  size_t size() const { return size_; }
  explicit operator bool() const { return size_ != 0; }
  absl::Status Reset();

 private:
  VmmBackend* backend_ = nullptr;
  DevicePtr base_ = 0;
  size_t size_ = 0;
};

// A chunk mapped (with access) at an address; unmaps itself. Does not own
// the chunk or the range. Move-only.
class Mapping {
 public:
  Mapping() = default;
  ~Mapping() { Reset().IgnoreError(); }
  Mapping(Mapping&& o) noexcept { *this = std::move(o); }
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  // Maps `chunk` (of `size` bytes) at `addr` and gives `devices` access.
  static absl::StatusOr<Mapping> Map(VmmBackend* backend, DevicePtr addr,
                                     size_t size, ChunkHandle chunk,
                                     absl::Span<const int> devices);

  DevicePtr addr() const { return addr_; }
  size_t size() const { return size_; }
  absl::Status Reset();

 private:
  Mapping(VmmBackend* backend, DevicePtr addr, size_t size)
      : backend_(backend), addr_(addr), size_(size) {}
  VmmBackend* backend_ = nullptr;
  DevicePtr addr_ = 0;
  size_t size_ = 0;
};

// --- Choosing a backend ------------------------------------------------------

struct BackendOptions {
  // "auto" (cuda when a GPU driver and device are present, else host),
  // "cuda", "host" or "accounting". The environment variable GMLAKE_BACKEND
  // overrides "auto".
  std::string kind = "auto";
  // Host and accounting backends: devices to emulate.
  int host_devices = 1;
  // Host and accounting backends: the UUID of each emulated device (empty:
  // those of the node's emulated devices 0..host_devices-1, see
  // EmulatedDeviceUuid); when given, there are as many devices. The
  // environment variable GMLAKE_HOST_VISIBLE_DEVICES ("2,0": the node's
  // emulated devices 2 and 0, in that order), as CUDA_VISIBLE_DEVICES does
  // for GPUs, decides over both.
  std::vector<std::string> host_uuids;
  // Host and accounting backends: bytes of physical memory per device
  // (CreateChunk fails with ResourceExhausted beyond it). 0: 64 GiB.
  size_t host_capacity_bytes = 0;
  // Host and accounting backends: chunk granularity. 0: 2 MiB, as on an
  // H200.
  size_t host_granularity = 0;
};

// Creates the backend `options` asks for. For "auto", also reports why it
// chose what it chose in `Describe()`.
absl::StatusOr<std::unique_ptr<VmmBackend>> CreateBackend(
    const BackendOptions& options);

}  // namespace gmlake

#endif  // GMLAKE_COMMON_VMM_H_
