// Copyright 2026 The GMLake Authors.

#include "common/vmm_books.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/bytes.h"
#include "common/mutex.h"

namespace gmlake {
namespace {

std::string Addr(DevicePtr p) { return absl::StrCat("0x", absl::Hex(p)); }

bool IsPowerOfTwo(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

// [addr, addr+size) as text, for errors.
std::string RangeText(DevicePtr addr, size_t size) {
  return absl::StrCat("[", Addr(addr), ", +", size, ")");
}

}  // namespace

absl::Status ValidateEmulatedOptions(const EmulatedBackendOptions& options) {
  if (options.devices < 1 || options.devices > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "emulated backend: devices must be 1..64, got ", options.devices));
  }
  if (!options.uuids.empty()) {
    if (options.uuids.size() != static_cast<size_t>(options.devices)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "emulated backend: ", options.uuids.size(), " UUIDs for ",
          options.devices, " devices; give one per device"));
    }
    for (size_t i = 0; i < options.uuids.size(); ++i) {
      if (options.uuids[i].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("emulated backend: device ", i, "'s UUID is empty"));
      }
      for (size_t j = 0; j < i; ++j) {
        if (options.uuids[i] == options.uuids[j]) {
          return absl::InvalidArgumentError(
              absl::StrCat("emulated backend: devices ", j, " and ", i,
                           " have the same UUID ", options.uuids[i]));
        }
      }
    }
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (!IsPowerOfTwo(options.granularity) || options.granularity < page) {
    return absl::InvalidArgumentError(absl::StrCat(
        "emulated backend: granularity must be a power of two of at least the "
        "page size (",
        page, " bytes), got ", options.granularity));
  }
  return absl::OkStatus();
}

std::string EmulatedDeviceUuid(int node_device) {
  return absl::StrFormat("GPU-686f7374-0000-0000-0000-%012x", node_device);
}

namespace {

std::vector<std::string> UuidsOf(const EmulatedBackendOptions& options) {
  if (!options.uuids.empty()) return options.uuids;
  std::vector<std::string> uuids;
  for (int i = 0; i < options.devices; ++i) {
    uuids.push_back(EmulatedDeviceUuid(i));
  }
  return uuids;
}

}  // namespace

VmmBooks::VmmBooks(std::string backend_name,
                   const EmulatedBackendOptions& options)
    : name_(std::move(backend_name)),
      devices_(options.devices),
      uuids_(UuidsOf(options)),
      capacity_(options.capacity_bytes),
      granularity_(options.granularity),
      used_(static_cast<size_t>(options.devices), 0) {}

absl::Status VmmBooks::CheckDevice(int device) const {
  if (device < 0 || device >= devices_) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(), "device ", device, " does not exist (", devices_,
                     devices_ == 1 ? " device" : " devices", ")"));
  }
  return absl::OkStatus();
}

absl::Status VmmBooks::CheckChunkSize(size_t size,
                                      absl::string_view what) const {
  if (size == 0 || size % granularity_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(), what, " size ", size,
                     " is not a positive multiple of the granularity ",
                     granularity_, " (", FormatBytes(granularity_), ")"));
  }
  return absl::OkStatus();
}

// --- Chunks
// -------------------------------------------------------------------

absl::StatusOr<ChunkHandle> VmmBooks::CreateChunk(int device, size_t size,
                                                  MakeFd make) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  if (absl::Status s = CheckChunkSize(size, "chunk"); !s.ok()) return s;
  MutexLock lock(&mu_);
  const size_t free = capacity_ - used_[device];
  if (size > free) {
    return absl::ResourceExhaustedError(absl::StrCat(
        Prefix(), "device ", device, " out of memory: asked ", size, " bytes, ",
        free, " of ", capacity_,
        " free; raise host_capacity_bytes / GMLAKE_HOST_CAPACITY"));
  }
  absl::StatusOr<UniqueFd> fd = make();
  if (!fd.ok()) return fd.status();
  const ChunkHandle handle = next_handle_++;
  ChunkRecord& r = chunks_[handle];
  r.device = device;
  r.size = size;
  r.fd = *std::move(fd);
  used_[device] += size;
  return handle;
}

