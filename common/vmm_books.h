// Copyright 2026 The GMLake Authors.
//
// VmmBooks: the book-keeping of the VMM layer that does not depend on where
// the memory lives. The host backend (memfd + mmap) and the accounting
// backend (no memory at all) both keep their chunks, reserved ranges,
// mappings, per-device capacity and events here, so they validate every call
// the same way and fail with the same errors; they differ only in the side
// effect they perform once a call has been validated.
//
// Every mutating method takes the side effect as a callback. The books check
// the arguments against their state, run the callback with their lock held,
// and change their state only if the callback succeeded. Holding the lock
// across the effect keeps "check, then mmap" atomic: two threads cannot map
// the same address, and nothing can be unmapped while Fill copies into it.
//
// Error codes (the contract of tests/vmm_conformance.h):
//   InvalidArgument     bad size, alignment, device, address outside every
//                       reserved range, size that does not match the chunk,
//                       a descriptor that is not a chunk of the right size.
//   NotFound            a chunk, range or event handle that is not live
//                       (never made here, or released/freed/destroyed).
//   FailedPrecondition  the state forbids it: already mapped, not mapped,
//                       no access, range still has mappings.
//   ResourceExhausted   the device's capacity is used up.

#ifndef GMLAKE_COMMON_VMM_BOOKS_H_
#define GMLAKE_COMMON_VMM_BOOKS_H_

#include <fcntl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "common/vmm.h"

namespace gmlake {

// What the emulated backends (host, accounting) are made with.
struct EmulatedBackendOptions {
  // Devices to emulate (1..64).
  int devices = 1;
  // Bytes of physical memory per device; CreateChunk fails with
  // ResourceExhausted beyond it.
  size_t capacity_bytes = size_t{64} << 30;  // 64 GiB
  // Chunk size unit and virtual address alignment: a power of two, at least
  // the page size.
  size_t granularity = size_t{2} << 20;  // 2 MiB, as on an H200
  // Appended to Describe(), e.g. why the factory chose this backend.
  std::string note;
  // Each device's UUID (empty: EmulatedDeviceUuid(0..devices-1)); as many
  // as devices, distinct, none empty. Two processes that give a device the
  // same UUID mean the same device, whatever number each gives it.
  std::vector<std::string> uuids;
};

// Checks `options` (InvalidArgument naming the bad field).
absl::Status ValidateEmulatedOptions(const EmulatedBackendOptions& options);

// The UUID of the node's emulated device `node_device`, stable across
// processes and runs: "GPU-686f7374-0000-0000-0000-000000000002" for 2
// ("host" in hex, then the number).
std::string EmulatedDeviceUuid(int node_device);

// What the books remember about a live chunk.
struct ChunkRecord {
  int device = 0;
  size_t size = 0;
  // Imported chunks belong to the exporter's capacity, not to ours.
  bool imported = false;
  // The backend's descriptor for the chunk's memory (the host backend's
  // memfd); invalid where the backend has none.
  UniqueFd fd;
};

class VmmBooks {
 public:
  // `backend_name` starts every error message ("host backend: ...").
  VmmBooks(std::string backend_name, const EmulatedBackendOptions& options);
  VmmBooks(const VmmBooks&) = delete;
  VmmBooks& operator=(const VmmBooks&) = delete;

  int devices() const { return devices_; }
  // Empty for a device that does not exist.
  std::string device_uuid(int device) const {
    return device >= 0 && device < devices_ ? uuids_[device] : std::string();
  }
  size_t capacity_bytes() const { return capacity_; }
  size_t granularity() const { return granularity_; }

  // Side effects. Each runs with the books' lock held, after validation;
  // when it fails, the books stay as they were and its error is returned.
  using MakeFd = absl::FunctionRef<absl::StatusOr<UniqueFd>()>;
  using ExportFd =
      absl::FunctionRef<absl::StatusOr<UniqueFd>(const ChunkRecord& chunk)>;
  using ReserveFn = absl::FunctionRef<absl::StatusOr<DevicePtr>(
      size_t size, size_t alignment)>;
  using MapFn = absl::FunctionRef<absl::Status(const ChunkRecord& chunk)>;
  using Effect = absl::FunctionRef<absl::Status()>;

  // --- Chunks ---------------------------------------------------------------

  // Validates device and size, charges `size` to the device's capacity and
  // records a chunk whose memory `make` provides.
  absl::StatusOr<ChunkHandle> CreateChunk(int device, size_t size, MakeFd make);
  // Records an imported chunk (charged to no capacity) whose descriptor
  // `make` provides.
  absl::StatusOr<ChunkHandle> ImportChunk(int device, size_t size, MakeFd make);
  // Forgets a chunk (closing its descriptor) and gives its bytes back to the
  // device's capacity. Mappings of it stay valid until unmapped, as with the
  // driver. NotFound for a chunk that is not live (e.g. released twice).
  absl::Status ReleaseChunk(ChunkHandle chunk);
  // Runs `fn` on a live chunk's record and returns what it returns.
  absl::StatusOr<UniqueFd> ExportChunk(ChunkHandle chunk, ExportFd fn);

  // --- Virtual ranges and mappings
  // ---------------------------------------------

