// Copyright 2026 The GMLake Authors.

#include "common/cuda_backend.h"

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda_driver.h"
#include "common/mutex.h"

namespace gmlake {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Hex(uint64_t v) { return absl::StrCat("0x", absl::Hex(v)); }

// As nvidia-smi writes it: "GPU-8e6a2c1f-4b0d-1a2b-3c4d-5e6f70819203".
std::string GpuUuidString(const CUuuid& uuid) {
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppendFormat(&out, "%02x",
                          static_cast<unsigned char>(uuid.bytes[i]));
  }
  return out;
}

std::string Bytes(size_t n) {
  if (n % kMiB == 0) return absl::StrCat(n / kMiB, " MiB");
  if (n % 1024 == 0) return absl::StrCat(n / 1024, " KiB");
  return absl::StrCat(n, " bytes");
}

// Each backend gets a new generation, so a thread's cached "current context"
// from an earlier backend (whose primary context may have been released and
// reset since) is never trusted.
std::atomic<uint64_t> g_next_generation{1};

// The context this thread made current last, and for which backend
// generation. Checking it is a thread-local read; cuCtxSetCurrent is called
// only when a thread first calls in, or switches device.
struct ThreadContext {
  CUcontext context = nullptr;
  uint64_t generation = 0;
};
thread_local ThreadContext t_current;

class CudaBackend final : public VmmBackend {
 public:
  explicit CudaBackend(const CudaDriver* driver)
      : driver_(*driver), generation_(g_next_generation.fetch_add(1)) {}
  ~CudaBackend() override;

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // Finds the devices and checks their features, creating no context.
  // Called once, before the backend is shared.
  absl::Status Init();

  absl::string_view name() const override { return "cuda"; }
  std::string Describe() const override;
  int device_count() const override {
    return static_cast<int>(devices_.size());
  }
  std::string device_uuid(int device) const override {
    if (device < 0 || device >= device_count()) return "";
    return devices_[device].uuid;
  }
  bool can_export_imports() const override { return false; }
  size_t granularity(int device) const override {
    if (device < 0 || device >= device_count()) return 0;
    return devices_[device].granularity;
  }
  // cuDeviceTotalMem, read once at start.
  uint64_t device_memory_bytes(int device) const override {
    if (device < 0 || device >= device_count()) return 0;
    return devices_[device].total_bytes;
  }

  absl::Status Fill(DevicePtr addr, uint8_t value, size_t size) override;
  absl::Status CopyToHost(void* dst, DevicePtr src, size_t size) override;
  absl::Status CopyFromHost(DevicePtr dst, const void* src,
                            size_t size) override;

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
  absl::Status DoWaitEventOnStream(StreamHandle stream,
                                   EventHandle event) override;
  absl::StatusOr<std::vector<uint64_t>> DoCaptureFrontier(
      StreamHandle stream) override;
  absl::StatusOr<bool> DoCaptureFollows(
      StreamHandle stream, absl::Span<const uint64_t> nodes) override;

 private:
  struct Device {
    CUdevice device = 0;
    std::string name;
    std::string uuid;  // "GPU-..." as nvidia-smi writes it
    size_t total_bytes = 0;
    size_t granularity = 0;
  };
  struct RangeInfo {
    size_t size;
    int device;  // whose context reserved it, and frees it
  };
  struct ChunkInfo {
    CUmemGenericAllocationHandle cu;  // the driver's handle
    int device;
    size_t size;
  };
  struct MappingInfo {
    size_t size;
    ChunkHandle chunk;
    int device;
    bool access;  // SetAccess was called on it since it was mapped
  };
  using MappingMap = std::map<DevicePtr, MappingInfo>;

  // The status for a failed driver call described by `call`.
  absl::Status Error(CUresult r, absl::string_view call) const {
    return CudaCallError(driver_, r, call);
  }
  absl::Status CheckDevice(int device) const;
  absl::Status CheckSize(int device, size_t size, absl::string_view what) const;
  // `device`'s primary context, retained on first use.
  absl::StatusOr<CUcontext> Context(int device) const;
  // Makes `device`'s primary context current in this thread (retaining it
  // on first use).
  absl::Status MakeCurrent(int device) const;
  // For a range of no device in particular: the lowest device whose context
  // exists already, else 0.
  int DeviceInUse() const;
  // Device `ordinal`'s name, UUID and size, and whether it has what GMLake
  // needs (VMM and POSIX descriptor handles): an error that says so if not.
  absl::Status DescribeDevice(int ordinal, Device* dev) const;
  // cuMemGetAllocationGranularity for `dev`, without leaving a context.
  absl::Status QueryGranularity(int ordinal, Device* dev);