absl::StatusOr<ChunkHandle> VmmBooks::ImportChunk(int device, size_t size,
                                                  MakeFd make) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  if (absl::Status s = CheckChunkSize(size, "imported chunk"); !s.ok()) {
    return s;
  }
  MutexLock lock(&mu_);
  absl::StatusOr<UniqueFd> fd = make();
  if (!fd.ok()) return fd.status();
  const ChunkHandle handle = next_handle_++;
  ChunkRecord& r = chunks_[handle];
  r.device = device;
  r.size = size;
  r.imported = true;
  r.fd = *std::move(fd);
  return handle;
}

absl::Status VmmBooks::ReleaseChunk(ChunkHandle chunk) {
  MutexLock lock(&mu_);
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) {
    return absl::NotFoundError(
        absl::StrCat(Prefix(), "chunk ", chunk,
                     " is not live (never created or imported here, or "
                     "released already)"));
  }
  if (!it->second.imported) used_[it->second.device] -= it->second.size;
  chunks_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> VmmBooks::ExportChunk(ChunkHandle chunk, ExportFd fn) {
  MutexLock lock(&mu_);
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) {
    return absl::NotFoundError(absl::StrCat(
        Prefix(), "cannot export chunk ", chunk,
        ": not live (never created or imported here, or released already)"));
  }
  return fn(it->second);
}

// --- Ranges and mappings
// --------------------------------------------------------

absl::StatusOr<DevicePtr> VmmBooks::ReserveRange(size_t size, size_t alignment,
                                                 ReserveFn reserve) {
  if (absl::Status s = CheckChunkSize(size, "range"); !s.ok()) return s;
  if (alignment == 0) alignment = granularity_;
  if (!IsPowerOfTwo(alignment)) {
    return absl::InvalidArgumentError(absl::StrCat(
        Prefix(), "range alignment ", alignment, " is not a power of two"));
  }
  if (alignment < granularity_) alignment = granularity_;
  MutexLock lock(&mu_);
  absl::StatusOr<DevicePtr> base = reserve(size, alignment);
  if (!base.ok()) return base.status();
  // The effect must hand out fresh, aligned space; anything else is a bug in
  // the backend, not the caller's fault.
  auto next = ranges_.lower_bound(*base);
  const bool overlaps_next =
      next != ranges_.end() && next->first < *base + size;
  const bool overlaps_prev =
      next != ranges_.begin() &&
      std::prev(next)->first + std::prev(next)->second > *base;
  if (*base % alignment != 0 || overlaps_next || overlaps_prev) {
    return absl::InternalError(
        absl::StrCat(Prefix(), "reserved ", RangeText(*base, size),
                     " is misaligned or overlaps another range"));
  }
  ranges_.emplace(*base, size);
  return *base;
}

absl::Status VmmBooks::FreeRange(DevicePtr base, size_t size, Effect free) {
  MutexLock lock(&mu_);
  auto it = ranges_.find(base);
  if (it == ranges_.end()) {
    return absl::NotFoundError(
        absl::StrCat(Prefix(), "no reserved range starts at ", Addr(base),
                     " (never reserved here, or freed already)"));
  }
  if (it->second != size) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(), "the range at ", Addr(base), " has ", it->second,
                     " bytes, not ", size, "; free it whole"));
  }
  size_t mapped = 0;
  for (auto m = mappings_.lower_bound(base);
       m != mappings_.end() && m->first < base + size; ++m) {
    ++mapped;
  }
  if (mapped > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(Prefix(), "cannot free the range at ", Addr(base), ": ",
                     mapped, " chunk(s) still mapped in it; unmap them first"));
  }
  if (absl::Status s = free(); !s.ok()) return s;
  ranges_.erase(it);
  return absl::OkStatus();
}

