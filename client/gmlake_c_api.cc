// Copyright 2026 The GMLake Authors.
//
// The C API over one process-wide Allocator.

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/allocator.h"
#include "client/gmlake.h"
#include "client/ipc_share.h"
#include "client/open_chunk_source.h"
#include "client/options.h"
#include "client/segment_observer.h"
#include "common/mutex.h"

namespace gmlake {
namespace {

struct Global {
  Mutex mu;
  std::unique_ptr<Allocator> allocator;
  // The allocator for the hot path, read without the lock.
  std::atomic<Allocator*> ready{nullptr};
  std::string conf;
  std::string description;
};

Global& G() {
  static Global* g = new Global();
  return *g;
}

thread_local std::string last_error;
thread_local absl::StatusCode last_code = absl::StatusCode::kOk;

int Fail(const absl::Status& s) {
  last_error = std::string(s.message());
  last_code = s.code();
  return -1;
}

// Whether a failed malloc means "no memory to be had" (PyTorch's
// OutOfMemoryError): anything but a bad call or a process that may not
// allocate at all. A lake that is gone or failed is no memory too, to the
// caller that wanted some.
// Fork. A child forked from a process that started gmlake gets copies of
// the allocator's books and locks (a lock another thread held at the fork
// stays held for good) and, on the cuda backend, a CUDA that does not work
// after fork. So every entry point of such a child refuses at once,
// before any lock: the pid of the parent it was forked from, else 0.
std::atomic<pid_t> forked_from{0};

void OnForkInChild() {
  forked_from.store(getppid(), std::memory_order_relaxed);
}

// Called once gmlake starts in this process.
void WatchForks() {
  static absl::once_flag once;
  absl::call_once(once,
                  [] { pthread_atfork(nullptr, nullptr, OnForkInChild); });
}

// True (with the error set) in a forked child of a process using gmlake.
bool RefusedAfterFork() {
  const pid_t parent = forked_from.load(std::memory_order_relaxed);
  if (ABSL_PREDICT_TRUE(parent == 0)) return false;
  Fail(absl::FailedPreconditionError(absl::StrCat(
      "gmlake: this process (pid ", getpid(), ") was forked from pid ", parent,
      ", which had started gmlake; a forked child cannot use it (nor CUDA): "
      "its books and locks are copies of the parent's. Start workers with "
      "exec or multiprocessing's 'spawn' and use gmlake there (docs/design.md, "
      "\"Fork\")")));
  return true;
}

bool IsOutOfMemory(absl::StatusCode code) {
  return code != absl::StatusCode::kInvalidArgument &&
         code != absl::StatusCode::kFailedPrecondition &&
         code != absl::StatusCode::kOk;
}

Allocator* Get();

// A size in PyTorch's words (its format_size): bytes up to 1 KiB, then KiB,
// MiB and GiB with two decimals, GiB being the largest unit.
std::string PyTorchSize(uint64_t bytes) {
  constexpr uint64_t kKiB = 1024, kMiB = kKiB << 10, kGiB = kMiB << 10;
  if (bytes <= kKiB) return absl::StrCat(bytes, " bytes");
  const double b = static_cast<double>(bytes);
  if (bytes <= kMiB) return absl::StrFormat("%.2f KiB", b / kKiB);
  if (bytes <= kGiB) return absl::StrFormat("%.2f MiB", b / kMiB);
  return absl::StrFormat("%.2f GiB", b / kGiB);
}

// gmlake_torch_malloc without the throw: 0 on success; -1 with last_error in
// PyTorch's words on failure.
int TorchTryMalloc(ssize_t size, int device, void* stream, void** ptr,
                   int* out_of_memory) {
  *ptr = nullptr;
  *out_of_memory = 0;
  if (size < 0) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("gmlake: malloc of size ", size, " (negative)")));
  }
  // PyTorch refuses these before looking at its cache, in these words.
  if (static_cast<uint64_t>(size) >= (uint64_t{1} << 60)) {
    *out_of_memory = 1;
    last_code = absl::StatusCode::kResourceExhausted;
    last_error = "CUDA out of memory. Tried to allocate more than 1EB memory.";
    return -1;
  }
  *ptr = gmlake_malloc(static_cast<size_t>(size), device,
                       reinterpret_cast<uint64_t>(stream));
  if (*ptr != nullptr || size == 0) return 0;
  if (IsOutOfMemory(last_code)) {
    *out_of_memory = 1;
    // PyTorch's first two sentences, which scripts, tests and people search
    // for, in its units, then our account (asked, live, reserved, cached,
    // capacity, the lake's say).
    std::string device_memory;
    if (Allocator* a = Get()) {
      if (absl::StatusOr<uint64_t> whole = a->DeviceMemory(device);
          whole.ok()) {
        device_memory =
            absl::StrCat("GPU ", device, " has a total capacity of ",
                         PyTorchSize(*whole), ". ");
      }
    }
    last_error = absl::StrCat("CUDA out of memory. Tried to allocate ",
                              PyTorchSize(static_cast<uint64_t>(size)), ". ",
                              device_memory, last_error);
  } else if (last_error.rfind("gmlake", 0) != 0) {
    last_error = absl::StrCat("gmlake: ", last_error);
  }
  return -1;
}