  // The mappings that together cover [addr, addr+size) without gaps, in
  // address order. With `whole`, the range must start and end on mapping
  // boundaries; with `need_access`, each mapping must have been given
  // access. `what` names the operation for the error message.
  absl::StatusOr<std::vector<MappingMap::iterator>> Covering(
      DevicePtr addr, size_t size, bool whole, bool need_access,
      absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The device to run a Fill/Copy of [addr, addr+size) on.
  absl::StatusOr<int> AccessibleDevice(DevicePtr addr, size_t size,
                                       absl::string_view what);

  const CudaDriver& driver_;
  const uint64_t generation_;
  std::vector<Device> devices_;  // fixed after Init
  // Per device: its retained primary context, null until first needed.
  // Written once (under context_mu_), then read without a lock.
  mutable std::unique_ptr<std::atomic<CUcontext>[]> contexts_;
  mutable Mutex context_mu_;
  size_t max_granularity_ = 0;  // the unit of virtual ranges
  size_t min_granularity_ = 0;  // what Unmap/SetAccess ranges align to

  mutable Mutex mu_;
  // Keyed by our own handle numbers, not the driver's: an import of a chunk
  // this process also holds may give back a driver handle value we already
  // have, and each ChunkHandle must be released on its own.
  uint64_t next_chunk_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<ChunkHandle, ChunkInfo> chunks_ ABSL_GUARDED_BY(mu_);
  std::map<DevicePtr, RangeInfo> ranges_ ABSL_GUARDED_BY(mu_);  // by base
  MappingMap mappings_ ABSL_GUARDED_BY(mu_);                    // addr -> info
  absl::flat_hash_map<EventHandle, int> events_ ABSL_GUARDED_BY(mu_);
};

absl::Status CudaBackend::Init() {
  const CudaDriver& d = driver_;
  int count = 0;
  if (CUresult r = d.cuDeviceGetCount(&count); r != CUDA_SUCCESS) {
    return Error(r, "cuDeviceGetCount");
  }
  if (count <= 0) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::UnavailableError(absl::StrCat(
        "the CUDA driver ", CudaVersionString(d.version), " sees no device",
        visible != nullptr
            ? absl::StrCat(" (CUDA_VISIBLE_DEVICES=", visible, ")")
            : std::string(),
        "; set GMLAKE_BACKEND=host to run without a GPU"));
  }
  devices_.reserve(count);
  contexts_ = std::make_unique<std::atomic<CUcontext>[]>(count);
  for (int i = 0; i < count; ++i) contexts_[i] = nullptr;
  for (int i = 0; i < count; ++i) {
    Device dev;
    if (absl::Status s = DescribeDevice(i, &dev); !s.ok()) return s;
    if (absl::Status s = QueryGranularity(i, &dev); !s.ok()) return s;
    max_granularity_ = std::max(max_granularity_, dev.granularity);
    min_granularity_ = min_granularity_ == 0
                           ? dev.granularity
                           : std::min(min_granularity_, dev.granularity);
    devices_.push_back(std::move(dev));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::DescribeDevice(int ordinal, Device* dev) const {
  const CudaDriver& d = driver_;
  if (CUresult r = d.cuDeviceGet(&dev->device, ordinal); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuDeviceGet(", ordinal, ")"));
  }
  char name[256] = {};
  if (CUresult r = d.cuDeviceGetName(name, sizeof(name) - 1, dev->device);
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuDeviceGetName(device=", ordinal, ")"));
  }
  dev->name = name;
  CUuuid uuid = {};
  if (CUresult r = d.cuDeviceGetUuid(&uuid, dev->device); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuDeviceGetUuid(device=", ordinal, ")"));
  }
  dev->uuid = GpuUuidString(uuid);
  if (CUresult r = d.cuDeviceTotalMem(&dev->total_bytes, dev->device);
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuDeviceTotalMem(device=", ordinal, ")"));
  }
  int vmm = 0;
  int posix_fd = 0;
  if (CUresult r = d.cuDeviceGetAttribute(
          &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
          dev->device);
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuDeviceGetAttribute(VIRTUAL_MEMORY_"
                                 "MANAGEMENT_SUPPORTED, device=",
                                 ordinal, ")"));
  }
  if (CUresult r = d.cuDeviceGetAttribute(
          &posix_fd,
          CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
          dev->device);
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuDeviceGetAttribute(HANDLE_TYPE_POSIX_"
                                 "FILE_DESCRIPTOR_SUPPORTED, device=",
                                 ordinal, ")"));
  }
  if (!vmm || !posix_fd) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA device ", ordinal, " (", dev->name, ") does not support ",
        !vmm ? "virtual memory management" : "POSIX file-descriptor handles",
        ", which GMLake needs; set GMLAKE_BACKEND=host to run without it"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::QueryGranularity(int ordinal, Device* dev) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev->device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUresult r = driver_.cuMemGetAllocationGranularity(
      &dev->granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    // A driver that wants a context for the question gets the device's for
    // the time of it; released at once, so none is left behind.
    CUcontext ctx = nullptr;
    r = driver_.cuDevicePrimaryCtxRetain(&ctx, dev->device);
    if (r != CUDA_SUCCESS) {
      return Error(r, absl::StrCat("cuDevicePrimaryCtxRetain(device=", ordinal,
                                   ") to ask its granularity"));
    }
    r = driver_.cuCtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS) {
      r = driver_.cuMemGetAllocationGranularity(
          &dev->granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    }
    driver_.cuCtxSetCurrent(nullptr);
    t_current = ThreadContext{};
    driver_.cuDevicePrimaryCtxRelease(dev->device);
  }
  if (r != CUDA_SUCCESS) {
    return Error(
        r, absl::StrCat("cuMemGetAllocationGranularity(device=", ordinal, ")"));
  }
  if (dev->granularity == 0) {
    return absl::InternalError(absl::StrCat(
        "cuMemGetAllocationGranularity(device=", ordinal, ") returned 0"));
  }
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  // Nobody else may call in any more. Give back what is still held, in the
  // order the driver needs (unmap before free and release); errors cannot be
  // reported from here, and the primary contexts' release below frees
  // anything left once no other user holds them.
  if (!devices_.empty()) {
    MutexLock lock(&mu_);
    for (const auto& [addr, m] : mappings_) {
      if (MakeCurrent(m.device).ok()) driver_.cuMemUnmap(addr, m.size);
    }
    mappings_.clear();
    for (const auto& [base, range] : ranges_) {
      if (MakeCurrent(range.device).ok()) {
        driver_.cuMemAddressFree(base, range.size);
      }
    }
    ranges_.clear();
    for (const auto& [handle, c] : chunks_) {
      if (MakeCurrent(c.device).ok()) driver_.cuMemRelease(c.cu);
    }
    chunks_.clear();
    for (const auto& [event, device] : events_) {
      if (MakeCurrent(device).ok()) {
        driver_.cuEventDestroy(reinterpret_cast<CUevent>(event));
      }
    }
    events_.clear();
  }
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (contexts_[i].load() != nullptr) {
      driver_.cuDevicePrimaryCtxRelease(devices_[i].device);
    }
  }
  t_current = ThreadContext{};
}