absl::Status VmmBooks::Map(DevicePtr addr, size_t size, ChunkHandle chunk,
                           MapFn map) {
  MutexLock lock(&mu_);
  auto c = chunks_.find(chunk);
  if (c == chunks_.end()) {
    return absl::NotFoundError(absl::StrCat(
        Prefix(), "cannot map chunk ", chunk,
        ": not live (never created or imported here, or released already)"));
  }
  if (size != c->second.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        Prefix(), "map size ", size, " does not match chunk ", chunk,
        "'s size ", c->second.size, "; a chunk is mapped whole"));
  }
  if (addr % granularity_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(), "map address ", Addr(addr),
                     " is not aligned to the granularity ", granularity_));
  }
  auto r = ranges_.upper_bound(addr);
  if (r == ranges_.begin() ||
      addr - std::prev(r)->first > std::prev(r)->second ||
      std::prev(r)->second - (addr - std::prev(r)->first) < size) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(), "cannot map at ", RangeText(addr, size),
                     ": not inside a reserved range; reserve it first"));
  }
  auto next = mappings_.lower_bound(addr);
  if (next != mappings_.end() && next->first < addr + size) {
    return absl::FailedPreconditionError(
        absl::StrCat(Prefix(), "cannot map at ", RangeText(addr, size),
                     ": chunk ", next->second.chunk, " is already mapped at ",
                     Addr(next->first), "; unmap it first"));
  }
  if (next != mappings_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > addr) {
      return absl::FailedPreconditionError(
          absl::StrCat(Prefix(), "cannot map at ", RangeText(addr, size),
                       ": chunk ", prev->second.chunk, " is already mapped at ",
                       Addr(prev->first), "; unmap it first"));
    }
  }
  if (absl::Status s = map(c->second); !s.ok()) return s;
  mappings_.emplace(addr, MappingRecord{size, chunk, false});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DevicePtr>> VmmBooks::CoveringMappings(
    DevicePtr addr, size_t size, absl::string_view what) const {
  if (size == 0 || addr % granularity_ != 0 || size % granularity_ != 0 ||
      addr > std::numeric_limits<DevicePtr>::max() - size) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(), what, " ", RangeText(addr, size),
                     ": address and size must be multiples of the granularity ",
                     granularity_, " and the size positive"));
  }
  std::vector<DevicePtr> out;
  auto it = mappings_.find(addr);
  if (it == mappings_.end()) {
    auto after = mappings_.upper_bound(addr);
    if (after != mappings_.begin()) {
      auto prev = std::prev(after);
      if (prev->first + prev->second.size > addr) {
        return absl::InvalidArgumentError(absl::StrCat(
            Prefix(), what, " ", RangeText(addr, size),
            ": starts inside chunk ", prev->second.chunk, " mapped at ",
            Addr(prev->first), "; chunks are handled whole"));
      }
    }
    return absl::FailedPreconditionError(
        absl::StrCat(Prefix(), what, " ", RangeText(addr, size),
                     ": nothing is mapped at ", Addr(addr)));
  }
  const DevicePtr end = addr + size;
  DevicePtr pos = addr;
  while (pos < end) {
    if (it == mappings_.end() || it->first != pos) {
      return absl::FailedPreconditionError(
          absl::StrCat(Prefix(), what, " ", RangeText(addr, size),
                       ": nothing is mapped at ", Addr(pos)));
    }
    if (it->second.size > end - pos) {
      return absl::InvalidArgumentError(
          absl::StrCat(Prefix(), what, " ", RangeText(addr, size),
                       ": ends inside chunk ", it->second.chunk, " mapped at ",
                       Addr(pos), "; chunks are handled whole"));
    }
    out.push_back(pos);
    pos += it->second.size;
    ++it;
  }
  return out;
}

absl::Status VmmBooks::Unmap(DevicePtr addr, size_t size, Effect unmap) {
  MutexLock lock(&mu_);
  absl::StatusOr<std::vector<DevicePtr>> covered =
      CoveringMappings(addr, size, "unmap");
  if (!covered.ok()) return covered.status();
  if (absl::Status s = unmap(); !s.ok()) return s;
  for (DevicePtr p : *covered) mappings_.erase(p);
  return absl::OkStatus();
}

absl::Status VmmBooks::SetAccess(DevicePtr addr, size_t size,
                                 absl::Span<const int> devices,
                                 Effect protect) {
  if (devices.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(), "set access: no device given"));
  }
  for (int d : devices) {
    if (absl::Status s = CheckDevice(d); !s.ok()) return s;
  }
  MutexLock lock(&mu_);
  absl::StatusOr<std::vector<DevicePtr>> covered =
      CoveringMappings(addr, size, "set access");
  if (!covered.ok()) return covered.status();
  if (absl::Status s = protect(); !s.ok()) return s;
  for (DevicePtr p : *covered) mappings_[p].access = true;
  return absl::OkStatus();
}