absl::Status InitLocked(Global& g, const char* conf) {
  WatchForks();
  const std::string text =
      conf != nullptr
          ? conf
          : (std::getenv("GMLAKE_CONF") ? std::getenv("GMLAKE_CONF") : "");
  if (g.allocator != nullptr) {
    if (text == g.conf) return absl::OkStatus();
    return absl::FailedPreconditionError(
        "gmlake is already initialised with other options; call "
        "gmlake_shutdown() first");
  }
  absl::StatusOr<AllocatorOptions> options = ParseConf(text);
  if (!options.ok()) return options.status();
  absl::StatusOr<OpenedChunkSource> opened = OpenChunkSource(*options);
  if (!opened.ok()) return opened.status();
  g.description = opened->description;
  if (options->log) {
    std::fprintf(stderr, "gmlake: %s\n", g.description.c_str());
  }
  g.allocator =
      std::make_unique<Allocator>(std::move(opened->source), *options);
  g.ready.store(g.allocator.get(), std::memory_order_release);
  g.conf = text;
  return absl::OkStatus();
}

// The allocator, initialised from GMLAKE_CONF on first use.
Allocator* Get() {
  if (RefusedAfterFork()) return nullptr;
  Global& g = G();
  if (Allocator* a = g.ready.load(std::memory_order_acquire)) return a;
  gmlake::MutexLock lock(&g.mu);
  if (g.allocator == nullptr) {
    absl::Status s = InitLocked(g, nullptr);
    if (!s.ok()) {
      Fail(s);
      return nullptr;
    }
  }
  return g.allocator.get();
}

char* Dup(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace
}  // namespace gmlake

using gmlake::Fail;
using gmlake::Get;

extern "C" {

int gmlake_init(const char* conf) {
  if (gmlake::RefusedAfterFork()) return -1;
  gmlake::Global& g = gmlake::G();
  gmlake::MutexLock lock(&g.mu);
  absl::Status s = gmlake::InitLocked(g, conf);
  return s.ok() ? 0 : Fail(s);
}

int gmlake_check_conf(const char* conf) {
  const char* env = std::getenv("GMLAKE_CONF");
  absl::StatusOr<gmlake::AllocatorOptions> options =
      gmlake::ParseConf(conf != nullptr ? conf : (env != nullptr ? env : ""));
  return options.ok() ? 0 : Fail(options.status());
}

int gmlake_is_initialized(void) {
  // A forked child's copy of the books is not its own to use.
  if (gmlake::RefusedAfterFork()) return 0;
  return gmlake::G().ready.load(std::memory_order_acquire) != nullptr;
}

void gmlake_shutdown(void) {
  // A forked child leaves the parent's books alone (and its locks).
  if (gmlake::RefusedAfterFork()) return;
  gmlake::Global& g = gmlake::G();
  gmlake::MutexLock lock(&g.mu);
  g.ready.store(nullptr, std::memory_order_release);
  g.allocator.reset();
  g.conf.clear();
  g.description.clear();
}

void* gmlake_malloc(size_t size, int device, uint64_t stream) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return nullptr;
  if (size == 0) {
    // NULL here is a success: nothing may read an older error as its cause.
    gmlake::last_error.clear();
    gmlake::last_code = absl::StatusCode::kOk;
    return nullptr;
  }
  absl::StatusOr<gmlake::DevicePtr> p = a->Malloc(size, device, stream);
  if (!p.ok()) {
    Fail(p.status());
    return nullptr;
  }
  return reinterpret_cast<void*>(*p);
}