std::string CudaBackend::Describe() const {
  std::vector<std::string> parts;
  for (const Device& dev : devices_) {
    parts.push_back(absl::StrFormat(
        "%s %s, %.1f GiB, granularity %s", dev.name, dev.uuid,
        static_cast<double>(dev.total_bytes) / kGiB, Bytes(dev.granularity)));
  }
  return absl::StrCat("cuda backend: driver ",
                      CudaVersionString(driver_.version), ", ", devices_.size(),
                      devices_.size() == 1 ? " device (" : " devices (",
                      absl::StrJoin(parts, "; "), ")");
}

absl::Status CudaBackend::CheckDevice(int device) const {
  if (device < 0 || device >= device_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device, " does not exist: the cuda backend has ",
        device_count(), " device(s), 0 to ", device_count() - 1));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::CheckSize(int device, size_t size,
                                    absl::string_view what) const {
  const size_t g = devices_[device].granularity;
  if (size == 0 || size % g != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": size ", size, " is not a positive multiple of device ", device,
        "'s granularity ", g, " (", Bytes(g), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CUcontext> CudaBackend::Context(int device) const {
  CUcontext ctx = contexts_[device].load(std::memory_order_acquire);
  if (ctx != nullptr) return ctx;
  // First use of this device: create (retain) its context, once.
  MutexLock lock(&context_mu_);
  ctx = contexts_[device].load(std::memory_order_relaxed);
  if (ctx != nullptr) return ctx;
  if (CUresult r =
          driver_.cuDevicePrimaryCtxRetain(&ctx, devices_[device].device);
      r != CUDA_SUCCESS) {
    return Error(r,
                 absl::StrCat("cuDevicePrimaryCtxRetain(device=", device, ")"));
  }
  contexts_[device].store(ctx, std::memory_order_release);
  return ctx;
}

int CudaBackend::DeviceInUse() const {
  for (int d = 0; d < device_count(); ++d) {
    if (contexts_[d].load(std::memory_order_acquire) != nullptr) return d;
  }
  return 0;
}

absl::Status CudaBackend::MakeCurrent(int device) const {
  absl::StatusOr<CUcontext> context = Context(device);
  if (!context.ok()) return context.status();
  const CUcontext ctx = *context;
  if (t_current.context == ctx && t_current.generation == generation_) {
    return absl::OkStatus();
  }
  if (CUresult r = driver_.cuCtxSetCurrent(ctx); r != CUDA_SUCCESS) {
    t_current = ThreadContext{};
    return Error(r, absl::StrCat("cuCtxSetCurrent(primary context of device ",
                                 device, ")"));
  }
  t_current = ThreadContext{ctx, generation_};
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CudaBackend::MappingMap::iterator>>
CudaBackend::Covering(DevicePtr addr, size_t size, bool whole, bool need_access,
                      absl::string_view what) {
  // The error codes are the conformance contract (common/vmm_books.h):
  // malformed arguments are InvalidArgument, memory in the wrong state
  // (not mapped, no access) FailedPrecondition.
  const std::string call =
      absl::StrCat(what, "(addr=", Hex(addr), ", size=", size, ")");
  if (size == 0 || addr > UINTPTR_MAX - size) {
    return absl::InvalidArgumentError(
        absl::StrCat(call, ": empty, or wraps around the address space"));
  }
  if (whole && (addr % min_granularity_ != 0 || size % min_granularity_ != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(call,
                     ": address and size must be multiples of the "
                     "granularity ",
                     min_granularity_));
  }
  const DevicePtr end = addr + size;
  auto it = mappings_.upper_bound(addr);
  if (it == mappings_.begin() ||
      std::prev(it)->first + std::prev(it)->second.size <= addr) {
    return absl::FailedPreconditionError(
        absl::StrCat(call, ": nothing is mapped at ", Hex(addr)));
  }
  --it;
  if (whole && it->first != addr) {
    return absl::InvalidArgumentError(
        absl::StrCat(call, ": starts inside the chunk mapped at ",
                     Hex(it->first), "; chunks are handled whole"));
  }
  std::vector<MappingMap::iterator> out;
  DevicePtr covered = it->first;
  for (;;) {
    if (it == mappings_.end() || it->first != covered) {
      return absl::FailedPreconditionError(
          absl::StrCat(call, ": nothing is mapped at ", Hex(covered)));
    }
    if (need_access && !it->second.access) {
      return absl::FailedPreconditionError(absl::StrCat(
          call, ": the chunk mapped at ", Hex(it->first),
          " has no access (access does not survive an unmap); call SetAccess "
          "after every Map"));
    }
    if (whole && it->second.size > end - covered) {
      return absl::InvalidArgumentError(
          absl::StrCat(call, ": ends inside the chunk mapped at ",
                       Hex(it->first), "; chunks are handled whole"));
    }
    out.push_back(it);
    covered = it->first + it->second.size;
    if (covered >= end) break;
    ++it;
  }
  return out;
}

// --- Chunks
// -------------------------------------------------------------------

absl::StatusOr<ChunkHandle> CudaBackend::DoCreateChunk(int device,
                                                       size_t size) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  if (absl::Status s = CheckSize(device, size, "CreateChunk"); !s.ok()) {
    return s;
  }
  if (absl::Status s = MakeCurrent(device); !s.ok()) return s;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = devices_[device].device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = driver_.cuMemCreate(&handle, size, &prop, 0);
      r != CUDA_SUCCESS) {
    return Error(
        r, absl::StrCat("cuMemCreate(device=", device, ", size=", size, ")"));
  }
  MutexLock lock(&mu_);
  const ChunkHandle id = next_chunk_++;
  chunks_[id] = ChunkInfo{handle, device, size};
  return id;
}

absl::Status CudaBackend::DoReleaseChunk(ChunkHandle chunk) {
  ChunkInfo info;
  {
    MutexLock lock(&mu_);
    auto it = chunks_.find(chunk);
    if (it == chunks_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "ReleaseChunk: chunk ", chunk,
          " was not created or imported through this backend, or was "
          "released already"));
    }
    info = it->second;
    chunks_.erase(it);
  }
  if (absl::Status s = MakeCurrent(info.device); !s.ok()) return s;
  if (CUresult r = driver_.cuMemRelease(info.cu); r != CUDA_SUCCESS) {
    MutexLock lock(&mu_);
    chunks_[chunk] = info;  // still ours: the caller may try again
    return Error(r, absl::StrCat("cuMemRelease(handle=", Hex(info.cu), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> CudaBackend::DoExportChunk(ChunkHandle chunk) {
  ChunkInfo info;
  {
    MutexLock lock(&mu_);
    auto it = chunks_.find(chunk);
    if (it == chunks_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "ExportChunk: chunk ", chunk,
          " is not live (never created or imported through this backend, or "
          "released already)"));
    }
    info = it->second;
  }
  if (absl::Status s = MakeCurrent(info.device); !s.ok()) return s;
  int fd = -1;
  if (CUresult r = driver_.cuMemExportToShareableHandle(
          &fd, info.cu, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuMemExportToShareableHandle(handle=",
                                 Hex(info.cu), ", POSIX_FILE_DESCRIPTOR)"));
  }
  return UniqueFd(fd);
}

absl::StatusOr<ChunkHandle> CudaBackend::DoImportChunk(int fd, int device,
                                                       size_t size) {
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImportChunk: invalid file descriptor ", fd));
  }
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  if (absl::Status s = CheckSize(device, size, "ImportChunk"); !s.ok()) {
    return s;
  }
  if (absl::Status s = MakeCurrent(device); !s.ok()) return s;
  CUmemGenericAllocationHandle handle = 0;
  // The driver reads the descriptor and does not keep it: the caller still
  // owns (and closes) `fd`.
  if (CUresult r = driver_.cuMemImportFromShareableHandle(
          &handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      r != CUDA_SUCCESS) {
    absl::Status s =
        Error(r, absl::StrCat("cuMemImportFromShareableHandle(fd=", fd,
                              ", POSIX_FILE_DESCRIPTOR)"));
    // The descriptor is the only input: unless the device is full, the
    // driver refused it, and a descriptor that is no chunk is the caller's
    // InvalidArgument (the conformance contract, common/vmm_books.h).
    if (s.code() == absl::StatusCode::kResourceExhausted) return s;
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), "; is fd ", fd,
                     " a descriptor from ExportChunk (cuMemExport"
                     "ToShareableHandle)?"));
  }
  MutexLock lock(&mu_);
  const ChunkHandle id = next_chunk_++;
  chunks_[id] = ChunkInfo{handle, device, size};
  return id;
}