  // Validates size and alignment (0: granularity; else a power of two, raised
  // to the granularity) and records the range `reserve` makes.
  absl::StatusOr<DevicePtr> ReserveRange(size_t size, size_t alignment,
                                         ReserveFn reserve);
  // Forgets a range: exactly one from ReserveRange, with nothing mapped in
  // it. `free` releases the address space.
  absl::Status FreeRange(DevicePtr base, size_t size, Effect free);
  // Records `chunk` mapped whole at `addr`: granularity-aligned, inside one
  // reserved range, overlapping no mapping. `map` does the mapping.
  absl::Status Map(DevicePtr addr, size_t size, ChunkHandle chunk, MapFn map);
  // Forgets the mappings that exactly cover [addr, addr+size) (whole chunks,
  // no gaps). `unmap` removes them.
  absl::Status Unmap(DevicePtr addr, size_t size, Effect unmap);
  // Marks the mappings that exactly cover [addr, addr+size) accessible to
  // `devices` (non-empty, each a valid device). `protect` grants the access.
  absl::Status SetAccess(DevicePtr addr, size_t size,
                         absl::Span<const int> devices, Effect protect);
  // Runs `fn` if every byte of [addr, addr+size) is mapped with access, with
  // a shared lock held so nothing is unmapped meanwhile. `what` names the
  // operation in errors ("Fill").
  absl::Status WithAccessible(DevicePtr addr, size_t size,
                              absl::string_view what,
                              absl::FunctionRef<void()> fn);

  // --- Events
  // -------------------------------------------------------------------

  absl::StatusOr<EventHandle> CreateEvent(int device);
  absl::Status DestroyEvent(EventHandle event);
  // Records the event: it completes `event_delay` from now.
  absl::Status RecordEvent(EventHandle event, StreamHandle stream);
  // When the work before the event's last record completes (InfinitePast
  // when never recorded, or recorded with no delay).
  absl::StatusOr<absl::Time> EventDoneAt(EventHandle event);
  // Waits until the work before the event's last record completes.
  absl::Status WaitForEvent(EventHandle event);
  // Makes every later record complete `delay` after it happens (for tests
  // of code that waits on events). Zero: at once.
  void set_event_delay(absl::Duration delay);
  // For tests that must not depend on how fast the machine is: every later
  // record completes only when FinishQueuedWork() is called, as if the
  // streams were busy until then.
  void HoldQueuedWork();
  // Completes every event held by HoldQueuedWork, wakes their waiters and
  // ends the hold.
  void FinishQueuedWork();
  // Threads waiting in WaitForEvent now (tests wait for a waiter to block).
  int event_waiters() const;

  // --- Totals
  // -------------------------------------------------------------------

  // Bytes charged to `device` (0 for a bad device).
  size_t used_bytes(int device) const;
  size_t live_chunks() const;
  size_t live_mappings() const;
  size_t live_ranges() const;
  // "1 device, 64.00 GiB capacity, 2.00 MiB chunks" (each device's
  // capacity when there are several): the middle of Describe().
  std::string DescribeDevices() const;
  // Forgets every range and mapping and returns the ranges, for a backend's
  // destructor to release their address space.
  std::vector<std::pair<DevicePtr, size_t>> TakeAllRanges();

 private:
  struct MappingRecord {
    size_t size = 0;
    ChunkHandle chunk = 0;
    bool access = false;
  };
  struct EventRecord {
    int device = 0;
    absl::Time done_at = absl::InfinitePast();
  };

  // The error prefix: "host backend: ".
  std::string Prefix() const { return name_ + " backend: "; }
  absl::Status CheckDevice(int device) const;
  absl::Status CheckChunkSize(size_t size, absl::string_view what) const;
  // Checks that [addr, addr+size) is exactly covered by whole mappings, and
  // returns them in address order.
  absl::StatusOr<std::vector<DevicePtr>> CoveringMappings(
      DevicePtr addr, size_t size, absl::string_view what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const int devices_;
  const std::vector<std::string> uuids_;
  const size_t capacity_;
  const size_t granularity_;

  mutable Mutex mu_;
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<size_t> used_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ChunkHandle, ChunkRecord> chunks_ ABSL_GUARDED_BY(mu_);
  // Ordered: finding the range or mapping that contains an address needs
  // the last entry at or below it.
  absl::btree_map<DevicePtr, size_t> ranges_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<DevicePtr, MappingRecord> mappings_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<EventHandle, EventRecord> events_ ABSL_GUARDED_BY(mu_);
  absl::Duration event_delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  bool hold_queued_work_ ABSL_GUARDED_BY(mu_) = false;
  int event_waiters_ ABSL_GUARDED_BY(mu_) = 0;
  CondVar event_done_;  // signalled by FinishQueuedWork
};

// --- Chunk descriptors, shared by the emulated backends ----------------------

// Seals every chunk memfd carries: its size is fixed for good.
inline constexpr int kChunkSeals = F_SEAL_SHRINK | F_SEAL_GROW;

// A new memfd (MFD_CLOEXEC) of `size` bytes, sealed with kChunkSeals and
// F_SEAL_SEAL; its pages are allocated only when touched. ResourceExhausted
// when the process is out of descriptors.
absl::StatusOr<UniqueFd> MakeChunkMemfd(size_t size,
                                        absl::string_view backend_name);

// A close-on-exec duplicate of `fd` after checking that it is a regular file
// (memfd) sealed with kChunkSeals and of exactly `size` bytes:
// InvalidArgument otherwise.
absl::StatusOr<UniqueFd> DupChunkFd(int fd, size_t size,
                                    absl::string_view backend_name);

}  // namespace gmlake

#endif  // GMLAKE_COMMON_VMM_BOOKS_H_
