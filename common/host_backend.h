// Copyright 2026 The GMLake Authors.
//
// HostBackend: the VMM layer on the CPU, with the semantics of CUDA VMM.
//
//   chunk           a memfd (MFD_CLOEXEC) of the chunk's size, sealed
//                   against shrinking, growing and further seals (no holder
//                   can SIGBUS another's mapping); its pages are allocated
//                   only when touched, so a large live set that is mostly
//                   untouched costs no memory.
//   export/import   a duplicate of the memfd; real descriptors that can be
//                   sent to other processes (SCM_RIGHTS) and mapped there.
//                   Import takes only a sealed memfd of the size asked.
//   virtual range   an anonymous PROT_NONE, MAP_NORESERVE mapping, aligned.
//   map             the memfd mmap'ed MAP_SHARED|MAP_FIXED over part of a
//                   range, PROT_NONE: like the driver, no access until
//                   SetAccess (mprotect read/write).
//   unmap           the reservation mapped back over it; access is lost.
//   events          complete at once, or after an injected delay.
//
// Every call is validated against the books (common/vmm_books.h) first, so
// bad arguments return errors instead of faulting, and Fill/Copy* check that
// the memory is mapped with access before touching it.
//
// Every chunk holds one descriptor and every mapped chunk one VMA: Create
// raises RLIMIT_NOFILE's soft limit to the hard one, and CreateChunk returns
// ResourceExhausted (not a crash) when descriptors run out. With 2 MiB chunks,
// a hard limit of 20000 carries about 39 GiB; vm.max_map_count (65530 by
// default) allows 127 GiB mapped.

#ifndef GMLAKE_COMMON_HOST_BACKEND_H_
#define GMLAKE_COMMON_HOST_BACKEND_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "common/vmm.h"
#include "common/vmm_books.h"

namespace gmlake {

class HostBackend : public VmmBackend {
 public:
  using Options = EmulatedBackendOptions;

  // Makes a backend (InvalidArgument for bad options) and raises this
  // process's RLIMIT_NOFILE soft limit to its hard limit.
  static absl::StatusOr<std::unique_ptr<HostBackend>> Create(
      const Options& options);

  // Releases the address space of every range still reserved and closes
  // every chunk still live.
  ~HostBackend() override;

  absl::string_view name() const override { return "host"; }
  // "host backend (memfd+mmap): 1 device, 64 GiB capacity, 2 MiB chunks,
  // fd limit 20000", then "; <note>" when the options carry one.
  std::string Describe() const override;
  int device_count() const override { return books_.devices(); }
  std::string device_uuid(int device) const override {
    return books_.device_uuid(device);
  }
  size_t granularity(int /*device*/) const override {
    return books_.granularity();
  }
  // The emulated device's size (its capacity).
  uint64_t device_memory_bytes(int /*device*/) const override {
    return books_.capacity_bytes();
  }

  // memset/memcpy, after checking that every byte is mapped with access
  // (FailedPrecondition otherwise).
  absl::Status Fill(DevicePtr addr, uint8_t value, size_t size) override;
  absl::Status CopyToHost(void* dst, DevicePtr src, size_t size) override;
  absl::Status CopyFromHost(DevicePtr dst, const void* src,
                            size_t size) override;

  // Makes each later RecordEvent complete `delay` after it: QueryEvent says
  // false until then and SyncEvent sleeps until then. Zero: at once.
  void set_event_delay(absl::Duration delay) { books_.set_event_delay(delay); }
  // Holds every later RecordEvent until FinishQueuedWork(), as streams busy
  // until then: for tests whose outcome must not depend on the clock.
  void HoldQueuedWork() { books_.HoldQueuedWork(); }
  void FinishQueuedWork() { books_.FinishQueuedWork(); }
  // Threads blocked in SyncEvent now.
  int event_waiters() const { return books_.event_waiters(); }
  // Calls `gate` (with no lock of the backend held) at the start of every
  // later RecordEvent, with its stream, so a test can hold the recording
  // thread there: a gate for the windows where the allocator drops its lock
  // to record (tests/time_scale.h has the deadlines). Empty: none.
  void SetRecordEventGate(std::function<void(StreamHandle)> gate);
  // The same at the start of every later ReserveRange, with its size: for
  // the window where the allocator drops its lock to reserve an arena.
  void SetReserveGate(std::function<void(size_t)> gate);