// --- Ranges and mappings
// ------------------------------------------------------

absl::StatusOr<DevicePtr> CudaBackend::DoReserveRange(size_t size,
                                                      size_t alignment,
                                                      int device) {
  const size_t g = max_granularity_;
  if (size == 0 || size % g != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReserveRange: size ", size,
                     " is not a positive multiple of the granularity ", g, " (",
                     Bytes(g), ")"));
  }
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReserveRange: alignment ", alignment, " is not a power of two"));
  }
  if (device == kAnyDevice) {
    device = DeviceInUse();
  } else if (absl::Status s = CheckDevice(device); !s.ok()) {
    return s;
  }
  // In the context of the device the range is for: no other device gets one.
  if (absl::Status s = MakeCurrent(device); !s.ok()) return s;
  CUdeviceptr base = 0;
  const size_t align = std::max(alignment, g);
  if (CUresult r = driver_.cuMemAddressReserve(&base, size, align, 0, 0);
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuMemAddressReserve(size=", size,
                                 ", alignment=", align, ")"));
  }
  MutexLock lock(&mu_);
  ranges_[base] = RangeInfo{size, device};
  return static_cast<DevicePtr>(base);
}

absl::Status CudaBackend::DoFreeRange(DevicePtr base, size_t size) {
  RangeInfo range;
  {
    MutexLock lock(&mu_);
    auto it = ranges_.find(base);
    if (it == ranges_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "FreeRange(base=", Hex(base), ", size=", size,
          "): no range reserved through this backend starts there (never "
          "reserved, or freed already)"));
    }
    if (it->second.size != size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FreeRange(base=", Hex(base), ", size=", size, "): the range has ",
          it->second.size, " bytes; free it whole"));
    }
    auto m = mappings_.lower_bound(base);
    if (m != mappings_.end() && m->first < base + size) {
      return absl::FailedPreconditionError(
          absl::StrCat("FreeRange(base=", Hex(base), ", size=", size,
                       "): a chunk is still "
                       "mapped at ",
                       Hex(m->first), "; unmap it first"));
    }
    range = it->second;
    ranges_.erase(it);
  }
  if (absl::Status s = MakeCurrent(range.device); !s.ok()) return s;
  if (CUresult r = driver_.cuMemAddressFree(base, size); r != CUDA_SUCCESS) {
    MutexLock lock(&mu_);
    ranges_[base] = range;
    return Error(r, absl::StrCat("cuMemAddressFree(base=", Hex(base),
                                 ", size=", size, ")"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::DoMap(DevicePtr addr, size_t size,
                                ChunkHandle chunk) {
  int device = 0;
  CUmemGenericAllocationHandle cu = 0;
  {
    MutexLock lock(&mu_);
    auto c = chunks_.find(chunk);
    if (c == chunks_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "Map(addr=", Hex(addr), ", size=", size, "): chunk ", chunk,
          " was not created or imported through this backend"));
    }
    device = c->second.device;
    cu = c->second.cu;
    if (size != c->second.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Map(addr=", Hex(addr), ", size=", size, "): chunk ", chunk,
          " has size ", c->second.size, " and can only be mapped whole"));
    }
    const size_t g = devices_[device].granularity;
    if (addr % g != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Map(addr=", Hex(addr), ", size=", size,
                       "): address not aligned to the granularity ", g));
    }
    // The reserved range that starts at or below addr must hold all of it.
    bool inside = false;
    if (auto r = ranges_.upper_bound(addr); r != ranges_.begin()) {
      --r;
      inside = addr + size > addr && addr + size <= r->first + r->second.size;
    }
    if (!inside) {
      return absl::InvalidArgumentError(
          absl::StrCat("Map(addr=", Hex(addr), ", size=", size,
                       "): not inside a range reserved through this backend"));
    }
    auto next = mappings_.lower_bound(addr);
    if (next != mappings_.end() && next->first < addr + size) {
      return absl::FailedPreconditionError(
          absl::StrCat("Map(addr=", Hex(addr), ", size=", size,
                       "): a chunk is already mapped at ", Hex(next->first)));
    }
    if (next != mappings_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.size > addr) {
        return absl::FailedPreconditionError(
            absl::StrCat("Map(addr=", Hex(addr), ", size=", size,
                         "): overlaps the chunk mapped at ", Hex(prev->first)));
      }
    }
    // Claimed now, so a concurrent Map of the same place fails cleanly.
    mappings_[addr] = MappingInfo{size, chunk, device, false};
  }
  absl::Status s = MakeCurrent(device);
  if (s.ok()) {
    if (CUresult r = driver_.cuMemMap(addr, size, 0, cu, 0);
        r != CUDA_SUCCESS) {
      s = Error(r, absl::StrCat("cuMemMap(addr=", Hex(addr), ", size=", size,
                                ", handle=", Hex(cu), ")"));
    }
  }
  if (!s.ok()) {
    MutexLock lock(&mu_);
    mappings_.erase(addr);
  }
  return s;
}