int gmlake_free(void* ptr) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  if (gmlake::IpcServer::Get().sharing()) {
    gmlake::IpcServer::Get().Forget(reinterpret_cast<gmlake::DevicePtr>(ptr));
  }
  absl::Status s = a->Free(reinterpret_cast<gmlake::DevicePtr>(ptr));
  return s.ok() ? 0 : Fail(s);
}

// C++ inside the extern "C" block: its functions return C++ types.
extern "C++" {
namespace {
// Memory other processes shared, mapped here (gmlake_ipc_open).
struct Imports {
  gmlake::Mutex mu;
  std::map<void*, std::unique_ptr<gmlake::ImportedMemory>> by_ptr;
};
Imports& GetImports() {
  static Imports* imports = new Imports();
  return *imports;
}
}  // namespace
}  // extern "C++"

int gmlake_ipc_share(void* ptr, char* handle, size_t* len) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  if (handle == nullptr || len == nullptr) {
    return Fail(absl::InvalidArgumentError("gmlake_ipc_share: null handle"));
  }
  const auto p = reinterpret_cast<gmlake::DevicePtr>(ptr);
  absl::Status first;
  for (int dev = 0; dev < a->device_count(); ++dev) {
    absl::StatusOr<gmlake::DeviceAllocator*> d = a->device(dev);
    if (!d.ok()) return Fail(d.status());
    absl::StatusOr<gmlake::DeviceAllocator::Exported> e = (*d)->ExportLive(p);
    if (!e.ok()) {
      if (!absl::IsNotFound(e.status())) return Fail(e.status());
      if (first.ok()) first = e.status();
      continue;
    }
    absl::StatusOr<std::string> h =
        gmlake::IpcServer::Get().Share(p, dev, *std::move(e));
    if (!h.ok()) return Fail(h.status());
    if (h->size() > GMLAKE_IPC_HANDLE_MAX) {
      gmlake::IpcServer::Get().Forget(p);
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "gmlake: the CUDA IPC handle is ", h->size(),
          " bytes (the socket's path is long: set TMPDIR to a short one)")));
    }
    std::memcpy(handle, h->data(), h->size());
    *len = h->size();
    return 0;
  }
  return Fail(first.ok() ? absl::NotFoundError("gmlake: no device") : first);
}

void* gmlake_ipc_open(const char* handle, size_t len, int device) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return nullptr;
  if (handle == nullptr) {
    Fail(absl::InvalidArgumentError("gmlake_ipc_open: null handle"));
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<gmlake::ImportedMemory>> m =
      gmlake::ImportedMemory::Open(a->source()->backend(),
                                   std::string(handle, len), device);
  if (!m.ok()) {
    Fail(m.status());
    return nullptr;
  }
  void* p = reinterpret_cast<void*>((*m)->ptr());
  Imports& imports = GetImports();
  gmlake::MutexLock lock(&imports.mu);
  imports.by_ptr[p] = *std::move(m);
  return p;
}

int gmlake_ipc_close(void* ptr) {
  std::unique_ptr<gmlake::ImportedMemory> m;
  {
    Imports& imports = GetImports();
    gmlake::MutexLock lock(&imports.mu);
    auto it = imports.by_ptr.find(ptr);
    if (it == imports.by_ptr.end()) {
      return Fail(absl::NotFoundError(
          "gmlake_ipc_close: not memory gmlake_ipc_open mapped"));
    }
    m = std::move(it->second);
    imports.by_ptr.erase(it);
  }
  return 0;  // unmapped as `m` goes
}

int gmlake_record_stream(void* ptr, uint64_t stream) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  absl::Status s =
      a->RecordStream(reinterpret_cast<gmlake::DevicePtr>(ptr), stream);
  return s.ok() ? 0 : Fail(s);
}

namespace {
gmlake::DeviceAllocator* PoolDevice(int device) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return nullptr;
  absl::StatusOr<gmlake::DeviceAllocator*> d = a->device(device);
  if (!d.ok()) {
    Fail(d.status());
    return nullptr;
  }
  return *d;
}
}  // namespace