absl::Status VmmBooks::WithAccessible(DevicePtr addr, size_t size,
                                      absl::string_view what,
                                      absl::FunctionRef<void()> fn) {
  if (size == 0) return absl::OkStatus();
  if (addr > std::numeric_limits<DevicePtr>::max() - size) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(), what, " ", RangeText(addr, size),
                     ": wraps around the address space"));
  }
  ReaderMutexLock lock(&mu_);
  const DevicePtr end = addr + size;
  auto it = mappings_.upper_bound(addr);
  if (it == mappings_.begin() ||
      std::prev(it)->first + std::prev(it)->second.size <= addr) {
    return absl::FailedPreconditionError(
        absl::StrCat(Prefix(), what, " ", RangeText(addr, size), ": ",
                     Addr(addr), " is not mapped"));
  }
  --it;
  while (true) {
    if (!it->second.access) {
      return absl::FailedPreconditionError(
          absl::StrCat(Prefix(), what, " ", RangeText(addr, size), ": chunk ",
                       it->second.chunk, " mapped at ", Addr(it->first),
                       " has no access; call SetAccess after every Map"));
    }
    const DevicePtr mapped_end = it->first + it->second.size;
    if (mapped_end >= end) break;
    ++it;
    if (it == mappings_.end() || it->first != mapped_end) {
      return absl::FailedPreconditionError(
          absl::StrCat(Prefix(), what, " ", RangeText(addr, size), ": ",
                       Addr(mapped_end), " is not mapped"));
    }
  }
  fn();
  return absl::OkStatus();
}

// --- Events
// -----------------------------------------------------------------------

absl::StatusOr<EventHandle> VmmBooks::CreateEvent(int device) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  MutexLock lock(&mu_);
  const EventHandle handle = next_handle_++;
  events_[handle].device = device;
  return handle;
}

absl::Status VmmBooks::DestroyEvent(EventHandle event) {
  MutexLock lock(&mu_);
  if (events_.erase(event) == 0) {
    return absl::NotFoundError(absl::StrCat(
        Prefix(), "event ", event,
        " is not live (never created here, or destroyed already)"));
  }
  return absl::OkStatus();
}

absl::Status VmmBooks::RecordEvent(EventHandle event, StreamHandle /*stream*/) {
  MutexLock lock(&mu_);
  auto it = events_.find(event);
  if (it == events_.end()) {
    return absl::NotFoundError(
        absl::StrCat(Prefix(), "cannot record event ", event,
                     ": not live (never created here, or destroyed already)"));
  }
  // Reading the clock only when a delay is set keeps the accounting
  // backend's replays free of it.
  if (hold_queued_work_) {
    it->second.done_at = absl::InfiniteFuture();
  } else {
    it->second.done_at = event_delay_ == absl::ZeroDuration()
                             ? absl::InfinitePast()
                             : absl::Now() + event_delay_;
  }
  return absl::OkStatus();
}

absl::Status VmmBooks::WaitForEvent(EventHandle event) {
  MutexLock lock(&mu_);
  ++event_waiters_;
  absl::Status status;
  while (true) {
    auto it = events_.find(event);
    if (it == events_.end()) {
      status = absl::NotFoundError(absl::StrCat(
          Prefix(), "event ", event,
          " is not live (never created here, or destroyed already)"));
      break;
    }
    const absl::Time done = it->second.done_at;
    if (done == absl::InfinitePast() || absl::Now() >= done) break;
    if (done == absl::InfiniteFuture()) {
      event_done_.Wait(&mu_);
    } else {
      event_done_.WaitWithDeadline(&mu_, done);
    }
  }
  --event_waiters_;
  return status;
}

absl::StatusOr<absl::Time> VmmBooks::EventDoneAt(EventHandle event) {
  ReaderMutexLock lock(&mu_);
  auto it = events_.find(event);
  if (it == events_.end()) {
    return absl::NotFoundError(absl::StrCat(
        Prefix(), "event ", event,
        " is not live (never created here, or destroyed already)"));
  }
  return it->second.done_at;
}

void VmmBooks::set_event_delay(absl::Duration delay) {
  MutexLock lock(&mu_);
  event_delay_ = delay;
}

void VmmBooks::HoldQueuedWork() {
  MutexLock lock(&mu_);
  hold_queued_work_ = true;
}

void VmmBooks::FinishQueuedWork() {
  MutexLock lock(&mu_);
  hold_queued_work_ = false;
  for (auto& [handle, record] : events_) {
    if (record.done_at == absl::InfiniteFuture()) {
      record.done_at = absl::InfinitePast();
    }
  }
  event_done_.SignalAll();
}

int VmmBooks::event_waiters() const {
  ReaderMutexLock lock(&mu_);
  return event_waiters_;
}

// --- Totals
// -----------------------------------------------------------------------