absl::Status CudaBackend::DoUnmap(DevicePtr addr, size_t size) {
  std::vector<std::pair<DevicePtr, MappingInfo>> taken;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<std::vector<MappingMap::iterator>> cover =
        Covering(addr, size, /*whole=*/true, /*need_access=*/false, "Unmap");
    if (!cover.ok()) return cover.status();
    for (MappingMap::iterator it : *cover) {
      taken.emplace_back(it->first, it->second);
      mappings_.erase(it);
    }
  }
  // One driver call per chunk: the driver's contract is about whole mapped
  // handles, and one call per chunk costs the same (docs/gpu.md, VMM call
  // costs).
  for (size_t i = 0; i < taken.size(); ++i) {
    const auto& [at, m] = taken[i];
    absl::Status s = MakeCurrent(m.device);
    if (s.ok()) {
      if (CUresult r = driver_.cuMemUnmap(at, m.size); r != CUDA_SUCCESS) {
        s = Error(r, absl::StrCat("cuMemUnmap(addr=", Hex(at),
                                  ", size=", m.size, ")"));
      }
    }
    if (!s.ok()) {
      // What was not unmapped is still mapped: keep its books.
      MutexLock lock(&mu_);
      for (size_t j = i; j < taken.size(); ++j) {
        mappings_[taken[j].first] = taken[j].second;
      }
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::DoSetAccess(DevicePtr addr, size_t size,
                                      absl::Span<const int> devices) {
  if (devices.empty()) {
    return absl::InvalidArgumentError(
        "SetAccess: no devices given; name at least one");
  }
  std::vector<CUmemAccessDesc> desc;
  desc.reserve(devices.size());
  for (int device : devices) {
    if (absl::Status s = CheckDevice(device); !s.ok()) return s;
    CUmemAccessDesc a = {};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = devices_[device].device;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    desc.push_back(a);
  }
  int device = 0;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<std::vector<MappingMap::iterator>> cover = Covering(
        addr, size, /*whole=*/true, /*need_access=*/false, "SetAccess");
    if (!cover.ok()) return cover.status();
    device = cover->front()->second.device;
  }
  if (absl::Status s = MakeCurrent(device); !s.ok()) return s;
  if (CUresult r = driver_.cuMemSetAccess(addr, size, desc.data(), desc.size());
      r != CUDA_SUCCESS) {
    return Error(
        r, absl::StrCat("cuMemSetAccess(addr=", Hex(addr), ", size=", size,
                        ", devices=", absl::StrJoin(devices, ","), ")"));
  }
  MutexLock lock(&mu_);
  // Mark what is (still) mapped there; a concurrent unmap of it is the
  // caller's race and leaves nothing to mark.
  for (auto it = mappings_.lower_bound(addr);
       it != mappings_.end() && it->first < addr + size; ++it) {
    it->second.access = true;
  }
  return absl::OkStatus();
}

// --- Events
// -------------------------------------------------------------------

absl::StatusOr<EventHandle> CudaBackend::DoCreateEvent(int device) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  if (absl::Status s = MakeCurrent(device); !s.ok()) return s;
  CUevent event = nullptr;
  if (CUresult r = driver_.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuEventCreate(device=", device,
                                 ", CU_EVENT_DISABLE_TIMING)"));
  }
  const EventHandle handle = reinterpret_cast<EventHandle>(event);
  MutexLock lock(&mu_);
  events_[handle] = device;
  return handle;
}