int gmlake_pool_create_or_incref(int device, uint64_t id0, uint64_t id1) {
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  d->CreateOrIncrefPool({id0, id1});
  return 0;
}

int gmlake_pool_begin_allocate(int device, uint64_t id0, uint64_t id1,
                               gmlake_stream_filter filter, void* ctx) {
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  gmlake::StreamFilter f;
  if (filter != nullptr) {
    f = [filter, ctx](gmlake::StreamHandle s) { return filter(ctx, s) != 0; };
  }
  d->BeginAllocateToPool({id0, id1}, std::move(f));
  return 0;
}

int gmlake_pool_end_allocate(int device, uint64_t id0, uint64_t id1) {
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  d->EndAllocateToPool({id0, id1});
  return 0;
}

int64_t gmlake_pool_release(int device, uint64_t id0, uint64_t id1) {
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  return static_cast<int64_t>(d->ReleasePool({id0, id1}));
}

int64_t gmlake_pool_live(int device, uint64_t id0, uint64_t id1, void** ptrs,
                         size_t n) {
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  std::vector<gmlake::DevicePtr> live = d->PoolLivePointers({id0, id1});
  for (size_t i = 0; i < live.size() && i < n; ++i) {
    ptrs[i] = reinterpret_cast<void*>(live[i]);
  }
  return static_cast<int64_t>(live.size());
}

int64_t gmlake_pool_live_blocks(int device, uint64_t id0, uint64_t id1,
                                void** ptrs, size_t* sizes, size_t n) {
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  const auto live = d->PoolLiveBlocks({id0, id1});
  for (size_t i = 0; i < live.size() && i < n; ++i) {
    ptrs[i] = reinterpret_cast<void*>(live[i].first);
    sizes[i] = live[i].second;
  }
  return static_cast<int64_t>(live.size());
}

void* gmlake_pool_malloc_at(int device, uint64_t id0, uint64_t id1, void* ptr,
                            size_t size) {
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return nullptr;
  absl::StatusOr<gmlake::DevicePtr> p =
      d->MallocAt({id0, id1}, reinterpret_cast<gmlake::DevicePtr>(ptr), size);
  if (!p.ok()) {
    Fail(p.status());
    return nullptr;
  }
  return reinterpret_cast<void*>(*p);
}

int gmlake_pool_use_count(int device, uint64_t id0, uint64_t id1) {
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  return d->PoolUseCount({id0, id1});
}

int gmlake_pool_set_use_on_oom(int device, uint64_t id0, uint64_t id1,
                               int use_on_oom) {
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  absl::Status s = d->SetPoolUseOnOom({id0, id1}, use_on_oom != 0);
  return s.ok() ? 0 : Fail(s);
}

int gmlake_pool_set_no_split(int device, uint64_t id0, uint64_t id1) {
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  absl::Status s = d->SetPoolNoSplit({id0, id1});
  return s.ok() ? 0 : Fail(s);
}

namespace {
// The C callbacks of gmlake_pool_create_external as ExternalMemory.
class CallbackMemory : public gmlake::ExternalMemory {
 public:
  CallbackMemory(gmlake_external_alloc alloc, gmlake_external_free free,
                 void* ctx, void (*drop)(void*))
      : alloc_(alloc), free_(free), ctx_(ctx), drop_(drop) {}
  ~CallbackMemory() override {
    if (drop_ != nullptr) drop_(ctx_);
  }
  gmlake::DevicePtr Allocate(size_t bytes,
                             gmlake::StreamHandle stream) override {
    return reinterpret_cast<gmlake::DevicePtr>(alloc_(ctx_, bytes, stream));
  }
  void Free(gmlake::DevicePtr ptr, size_t bytes,
            gmlake::StreamHandle stream) override {
    free_(ctx_, reinterpret_cast<void*>(ptr), bytes, stream);
  }

 private:
  gmlake_external_alloc alloc_;
  gmlake_external_free free_;
  void* ctx_;
  void (*drop_)(void*);
};
}  // namespace