size_t VmmBooks::used_bytes(int device) const {
  if (device < 0 || device >= devices_) return 0;
  ReaderMutexLock lock(&mu_);
  return used_[device];
}

size_t VmmBooks::live_chunks() const {
  ReaderMutexLock lock(&mu_);
  return chunks_.size();
}

size_t VmmBooks::live_mappings() const {
  ReaderMutexLock lock(&mu_);
  return mappings_.size();
}

size_t VmmBooks::live_ranges() const {
  ReaderMutexLock lock(&mu_);
  return ranges_.size();
}

std::string VmmBooks::DescribeDevices() const {
  // The UUIDs only when they are not the node's first devices in order.
  bool plain = true;
  for (int i = 0; i < devices_; ++i) {
    plain = plain && uuids_[i] == EmulatedDeviceUuid(i);
  }
  return absl::StrCat(
      devices_, devices_ == 1 ? " device" : " devices",
      plain ? "" : absl::StrCat(" (", absl::StrJoin(uuids_, ", "), ")"), ", ",
      FormatBytes(capacity_),
      devices_ == 1 ? " capacity, " : " capacity each, ",
      FormatBytes(granularity_), " chunks");
}

std::vector<std::pair<DevicePtr, size_t>> VmmBooks::TakeAllRanges() {
  MutexLock lock(&mu_);
  std::vector<std::pair<DevicePtr, size_t>> out(ranges_.begin(), ranges_.end());
  ranges_.clear();
  mappings_.clear();
  return out;
}

// --- Chunk descriptors
// ------------------------------------------------------------

absl::StatusOr<UniqueFd> MakeChunkMemfd(size_t size,
                                        absl::string_view backend_name) {
  UniqueFd fd(memfd_create("gmlake-chunk", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    const int err = errno;
    if (err == EMFILE || err == ENFILE) {
      rlimit lim{};
      getrlimit(RLIMIT_NOFILE, &lim);
      return absl::ResourceExhaustedError(absl::StrCat(
          backend_name, " backend: out of file descriptors creating a chunk (",
          std::strerror(err), "; RLIMIT_NOFILE is ", lim.rlim_cur,
          " and every chunk holds one): raise the limit (ulimit -n, systemd "
          "LimitNOFILE=) or use larger chunks"));
    }
    return absl::InternalError(absl::StrCat(
        backend_name, " backend: memfd_create: ", std::strerror(err)));
  }
  if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat(backend_name, " backend: cannot size a chunk memfd to ",
                     size, " bytes: ", std::strerror(errno)));
  }
  // Every holder of an exported chunk can reach its file: without seals one
  // could shrink it (every other mapping, the daemon's zeroing included,
  // dies of SIGBUS) or grow it. F_SEAL_SEAL stops anyone adding seals that
  // would refuse the next holder's writable mapping.
  if (fcntl(fd.get(), F_ADD_SEALS, kChunkSeals | F_SEAL_SEAL) != 0) {
    return absl::InternalError(absl::StrCat(
        backend_name,
        " backend: cannot seal a chunk memfd: ", std::strerror(errno)));
  }
  return fd;
}

absl::StatusOr<UniqueFd> DupChunkFd(int fd, size_t size,
                                    absl::string_view backend_name) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend_name, " backend: import: descriptor ", fd, " is not open",
        fd < 0 ? "" : absl::StrCat(" (", std::strerror(errno), ")")));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(backend_name, " backend: import: descriptor ", fd,
                     " is not a chunk (not a memfd from ExportChunk)"));
  }
  // Sealed first, so that the size checked below is the size for good.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kChunkSeals) != kChunkSeals) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend_name, " backend: import: descriptor ", fd,
        " is not a sealed chunk (its size could change under the mapping; "
        "import only descriptors from ExportChunk)"));
  }
  if (static_cast<uint64_t>(st.st_size) != size) {
    return absl::InvalidArgumentError(
        absl::StrCat(backend_name, " backend: import: descriptor ", fd,
                     " holds ", st.st_size, " bytes, not the ", size,
                     " asked; import with the exporter's chunk size"));
  }
  UniqueFd dup(fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) {
    const int err = errno;
    return absl::ResourceExhaustedError(
        absl::StrCat(backend_name,
                     " backend: import: cannot duplicate "
                     "descriptor ",
                     fd, ": ", std::strerror(err),
                     err == EMFILE ? "; raise RLIMIT_NOFILE" : ""));
  }
  return dup;
}

}  // namespace gmlake