absl::Status CudaBackend::DoDestroyEvent(EventHandle event) {
  int device = 0;
  {
    MutexLock lock(&mu_);
    auto it = events_.find(event);
    if (it == events_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "DestroyEvent: event ", Hex(event),
          " was not created through this backend, or was destroyed already"));
    }
    device = it->second;
    events_.erase(it);
  }
  if (absl::Status s = MakeCurrent(device); !s.ok()) return s;
  if (CUresult r = driver_.cuEventDestroy(reinterpret_cast<CUevent>(event));
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuEventDestroy(event=", Hex(event), ")"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::DoRecordEvent(EventHandle event,
                                        StreamHandle stream) {
  int device = 0;
  {
    MutexLock lock(&mu_);
    auto it = events_.find(event);
    if (it == events_.end()) {
      return absl::NotFoundError(
          absl::StrCat("RecordEvent: event ", Hex(event),
                       " was not created through this backend"));
    }
    device = it->second;
  }
  if (absl::Status s = MakeCurrent(device); !s.ok()) return s;
  if (CUresult r = driver_.cuEventRecord(reinterpret_cast<CUevent>(event),
                                         reinterpret_cast<CUstream>(stream));
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuEventRecord(event=", Hex(event),
                                 ", stream=", Hex(stream), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaBackend::DoQueryEvent(EventHandle event) {
  int device = 0;
  {
    MutexLock lock(&mu_);
    auto it = events_.find(event);
    if (it == events_.end()) {
      return absl::NotFoundError(
          absl::StrCat("QueryEvent: event ", Hex(event),
                       " was not created through this backend"));
    }
    device = it->second;
  }
  if (absl::Status s = MakeCurrent(device); !s.ok()) return s;
  const CUresult r = driver_.cuEventQuery(reinterpret_cast<CUevent>(event));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  return Error(r, absl::StrCat("cuEventQuery(event=", Hex(event), ")"));
}

absl::Status CudaBackend::DoSyncEvent(EventHandle event) {
  int device = 0;
  {
    MutexLock lock(&mu_);
    auto it = events_.find(event);
    if (it == events_.end()) {
      return absl::NotFoundError(
          absl::StrCat("SyncEvent: event ", Hex(event),
                       " was not created through this backend"));
    }
    device = it->second;
  }
  if (absl::Status s = MakeCurrent(device); !s.ok()) return s;
  if (CUresult r = driver_.cuEventSynchronize(reinterpret_cast<CUevent>(event));
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuEventSynchronize(event=", Hex(event), ")"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::DoWaitEventOnStream(StreamHandle stream,
                                              EventHandle event) {
  int device = 0;
  {
    MutexLock lock(&mu_);
    auto it = events_.find(event);
    if (it == events_.end()) {
      return absl::NotFoundError(
          absl::StrCat("WaitEventOnStream: event ", Hex(event),
                       " was not created through this backend"));
    }
    device = it->second;
  }
  if (absl::Status s = MakeCurrent(device); !s.ok()) return s;
  if (CUresult r = driver_.cuStreamWaitEvent(reinterpret_cast<CUstream>(stream),
                                             reinterpret_cast<CUevent>(event),
                                             /*Flags=*/0);
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuStreamWaitEvent(stream=", Hex(stream),
                                 ", event=", Hex(event), ")"));
  }
  return absl::OkStatus();
}

// --- Stream capture
// -----------------------------------------------------------

absl::StatusOr<std::vector<uint64_t>> CudaBackend::DoCaptureFrontier(
    StreamHandle stream) {
  if (driver_.cuStreamGetCaptureInfo == nullptr ||
      driver_.cuGraphNodeGetDependencies == nullptr) {
    return absl::UnimplementedError(
        "the CUDA driver is older than 12.3: no capture-graph queries");
  }
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  size_t n = 0;
  if (CUresult r = driver_.cuStreamGetCaptureInfo(
          reinterpret_cast<CUstream>(stream), &status, &id, &graph, &deps,
          &edges, &n);
      r != CUDA_SUCCESS) {
    return Error(
        r, absl::StrCat("cuStreamGetCaptureInfo(stream=", Hex(stream), ")"));
  }
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    return absl::FailedPreconditionError(
        absl::StrCat("stream ", Hex(stream), " is not being captured"));
  }
  std::vector<uint64_t> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(reinterpret_cast<uint64_t>(deps[i]));
  }
  return out;
}

absl::StatusOr<bool> CudaBackend::DoCaptureFollows(
    StreamHandle stream, absl::Span<const uint64_t> nodes) {
  absl::StatusOr<std::vector<uint64_t>> frontier = DoCaptureFrontier(stream);
  if (!frontier.ok()) return frontier.status();
  // The frontier's ancestors, walked back through each node's dependencies;
  // stops as soon as every node asked about has been seen.
  std::vector<uint64_t> missing(nodes.begin(), nodes.end());
  std::vector<uint64_t> todo = *std::move(frontier);
  absl::flat_hash_map<uint64_t, bool> seen;
  std::vector<CUgraphNode> deps;
  while (!todo.empty() && !missing.empty()) {
    const uint64_t node = todo.back();
    todo.pop_back();
    if (!seen.emplace(node, true).second) continue;
    missing.erase(std::remove(missing.begin(), missing.end(), node),
                  missing.end());
    CUgraphNode h = reinterpret_cast<CUgraphNode>(node);
    size_t n = 0;
    CUresult r = driver_.cuGraphNodeGetDependencies(h, nullptr, nullptr, &n);
    deps.resize(n);
    if (r == CUDA_SUCCESS && n != 0) {
      r = driver_.cuGraphNodeGetDependencies(h, deps.data(), nullptr, &n);
    }
    if (r != CUDA_SUCCESS) return Error(r, "cuGraphNodeGetDependencies");
    for (size_t i = 0; i < n; ++i) {
      todo.push_back(reinterpret_cast<uint64_t>(deps[i]));
    }
  }
  return missing.empty();
}

// --- Memory access
// ------------------------------------------------------------

absl::StatusOr<int> CudaBackend::AccessibleDevice(DevicePtr addr, size_t size,
                                                  absl::string_view what) {
  // Checked here rather than left to the driver: a copy to memory that is not
  // mapped with access must not reach the GPU.
  MutexLock lock(&mu_);
  absl::StatusOr<std::vector<MappingMap::iterator>> cover =
      Covering(addr, size, /*whole=*/false, /*need_access=*/true, what);
  if (!cover.ok()) return cover.status();
  return cover->front()->second.device;
}

absl::Status CudaBackend::Fill(DevicePtr addr, uint8_t value, size_t size) {
  if (size == 0) return absl::OkStatus();
  absl::StatusOr<int> device = AccessibleDevice(addr, size, "Fill");
  if (!device.ok()) return device.status();
  if (absl::Status s = MakeCurrent(*device); !s.ok()) return s;
  if (CUresult r = driver_.cuMemsetD8(addr, value, size); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuMemsetD8(addr=", Hex(addr),
                                 ", value=", value, ", size=", size, ")"));
  }
  // cuMemsetD8 may return before the memory is set: wait, so the bytes are
  // there for any reader (another process included) once Fill returns.
  if (CUresult r = driver_.cuStreamSynchronize(nullptr); r != CUDA_SUCCESS) {
    return Error(r,
                 "cuStreamSynchronize(legacy default stream) after "
                 "cuMemsetD8");
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyToHost(void* dst, DevicePtr src, size_t size) {
  if (size == 0) return absl::OkStatus();
  if (dst == nullptr) {
    return absl::InvalidArgumentError("CopyToHost: destination is null");
  }
  absl::StatusOr<int> device = AccessibleDevice(src, size, "CopyToHost");
  if (!device.ok()) return device.status();
  if (absl::Status s = MakeCurrent(*device); !s.ok()) return s;
  // Synchronous for pageable host memory: the bytes are in `dst` on return.
  if (CUresult r = driver_.cuMemcpyDtoH(dst, src, size); r != CUDA_SUCCESS) {
    return Error(
        r, absl::StrCat("cuMemcpyDtoH(src=", Hex(src), ", size=", size, ")"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyFromHost(DevicePtr dst, const void* src,
                                       size_t size) {
  if (size == 0) return absl::OkStatus();
  if (src == nullptr) {
    return absl::InvalidArgumentError("CopyFromHost: source is null");
  }
  absl::StatusOr<int> device = AccessibleDevice(dst, size, "CopyFromHost");
  if (!device.ok()) return device.status();
  if (absl::Status s = MakeCurrent(*device); !s.ok()) return s;
  if (CUresult r = driver_.cuMemcpyHtoD(dst, src, size); r != CUDA_SUCCESS) {
    return Error(
        r, absl::StrCat("cuMemcpyHtoD(dst=", Hex(dst), ", size=", size, ")"));
  }
  // From pageable memory the driver may return once the bytes are staged,
  // before they reach the device: wait, so another process reading the chunk
  // after we return sees them.
  if (CUresult r = driver_.cuStreamSynchronize(nullptr); r != CUDA_SUCCESS) {
    return Error(r,
                 "cuStreamSynchronize(legacy default stream) after "
                 "cuMemcpyHtoD");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<VmmBackend>> CreateCudaBackend() {
  absl::StatusOr<const CudaDriver*> driver = LoadCudaDriver();
  if (!driver.ok()) return driver.status();
  auto backend = std::make_unique<CudaBackend>(*driver);
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return std::unique_ptr<VmmBackend>(std::move(backend));
}

}  // namespace gmlake