int gmlake_pool_create_external(int device, uint64_t id0, uint64_t id1,
                                gmlake_external_alloc alloc,
                                gmlake_external_free free, void* ctx,
                                void (*drop)(void* ctx)) {
  // Owned from here on, so that every way out drops the context once.
  auto memory = std::make_shared<CallbackMemory>(alloc, free, ctx, drop);
  if (alloc == nullptr || free == nullptr) {
    return Fail(absl::InvalidArgumentError(
        "gmlake_pool_create_external: alloc and free must not be NULL"));
  }
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  absl::Status s = d->CreateOrIncrefExternalPool({id0, id1}, std::move(memory));
  return s.ok() ? 0 : Fail(s);
}

namespace {
void CopyStat(const gmlake::StatPair& from, gmlake_stat* to) {
  to->current = from.current;
  to->peak = from.peak;
  to->allocated = from.allocated;
  to->freed = from.freed;
}

void CopyPooled(const gmlake::PooledStat& from, gmlake_stat* to) {
  CopyStat(from, &to[GMLAKE_STAT_ALL]);
  CopyStat(from.small, &to[GMLAKE_STAT_SMALL]);
  CopyStat(from.large, &to[GMLAKE_STAT_LARGE]);
}
}  // namespace

int gmlake_get_device_stats(int device, gmlake_device_stats* out,
                            size_t out_size) {
  if (out == nullptr || out_size != sizeof(gmlake_device_stats)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "gmlake_get_device_stats: the caller's gmlake_device_stats is ",
        out_size, " bytes, this libgmlake's ", sizeof(gmlake_device_stats),
        "; rebuild the caller against this gmlake.h")));
  }
  gmlake::DeviceAllocator* d = PoolDevice(device);
  if (d == nullptr) return -1;
  const gmlake::AllocatorStats st = d->stats();
  CopyPooled(st.allocation, out->allocation);
  CopyPooled(st.segment, out->segment);
  CopyPooled(st.active, out->active);
  CopyPooled(st.inactive_split, out->inactive_split);
  CopyPooled(st.allocated_bytes, out->allocated_bytes);
  CopyPooled(st.reserved_bytes, out->reserved_bytes);
  CopyPooled(st.active_bytes, out->active_bytes);
  CopyPooled(st.inactive_split_bytes, out->inactive_split_bytes);
  CopyPooled(st.requested_bytes, out->requested_bytes);
  out->num_alloc_retries = st.num_alloc_retries;
  out->num_ooms = st.num_ooms;
  out->num_sync_all_streams = st.num_sync_all_streams;
  out->num_device_alloc = st.chunks_acquired;
  out->num_device_free = st.chunks_returned;
  out->cached_free_bytes = std::max<int64_t>(
      0, st.reserved_bytes.current - st.allocated_bytes.current);
  return 0;
}

uint64_t gmlake_empty_cache(void) {
  gmlake::Allocator* a = Get();
  return a == nullptr ? 0 : a->EmptyCache();
}

int gmlake_set_capacity(int device, uint64_t bytes) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  absl::Status s = a->SetCapacity(device, bytes);
  return s.ok() ? 0 : Fail(s);
}

void gmlake_reset_peak_stats(void) {
  if (gmlake::Allocator* a = Get()) a->ResetPeaks();
}

int gmlake_set_memory_fraction(int device, double fraction) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  absl::Status s = a->SetMemoryFraction(device, fraction);
  return s.ok() ? 0 : Fail(s);
}

double gmlake_memory_fraction(int device) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  absl::StatusOr<double> f = a->MemoryFraction(device);
  if (!f.ok()) {
    Fail(f.status());
    return -1;
  }
  return *f;
}

int gmlake_reset_peaks(int device) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  a->ResetPeaks(device);
  return 0;
}

int gmlake_reset_accumulated(int device) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  a->ResetAccumulated(device);
  return 0;
}

int gmlake_record_history(uint64_t max_entries, int stacks, int context,
                          int clear) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  if (stacks < 0 || stacks > 2) {
    return Fail(absl::InvalidArgumentError(
        "stacks must be 0 (none), 1 (Python) or 2 (Python and C++)"));
  }
  if (context < 0 || context > 3) {
    return Fail(absl::InvalidArgumentError(
        "context must be 0 (none), 1 (state), 2 (alloc) or 3 (all)"));
  }
  a->RecordHistory(static_cast<size_t>(max_entries),
                   static_cast<gmlake::StackKind>(stacks),
                   static_cast<gmlake::HistoryContext>(context), clear != 0);
  return 0;
}