  // Stream capture, as CUDA graphs do it: while any stream is marked
  // captured, an event recorded on a captured stream, any event query or
  // sync, and a wait of a captured stream for an event are what the driver
  // forbids (cudaErrorStreamCaptureUnsupported/Invalidated). Each is
  // counted in capture_violations() and fails; tests assert it stays 0.
  void SetCaptured(StreamHandle stream, bool captured);
  uint64_t capture_violations() const {
    return capture_violations_.load(std::memory_order_relaxed);
  }
  // A capture's dependency graph, as the driver builds it from the work a
  // program captures: a kernel captured on `stream` (a node depending on
  // the stream's frontier, which it then replaces), and `into` waiting for
  // `from` (torch's wait_stream: `from`'s frontier joins `into`'s). Both
  // streams must be captured. Host streams run nothing else, so tests call
  // these where a program would launch and join.
  uint64_t CaptureKernel(StreamHandle stream);
  void CaptureJoin(StreamHandle into, StreamHandle from);

  // Bytes of capacity in use on `device` (imported chunks count nothing).
  size_t used_bytes(int device) const { return books_.used_bytes(device); }
  // RLIMIT_NOFILE's soft limit after Create raised it.
  uint64_t fd_limit() const { return fd_limit_; }

 protected:
  absl::StatusOr<ChunkHandle> DoCreateChunk(int device, size_t size) override;
  absl::Status DoReleaseChunk(ChunkHandle chunk) override;
  absl::StatusOr<UniqueFd> DoExportChunk(ChunkHandle chunk) override;
  absl::StatusOr<ChunkHandle> DoImportChunk(int fd, int device,
                                            size_t size) override;
  absl::StatusOr<DevicePtr> DoReserveRange(size_t size, size_t alignment,
                                           int device) override;
  absl::Status DoFreeRange(DevicePtr base, size_t size) override;
  absl::Status DoMap(DevicePtr addr, size_t size, ChunkHandle chunk) override;
  absl::Status DoUnmap(DevicePtr addr, size_t size) override;
  absl::Status DoSetAccess(DevicePtr addr, size_t size,
                           absl::Span<const int> devices) override;
  absl::StatusOr<EventHandle> DoCreateEvent(int device) override;
  absl::Status DoDestroyEvent(EventHandle event) override;
  absl::Status DoRecordEvent(EventHandle event, StreamHandle stream) override;
  absl::StatusOr<bool> DoQueryEvent(EventHandle event) override;
  absl::Status DoSyncEvent(EventHandle event) override;
  // Host streams run nothing, so there is nothing to order; the event must
  // still be live.
  absl::Status DoWaitEventOnStream(StreamHandle stream,
                                   EventHandle event) override;
  absl::StatusOr<std::vector<uint64_t>> DoCaptureFrontier(
      StreamHandle stream) override;
  absl::StatusOr<bool> DoCaptureFollows(
      StreamHandle stream, absl::Span<const uint64_t> nodes) override;

 private:
  HostBackend(const Options& options, uint64_t fd_limit);

  // The violation (and its count) when `stream` (0: none in particular)
  // may not be used for an event call now.
  absl::Status CheckCapture(StreamHandle stream, bool any, const char* call);

  // Calls the gate `which` with `arg`: copied under gate_mu_, called
  // without it (a gate may block for as long as its test wants).
  template <typename Arg>
  void PassGate(std::function<void(Arg)> HostBackend::*which, Arg arg) {
    std::function<void(Arg)> gate;
    {
      MutexLock lock(&gate_mu_);
      gate = this->*which;
    }
    if (gate) gate(arg);
  }

  VmmBooks books_;
  Mutex capture_mu_;  // common/mutex.h: seen by ThreadSanitizer
  std::vector<StreamHandle> captured_ ABSL_GUARDED_BY(capture_mu_);
  // The capture graph: each captured stream's frontier, each node's
  // dependencies (nodes numbered from 1).
  absl::flat_hash_map<StreamHandle, std::vector<uint64_t>> frontier_
      ABSL_GUARDED_BY(capture_mu_);
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> node_deps_
      ABSL_GUARDED_BY(capture_mu_);
  uint64_t next_node_ ABSL_GUARDED_BY(capture_mu_) = 1;
  std::atomic<uint64_t> capture_violations_{0};
  Mutex gate_mu_;
  std::function<void(StreamHandle)> record_gate_ ABSL_GUARDED_BY(gate_mu_);
  std::function<void(size_t)> reserve_gate_ ABSL_GUARDED_BY(gate_mu_);
  const std::string note_;
  const uint64_t fd_limit_;
};

}  // namespace gmlake

#endif  // GMLAKE_COMMON_HOST_BACKEND_H_
