// Copyright 2026 The GMLake Authors.

#include "common/host_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace gmlake {
namespace {

constexpr int kNoAccess = PROT_NONE;
constexpr int kReadWrite = PROT_READ | PROT_WRITE;
// Reserved-but-unmapped address space: no access, no swap or commit charge.
constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

std::string Errno(int err) { return std::strerror(err); }

// Raises RLIMIT_NOFILE's soft limit as far as it may go: every chunk holds a
// descriptor, and a large live set of small chunks needs tens of thousands.
// Returns the soft limit in force afterwards. Failing to raise it is not an
// error: CreateChunk reports running out, with the limit, when it happens.
uint64_t RaiseFdLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  rlim_t target = lim.rlim_max;
  if (target == RLIM_INFINITY) {
    // The kernel refuses a soft limit above fs.nr_open.
    target = 1 << 20;
    std::ifstream nr_open("/proc/sys/fs/nr_open");
    uint64_t v = 0;
    if (nr_open >> v && v > 0) target = v;
  }
  if (lim.rlim_cur < target) {
    rlimit raised = lim;
    raised.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur;
}

// Puts the reservation back over [addr, addr+size), dropping whatever was
// mapped there.
absl::Status Rereserve(DevicePtr addr, size_t size) {
  void* p = mmap(reinterpret_cast<void*>(addr), size, kNoAccess,
                 kReserveFlags | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    return absl::ResourceExhaustedError(absl::StrCat(
        "host backend: cannot restore the reservation over 0x", absl::Hex(addr),
        " (", size, " bytes): ", Errno(err),
        err == ENOMEM ? " (too many mappings? see vm.max_map_count)" : ""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostBackend>> HostBackend::Create(
    const Options& options) {
  if (absl::Status s = ValidateEmulatedOptions(options); !s.ok()) return s;
  return std::unique_ptr<HostBackend>(new HostBackend(options, RaiseFdLimit()));
}

HostBackend::HostBackend(const Options& options, uint64_t fd_limit)
    : books_("host", options), note_(options.note), fd_limit_(fd_limit) {}

HostBackend::~HostBackend() {
  // Unmapping a range drops the chunk mappings inside it too; the chunks'
  // memfds close with the books.
  for (const auto& [base, size] : books_.TakeAllRanges()) {
    munmap(reinterpret_cast<void*>(base), size);
  }
}

std::string HostBackend::Describe() const {
  std::string out =
      absl::StrCat("host backend (memfd+mmap): ", books_.DescribeDevices(),
                   ", fd limit ", fd_limit_);
  if (!note_.empty()) absl::StrAppend(&out, "; ", note_);
  return out;
}

// --- Chunks
// -------------------------------------------------------------------

absl::StatusOr<ChunkHandle> HostBackend::DoCreateChunk(int device,
                                                       size_t size) {
  return books_.CreateChunk(device, size,
                            [&] { return MakeChunkMemfd(size, "host"); });
}

absl::Status HostBackend::DoReleaseChunk(ChunkHandle chunk) {
  // Closing the memfd does not free pages still mapped somewhere: they live
  // until the last mapping goes, as with cuMemRelease.
  return books_.ReleaseChunk(chunk);
}

absl::StatusOr<UniqueFd> HostBackend::DoExportChunk(ChunkHandle chunk) {
  return books_.ExportChunk(
      chunk, [&](const ChunkRecord& c) -> absl::StatusOr<UniqueFd> {
        UniqueFd dup(fcntl(c.fd.get(), F_DUPFD_CLOEXEC, 0));
        if (!dup.valid()) {
          const int err = errno;
          return absl::ResourceExhaustedError(absl::StrCat(
              "host backend: cannot export chunk ", chunk, ": ", Errno(err),
              err == EMFILE ? "; raise RLIMIT_NOFILE" : ""));
        }
        return dup;
      });
}

absl::StatusOr<ChunkHandle> HostBackend::DoImportChunk(int fd, int device,
                                                       size_t size) {
  return books_.ImportChunk(device, size,
                            [&] { return DupChunkFd(fd, size, "host"); });
}

// --- Ranges and mappings
// --------------------------------------------------------

// One address space serves every emulated device: `device` changes nothing.
absl::StatusOr<DevicePtr> HostBackend::DoReserveRange(size_t size,
                                                      size_t alignment,
                                                      int /*device*/) {
  PassGate(&HostBackend::reserve_gate_, size);
  return books_.ReserveRange(
      size, alignment,
      [](size_t size, size_t alignment) -> absl::StatusOr<DevicePtr> {
        // Over-reserve by the alignment, then trim both ends.
        if (size > SIZE_MAX - alignment) {
          return absl::InvalidArgumentError(
              absl::StrCat("host backend: range of ", size,
                           " bytes does not fit the address space"));
        }
        const size_t total = size + alignment;
        void* p = mmap(nullptr, total, kNoAccess, kReserveFlags, -1, 0);
        if (p == MAP_FAILED) {
          return absl::ResourceExhaustedError(
              absl::StrCat("host backend: cannot reserve ", size,
                           " bytes of address space: ", Errno(errno)));
        }
        const DevicePtr start = reinterpret_cast<DevicePtr>(p);
        const DevicePtr base = (start + alignment - 1) & ~(alignment - 1);
        const size_t head = base - start;
        const size_t tail = total - head - size;
        if (head > 0) munmap(p, head);
        if (tail > 0) munmap(reinterpret_cast<void*>(base + size), tail);
        return base;
      });
}

absl::Status HostBackend::DoFreeRange(DevicePtr base, size_t size) {
  return books_.FreeRange(base, size, [&]() -> absl::Status {
    if (munmap(reinterpret_cast<void*>(base), size) != 0) {
      return absl::InternalError(
          absl::StrCat("host backend: munmap of the range at 0x",
                       absl::Hex(base), ": ", Errno(errno)));
    }
    return absl::OkStatus();
  });
}

absl::Status HostBackend::DoMap(DevicePtr addr, size_t size,
                                ChunkHandle chunk) {
  return books_.Map(
      addr, size, chunk, [&](const ChunkRecord& c) -> absl::Status {
        // PROT_NONE: like the driver, a new mapping has no
        // access until SetAccess.
        void* p = mmap(reinterpret_cast<void*>(addr), size, kNoAccess,
                       MAP_SHARED | MAP_FIXED, c.fd.get(), 0);
        if (p != MAP_FAILED) return absl::OkStatus();
        const int err = errno;
        // A failed MAP_FIXED may have dropped the
        // reservation.
        Rereserve(addr, size).IgnoreError();
        return absl::ResourceExhaustedError(absl::StrCat(
            "host backend: cannot map chunk ", chunk, " at 0x", absl::Hex(addr),
            ": ", Errno(err),
            err == ENOMEM ? " (every mapped chunk takes one of the "
                            "vm.max_map_count mappings; use larger "
                            "chunks or raise it)"
                          : ""));
      });
}

absl::Status HostBackend::DoUnmap(DevicePtr addr, size_t size) {
  return books_.Unmap(addr, size, [&] { return Rereserve(addr, size); });
}

absl::Status HostBackend::DoSetAccess(DevicePtr addr, size_t size,
                                      absl::Span<const int> devices) {
  return books_.SetAccess(addr, size, devices, [&]() -> absl::Status {
    if (mprotect(reinterpret_cast<void*>(addr), size, kReadWrite) != 0) {
      const int err = errno;
      return absl::ResourceExhaustedError(
          absl::StrCat("host backend: mprotect of 0x", absl::Hex(addr), " (",
                       size, " bytes): ", Errno(err)));
    }
    return absl::OkStatus();
  });
}

// --- Events
// -----------------------------------------------------------------------

absl::StatusOr<EventHandle> HostBackend::DoCreateEvent(int device) {
  return books_.CreateEvent(device);
}

absl::Status HostBackend::DoDestroyEvent(EventHandle event) {
  return books_.DestroyEvent(event);
}

void HostBackend::SetCaptured(StreamHandle stream, bool captured) {
  MutexLock lock(&capture_mu_);
  auto it = std::find(captured_.begin(), captured_.end(), stream);
  if (captured && it == captured_.end()) {
    captured_.push_back(stream);
    frontier_[stream].clear();
  }
  if (!captured && it != captured_.end()) {
    captured_.erase(it);
    frontier_.erase(stream);
  }
  if (captured_.empty()) node_deps_.clear();  // the graph is done
}

uint64_t HostBackend::CaptureKernel(StreamHandle stream) {
  MutexLock lock(&capture_mu_);
  std::vector<uint64_t>& frontier = frontier_[stream];
  const uint64_t node = next_node_++;
  node_deps_[node] = frontier;
  frontier = {node};
  return node;
}

void HostBackend::CaptureJoin(StreamHandle into, StreamHandle from) {
  MutexLock lock(&capture_mu_);
  std::vector<uint64_t> joined = frontier_[from];
  std::vector<uint64_t>& to = frontier_[into];
  for (uint64_t n : joined) {
    if (std::find(to.begin(), to.end(), n) == to.end()) to.push_back(n);
  }
}

absl::StatusOr<std::vector<uint64_t>> HostBackend::DoCaptureFrontier(
    StreamHandle stream) {
  MutexLock lock(&capture_mu_);
  auto it = frontier_.find(stream);
  if (it == frontier_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("stream ", stream, " is not being captured"));
  }
  return it->second;
}

absl::StatusOr<bool> HostBackend::DoCaptureFollows(
    StreamHandle stream, absl::Span<const uint64_t> nodes) {
  MutexLock lock(&capture_mu_);
  auto it = frontier_.find(stream);
  if (it == frontier_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("stream ", stream, " is not being captured"));
  }
  // The frontier's ancestors, walked back through the dependencies.
  absl::flat_hash_set<uint64_t> seen(it->second.begin(), it->second.end());
  std::vector<uint64_t> todo(it->second.begin(), it->second.end());
  while (!todo.empty()) {
    const uint64_t n = todo.back();
    todo.pop_back();
    auto d = node_deps_.find(n);
    if (d == node_deps_.end()) continue;
    for (uint64_t dep : d->second) {
      if (seen.insert(dep).second) todo.push_back(dep);
    }
  }
  for (uint64_t n : nodes) {
    if (!seen.contains(n)) return false;
  }
  return true;
}

absl::Status HostBackend::CheckCapture(StreamHandle stream, bool any,
                                       const char* call) {
  MutexLock lock(&capture_mu_);
  if (captured_.empty()) return absl::OkStatus();
  if (!any && std::find(captured_.begin(), captured_.end(), stream) ==
                  captured_.end()) {
    return absl::OkStatus();
  }
  capture_violations_.fetch_add(1, std::memory_order_relaxed);
  return absl::FailedPreconditionError(absl::StrCat(
      call, " while a stream is captured (stream ", stream,
      "): CUDA forbids it during graph capture; the allocator must defer it"));
}

void HostBackend::SetRecordEventGate(std::function<void(StreamHandle)> gate) {
  MutexLock lock(&gate_mu_);
  record_gate_ = std::move(gate);
}

void HostBackend::SetReserveGate(std::function<void(size_t)> gate) {
  MutexLock lock(&gate_mu_);
  reserve_gate_ = std::move(gate);
}

absl::Status HostBackend::DoRecordEvent(EventHandle event,
                                        StreamHandle stream) {
  PassGate(&HostBackend::record_gate_, stream);
  if (absl::Status s = CheckCapture(stream, false, "RecordEvent"); !s.ok()) {
    return s;
  }
  return books_.RecordEvent(event, stream);
}

absl::StatusOr<bool> HostBackend::DoQueryEvent(EventHandle event) {
  if (absl::Status s = CheckCapture(0, true, "QueryEvent"); !s.ok()) return s;
  absl::StatusOr<absl::Time> done = books_.EventDoneAt(event);
  if (!done.ok()) return done.status();
  return *done == absl::InfinitePast() || absl::Now() >= *done;
}

absl::Status HostBackend::DoWaitEventOnStream(StreamHandle stream,
                                              EventHandle event) {
  if (absl::Status s = CheckCapture(stream, false, "WaitEventOnStream");
      !s.ok()) {
    return s;
  }
  return books_.EventDoneAt(event).status();
}

absl::Status HostBackend::DoSyncEvent(EventHandle event) {
  if (absl::Status s = CheckCapture(0, true, "SyncEvent"); !s.ok()) return s;
  return books_.WaitForEvent(event);
}

// --- Memory access
// ------------------------------------------------------------------

absl::Status HostBackend::Fill(DevicePtr addr, uint8_t value, size_t size) {
  return books_.WithAccessible(addr, size, "Fill", [&] {
    std::memset(reinterpret_cast<void*>(addr), value, size);
  });
}

absl::Status HostBackend::CopyToHost(void* dst, DevicePtr src, size_t size) {
  return books_.WithAccessible(src, size, "CopyToHost", [&] {
    std::memcpy(dst, reinterpret_cast<const void*>(src), size);
  });
}

absl::Status HostBackend::CopyFromHost(DevicePtr dst, const void* src,
                                       size_t size) {
  return books_.WithAccessible(dst, size, "CopyFromHost", [&] {
    std::memcpy(reinterpret_cast<void*>(dst), src, size);
  });
}

}  // namespace gmlake