int gmlake_set_history_metadata(const char* metadata) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  a->SetHistoryMetadata(metadata == nullptr ? "" : metadata);
  return 0;
}

char* gmlake_stats_json(int device) {
  gmlake::Allocator* a = Get();
  return a == nullptr ? nullptr : gmlake::Dup(a->stats(device).ToJson());
}

char* gmlake_snapshot_json(void) {
  gmlake::Allocator* a = Get();
  return a == nullptr ? nullptr : gmlake::Dup(a->SnapshotJson());
}

void gmlake_free_string(char* s) { std::free(s); }

int gmlake_snapshot_visit(const gmlake_snapshot_visitor* visitor, void* ctx) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return -1;
  if (visitor == nullptr) {
    return Fail(absl::InvalidArgumentError(
        "gmlake_snapshot_visit: the visitor must not be NULL"));
  }
  for (int dev = 0; dev < a->device_count(); ++dev) {
    gmlake::DeviceAllocator* d = *a->device(dev);
    if (visitor->segment != nullptr) {
      std::vector<gmlake_block_view> blocks;
      for (const auto& s : d->Segments()) {
        blocks.clear();
        for (const auto& b : s.blocks) {
          blocks.push_back({b.addr, b.size, b.requested, b.allocated ? 1 : 0,
                            b.active ? 1 : 0, b.stack});
        }
        const gmlake_segment_view view{
            dev,          s.addr,       s.total,       s.allocated,
            s.active,     s.requested,  s.stream,      s.small ? 0 : 1,
            s.expandable, s.pool.first, s.pool.second, blocks.data(),
            blocks.size()};
        visitor->segment(ctx, &view);
      }
    }
    if (visitor->trace != nullptr) {
      const gmlake::TraceRecorder& t = d->trace();
      for (const gmlake::TraceEntry& e : t.Entries()) {
        const std::string metadata = t.UserMetadata(e.user_metadata);
        const std::string compile_context =
            gmlake::TraceRecorder::CompileContextName(e.compile_context);
        const gmlake_trace_view view{dev,
                                     static_cast<int>(e.action),
                                     e.addr,
                                     e.size,
                                     e.stream,
                                     e.time_us,
                                     e.device_free,
                                     e.stack,
                                     metadata.c_str(),
                                     compile_context.c_str()};
        visitor->trace(ctx, &view);
      }
    }
  }
  return 0;
}

int gmlake_push_compile_context(const char* name) {
  if (name == nullptr) {
    return Fail(absl::InvalidArgumentError(
        "gmlake_push_compile_context: the name must not be NULL"));
  }
  gmlake::TraceRecorder::PushCompileContext(name);
  return 0;
}

int gmlake_pop_compile_context(void) {
  gmlake::TraceRecorder::PopCompileContext();
  return 0;
}

int gmlake_set_stack_gatherer(void* (*gather)(void* ctx, int cpp),
                              void (*frames)(void* ctx, void* handle,
                                             gmlake_frame_sink sink,
                                             void* sink_ctx),
                              void (*release)(void* ctx, void* handle),
                              void (*forward)(void* ctx, void* handle,
                                              gmlake_text_sink sink,
                                              void* sink_ctx),
                              void* ctx) {
  if (gather == nullptr) {
    gmlake::SetStackGatherer(nullptr);
    return 0;
  }
  gmlake::StackGatherer g;
  g.gather = gather;
  g.frames = frames;
  g.release = release;
  g.forward = forward;
  g.ctx = ctx;
  gmlake::SetStackGatherer(&g);
  return 0;
}

namespace {
struct CSegmentObserver {
  void (*observe)(void* ctx, const gmlake_segment_event* e) = nullptr;
  void* ctx = nullptr;
};
// Written only with none installed, under the setter's lock.
gmlake::Mutex c_segment_observer_mu;
CSegmentObserver c_segment_observer;

void ObserveSegmentInC(void* ctx, const gmlake::SegmentEvent& event) {
  const auto* o = static_cast<const CSegmentObserver*>(ctx);
  gmlake_segment_event e;
  e.device = event.device;
  e.action = static_cast<int>(event.action);
  e.addr = event.addr;
  e.size = event.size;
  e.stream = event.stream;
  e.pool_id0 = event.pool.first;
  e.pool_id1 = event.pool.second;
  o->observe(o->ctx, &e);
}
}  // namespace

int gmlake_set_segment_observer(void (*observe)(void* ctx,
                                                const gmlake_segment_event* e),
                                void* ctx) {
  gmlake::MutexLock lock(&c_segment_observer_mu);
  gmlake::SetSegmentObserver(nullptr);  // no call in progress after this
  if (observe == nullptr) return 0;
  c_segment_observer = {observe, ctx};
  gmlake::SegmentObserver o;
  o.observe = &ObserveSegmentInC;
  o.ctx = &c_segment_observer;
  gmlake::SetSegmentObserver(&o);
  return 0;
}

void* gmlake_stack_handle(int device, uint32_t stack) {
  gmlake::Allocator* a = Get();
  if (a == nullptr) return nullptr;
  absl::StatusOr<gmlake::DeviceAllocator*> d = a->device(device);
  if (!d.ok()) return nullptr;
  return (*d)->trace().StackHandle(stack);
}

const char* gmlake_last_error(void) { return gmlake::last_error.c_str(); }

const char* gmlake_describe(void) {
  if (gmlake::RefusedAfterFork()) return nullptr;
  gmlake::Global& g = gmlake::G();
  gmlake::MutexLock lock(&g.mu);
  return g.allocator == nullptr ? nullptr : g.description.c_str();
}

int gmlake_torch_try_malloc(ssize_t size, int device, void* stream, void** ptr,
                            int* out_of_memory) {
  void* p = nullptr;
  int oom = 0;
  const int rc = gmlake::TorchTryMalloc(size, device, stream, &p, &oom);
  if (ptr != nullptr) *ptr = p;
  if (out_of_memory != nullptr) *out_of_memory = oom;
  return rc;
}

void* gmlake_torch_malloc(ssize_t size, int device, void* stream) {
  void* p = nullptr;
  int oom = 0;
  // PyTorch's CUDAPluggableAllocator takes whatever pointer comes back, and
  // a null becomes a tensor at address 0: the first kernel on it is an
  // illegal memory access that poisons the CUDA context. A C++ exception
  // reaches Python as a RuntimeError the script can catch.
  if (gmlake::TorchTryMalloc(size, device, stream, &p, &oom) != 0) {
    throw std::runtime_error(gmlake::last_error);
  }
  return p;
}

void gmlake_torch_free(void* ptr, ssize_t /*size*/, int device,
                       void* /*stream*/) {
  if (gmlake::RefusedAfterFork()) {
    // A forked child dropping a tensor it inherited (a DataLoader worker's
    // copy of a dataset): the memory is the parent's; nothing to do, and
    // said once.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      std::fprintf(stderr,
                   "gmlake: frees in this forked child (pid %d) are ignored: "
                   "the memory belongs to the parent\n",
                   static_cast<int>(getpid()));
    }
    return;
  }
  // PyTorch names the device: only its allocator is asked.
  gmlake::Allocator* a = Get();
  if (a != nullptr) {
    const absl::Status s =
        a->Free(reinterpret_cast<gmlake::DevicePtr>(ptr), device);
    if (s.ok()) return;
    Fail(s);
  }
  std::fprintf(stderr, "gmlake: %s\n", gmlake_last_error());
}

void gmlake_torch_record_stream(void* ptr, void* stream) {
  // An empty tensor's storage has no memory to protect.
  if (ptr == nullptr) return;
  gmlake::Allocator* a = Get();
  if (a == nullptr) return;
  absl::Status s = a->RecordStream(reinterpret_cast<gmlake::DevicePtr>(ptr),
                                   reinterpret_cast<uint64_t>(stream));
  if (s.ok()) return;
  Fail(s);
  // Memory gmlake did not hand out (from_blob, DLPack) is not its to guard,
  // as PyTorch's own allocator ignores what is not its own.
  if (!absl::IsNotFound(s)) {
    std::fprintf(stderr, "gmlake: %s\n", gmlake_last_error());
  }
}

void gmlake_torch_empty_cache(void) { gmlake_empty_cache(); }

void gmlake_torch_set_memory_fraction(double fraction, int device) {
  if (gmlake_set_memory_fraction(device, fraction) != 0) {
    std::fprintf(stderr, "gmlake: set_per_process_memory_fraction: %s\n",
                 gmlake_last_error());
  }
}

}  // extern "C"
