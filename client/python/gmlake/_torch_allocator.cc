// Copyright 2026 The GMLake Authors.
//
// GMLake as PyTorch's own CUDA allocator: a subclass of
// c10::cuda::CUDACachingAllocator::CUDAAllocator over libgmlake's C API
// (docs/design.md, "The native PyTorch door").
//
// CUDAPluggableAllocator, the door PyTorch offers to other allocators, takes
// malloc and free and refuses the rest: the pool calls CUDA graphs and
// torch.cuda.MemPool need, cacheInfo (cuDNN), the statistics. Any subclass
// of CUDAAllocator may be installed instead, before CUDA starts, with
// torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator. This is one.
//
// gmlake/_door.py compiles this file against the torch that is installed,
// the first time gmlake.enable() runs there, caches it, and calls
// gmlake_torch_door_install with the path of the libgmlake.so it loaded;
// the door finds the C API there with dlsym, so both use the one allocator
// of the process. Where the build fails, gmlake keeps the pluggable door.

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/types.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gmlake.h"

namespace gmlake_door {
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

// libgmlake's C API, found in the library Python loaded.
struct Api {
  decltype(&gmlake_torch_try_malloc) try_malloc = nullptr;
  decltype(&gmlake_free) free = nullptr;
  decltype(&gmlake_record_stream) record_stream = nullptr;
  decltype(&gmlake_empty_cache) empty_cache = nullptr;
  decltype(&gmlake_set_memory_fraction) set_memory_fraction = nullptr;
  decltype(&gmlake_memory_fraction) memory_fraction = nullptr;
  decltype(&gmlake_reset_peaks) reset_peaks = nullptr;
  decltype(&gmlake_reset_accumulated) reset_accumulated = nullptr;
  decltype(&gmlake_get_device_stats) device_stats = nullptr;
  decltype(&gmlake_pool_create_or_incref) pool_create = nullptr;
  decltype(&gmlake_pool_begin_allocate) pool_begin = nullptr;
  decltype(&gmlake_pool_end_allocate) pool_end = nullptr;
  decltype(&gmlake_pool_release) pool_release = nullptr;
  decltype(&gmlake_pool_live) pool_live = nullptr;
  decltype(&gmlake_pool_use_count) pool_use_count = nullptr;
  decltype(&gmlake_pool_live_blocks) pool_live_blocks = nullptr;
  decltype(&gmlake_pool_malloc_at) pool_malloc_at = nullptr;
  decltype(&gmlake_pool_create_external) pool_create_external = nullptr;
  decltype(&gmlake_pool_set_use_on_oom) pool_set_use_on_oom = nullptr;
  decltype(&gmlake_pool_set_no_split) pool_set_no_split = nullptr;
  decltype(&gmlake_record_history) record_history = nullptr;
  decltype(&gmlake_snapshot_visit) snapshot_visit = nullptr;
  decltype(&gmlake_set_stack_gatherer) set_stack_gatherer = nullptr;
  decltype(&gmlake_stack_handle) stack_handle = nullptr;
  decltype(&gmlake_push_compile_context) push_compile_context = nullptr;
  decltype(&gmlake_pop_compile_context) pop_compile_context = nullptr;
  decltype(&gmlake_set_segment_observer) set_segment_observer = nullptr;
  decltype(&gmlake_ipc_share) ipc_share = nullptr;
  decltype(&gmlake_ipc_open) ipc_open = nullptr;
  decltype(&gmlake_ipc_close) ipc_close = nullptr;
  decltype(&gmlake_last_error) last_error = nullptr;
};

template <typename F>
bool Bind(void* lib, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr)
    *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *out != nullptr;
}

// Stream capture forbids "unsafe" driver calls on a capturing thread; the
// cuMem calls a malloc that must grow makes are such calls. PyTorch's own
// allocator relaxes the mode around cudaMalloc; gmlake does the same around
// every malloc and free made while a route into a pool is open. Errors are
// ignored: this runs inside deleters, which must not throw.
class RelaxedCapture {
 public:
  explicit RelaxedCapture(bool on) : on_(on) {
    if (on_) cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  ~RelaxedCapture() {
    if (on_) cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  bool on_;
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// PyTorch's stream filter for a route, called by gmlake under its lock.
struct RouteFilter {
  std::function<bool(cudaStream_t)> accepts;
};

int CallFilter(void* ctx, uint64_t stream) {
  try {
    return static_cast<RouteFilter*>(ctx)->accepts(
               reinterpret_cast<cudaStream_t>(stream))
               ? 1
               : 0;
  } catch (...) {
    return 0;  // a filter that throws accepts nothing (it runs in C code)
  }
}

// A pool as a CUDA graph tree checkpointed it (getCheckpointState): the
// blocks live then, with their sizes.
struct GMLakePoolState : cca::AllocatorState {
  c10::DeviceIndex device = 0;
  c10::MempoolId_t id{0, 0};
  std::vector<std::pair<void*, size_t>> live;
};

void Delete(void* ptr);
void DeleteUncached(void* ptr);

// --- history stacks: PyTorch's own gatherer (gmlake_set_stack_gatherer) ---
// gmlake asks for a stack on each call its history keeps one for. The door
// gathers it as PyTorch's allocator would: with the recorder recordHistory
// was given (C++ callers), else Python and TorchScript frames (and C++ ones
// when gmlake asks: stacks="all"). Frames then name TorchScript functions,
// and the C++ snapshot gets PyTorch's own objects back (snapshot()).
std::atomic<cca::CreateContextFn> history_recorder{nullptr};

using Context = std::shared_ptr<c10::GatheredContext>;

void* GatherStack(void* /*ctx*/, int cpp) {
  try {
    Context c;
    if (cca::CreateContextFn recorder = history_recorder.load()) {
      c = recorder();
    } else {
      c = torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true,
                                           /*cpp=*/cpp != 0);
    }
    return c == nullptr ? nullptr : new Context(std::move(c));
  } catch (...) {
    return nullptr;  // no stack rather than an exception into gmlake
  }
}

void StackFrames(void* /*ctx*/, void* handle, gmlake_frame_sink sink,
                 void* sink_ctx) {
  try {
    auto* tb = dynamic_cast<torch::CapturedTraceback*>(
        static_cast<Context*>(handle)->get());
    if (tb == nullptr) return;
    torch::SymbolizedTracebacks s = torch::symbolize({tb});
    if (s.tracebacks.empty()) return;
    for (uint64_t i : s.tracebacks[0]) {
      const auto& f = s.all_frames.at(i);
      sink(sink_ctx, f.filename.c_str(), f.funcname.c_str(),
           static_cast<int>(f.lineno));
    }
  } catch (...) {
  }
}

// Anomaly mode's forward trace, which CapturedTraceback::gather takes from
// the autograd node being run (the snapshot's "forward_frames").
void StackForward(void* /*ctx*/, void* handle, gmlake_text_sink sink,
                  void* sink_ctx) {
  try {
    auto* tb = dynamic_cast<torch::CapturedTraceback*>(
        static_cast<Context*>(handle)->get());
    if (tb == nullptr || !tb->forward_traceback().has_value()) return;
    for (const std::string& line : *tb->forward_traceback()) {
      sink(sink_ctx, line.c_str());
    }
  } catch (...) {
  }
}

void ReleaseStack(void* /*ctx*/, void* handle) {
  delete static_cast<Context*>(handle);
}

// gmlake_snapshot_visit into PyTorch's SnapshotInfo.
struct SnapshotVisit {
  const Api* api;
  cca::SnapshotInfo* info;
  c10::MempoolId_t pool;  // {0, 0}: every segment
};

Context ContextOf(const Api& api, int device, uint32_t stack) {
  if (stack == GMLAKE_NO_STACK) return nullptr;
  void* h = api.stack_handle(device, stack);
  return h == nullptr ? nullptr : *static_cast<Context*>(h);
}

void VisitSegment(void* ctx, const gmlake_segment_view* s) {
  auto* v = static_cast<SnapshotVisit*>(ctx);
  if ((v->pool.first != 0 || v->pool.second != 0) &&
      (s->pool_id0 != v->pool.first || s->pool_id1 != v->pool.second)) {
    return;
  }
  cca::SegmentInfo seg;
  seg.device = static_cast<c10::DeviceIndex>(s->device);
  seg.address = s->address;
  seg.total_size = s->total_size;
  seg.requested_size = s->requested_size;
  seg.allocated_size = s->allocated_size;
  seg.active_size = s->active_size;
  seg.stream = reinterpret_cast<void*>(s->stream);
  seg.is_large = s->is_large != 0;
  seg.is_expandable = s->is_expandable != 0;
  seg.owner_private_pool_id = {s->pool_id0, s->pool_id1};
  for (size_t i = 0; i < s->num_blocks; ++i) {
    const gmlake_block_view& b = s->blocks[i];
    cca::BlockInfo block;
    block.size = b.size;
    block.requested_size = b.requested_size;
    block.allocated = b.allocated != 0;
    block.active = b.active != 0;
    block.context_when_allocated = ContextOf(*v->api, s->device, b.stack);
    seg.blocks.push_back(std::move(block));
  }
  v->info->segments.push_back(std::move(seg));
}

void VisitTrace(void* ctx, const gmlake_trace_view* t) {
  auto* v = static_cast<SnapshotVisit*>(ctx);
  using Action = cca::TraceEntry::Action;
  static constexpr Action kActions[] = {
      Action::ALLOC,         Action::FREE_REQUESTED, Action::FREE_COMPLETED,
      Action::SEGMENT_MAP,   Action::SEGMENT_UNMAP,  Action::OOM,
      Action::SEGMENT_ALLOC, Action::SEGMENT_FREE};
  if (t->action < 0 || t->action >= 8) return;
  const Action action = kActions[t->action];
  if (t->device >= static_cast<int>(v->info->device_traces.size())) {
    v->info->device_traces.resize(t->device + 1);
  }
  cca::TraceEntry e(action, static_cast<c10::DeviceIndex>(t->device),
                    action == Action::OOM ? t->device_free : t->addr, t->size,
                    reinterpret_cast<void*>(t->stream), {0, 0},
                    /*time=*/0, ContextOf(*v->api, t->device, t->stack),
                    t->compile_context != nullptr ? t->compile_context : "N/A",
                    t->user_metadata != nullptr ? t->user_metadata : "");
  // PyTorch's snapshot() turns its clock into microseconds; gmlake's is one.
  e.time_.t_ = static_cast<time_t>(t->time_us);
  v->info->device_traces[t->device].push_back(std::move(e));
}

class GMLakeAllocator final : public cca::CUDAAllocator {
 public:
  explicit GMLakeAllocator(const Api& api) : api_(api) {}

  // --- c10::Allocator ---
  c10::DataPtr allocate(size_t n) override {
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    const c10::Device where(c10::DeviceType::CUDA, device);
    if (n != 0 && !enabled_.load(std::memory_order_relaxed)) {
      void* p = MallocUncached(n);
      return {p, p, &DeleteUncached, where};
    }
    void* p = n == 0
                  ? nullptr
                  : Malloc(n, device, c10::cuda::getCurrentCUDAStream(device));
    return {p, p, &Delete, where};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }

  // --- raw allocations (cuDNN workspaces, cuBLAS, NCCL, inductor) ---
  void* raw_alloc(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    if (!enabled_.load(std::memory_order_relaxed)) {
      return MallocUncached(nbytes);
    }
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    return Malloc(nbytes, device, c10::cuda::getCurrentCUDAStream(device));
  }
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    if (nbytes == 0) return nullptr;
    if (!enabled_.load(std::memory_order_relaxed)) {
      return MallocUncached(nbytes);
    }
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    return Malloc(nbytes, device, stream);
  }
  void raw_delete(void* ptr) override {
    if (!FreeUncached(ptr)) Free(ptr);
  }

  // With caching off (torch.cuda.caching_allocator_enable(False)) PyTorch's
  // allocator calls cudaMalloc and cudaFree for each block, which its
  // statistics do not count; so does this door.
  void* MallocUncached(size_t n) {
    void* p = nullptr;
    C10_CUDA_CHECK(cudaMalloc(&p, n));
    std::lock_guard<std::mutex> lock(mu_);
    uncached_.insert(p);
    uncached_count_.store(uncached_.size(), std::memory_order_relaxed);
    return p;
  }
  // Whether `ptr` was such a block (then freed).
  bool FreeUncached(void* ptr) {
    if (ptr == nullptr ||
        uncached_count_.load(std::memory_order_relaxed) == 0) {
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (uncached_.erase(ptr) == 0) return false;
      uncached_count_.store(uncached_.size(), std::memory_order_relaxed);
    }
    C10_CUDA_CHECK_WARN(cudaFree(ptr));
    return true;
  }

  void Free(void* ptr) {
    if (ptr == nullptr) return;
    if (profiled_.load(std::memory_order_relaxed)) Unprofile(ptr);
    RelaxedCapture relaxed(routes_open_.load(std::memory_order_relaxed) > 0);
    if (api_.free(ptr) == 0) return;
    const char* error = api_.last_error();
    // A forked child (a DataLoader worker) dropping tensors it inherited:
    // the memory is the parent's; said once, not per tensor.
    if (std::strstr(error, "was forked from") != nullptr) {
      static std::atomic<bool> said{false};
      if (said.exchange(true)) return;
    }
    std::fprintf(
        stderr, "%s%s\n",
        std::strncmp(error, "gmlake", 6) == 0 ? "" : "gmlake: ", error);
  }

  // --- set-up ---
  void init(int device_count) override {
    device_count_ = device_count;
    ApplyConfiguredFraction(device_count);
    initialized_.store(true);
  }

  // PYTORCH_ALLOC_CONF's (or PYTORCH_CUDA_ALLOC_CONF's)
  // per_process_memory_fraction, which PyTorch's allocator applies to
  // every device when it starts; refused in PyTorch's words.
  void ApplyConfiguredFraction(int device_count) {
    for (const char* var : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
      const char* conf = std::getenv(var);
      if (conf == nullptr) continue;
      const std::string text(conf);
      const std::string key = "per_process_memory_fraction:";
      size_t at = text.find(key);
      while (at != std::string::npos && at != 0 && text[at - 1] != ',') {
        at = text.find(key, at + 1);
      }
      if (at == std::string::npos) continue;
      const std::string value =
          text.substr(at + key.size(), text.find(',', at) - at - key.size());
      char* end = nullptr;
      const double fraction = std::strtod(value.c_str(), &end);
      TORCH_CHECK_VALUE(!value.empty() && end != nullptr && *end == '\0' &&
                            fraction >= 0.0 && fraction <= 1.0,
                        "per_process_memory_fraction is invalid, set it in "
                        "[0.0, 1.0] (",
                        var, "=", text, ")");
      for (int d = 0; d < device_count; ++d) {
        TORCH_CHECK(api_.set_memory_fraction(d, fraction) == 0, "gmlake: ", var,
                    " per_process_memory_fraction: ", api_.last_error());
      }
      return;
    }
  }
  bool initialized() override { return initialized_.load(); }
  void enable(bool value) override { enabled_.store(value); }
  bool isEnabled() const override { return enabled_.load(); }
  std::string name() override { return "gmlake"; }

  double getMemoryFraction(c10::DeviceIndex device) override {
    const double f = api_.memory_fraction(device);
    TORCH_CHECK(f >= 0, "gmlake: ", api_.last_error());
    return f;
  }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    TORCH_CHECK(api_.set_memory_fraction(device, fraction) == 0,
                "gmlake: ", api_.last_error());
  }

  // gmlake's segments are stitched, not expandable: none to report.
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(
      c10::DeviceIndex /*device*/) override {
    return {};
  }

  // cuDNN sizes its workspace by this. gmlake stitches any request from
  // its free blocks and the lake, so the largest block it can hand out is
  // what the device has free plus what gmlake holds free, within the
  // process's cap; as PyTorch's, it never lowers the guess passed in.
  void cacheInfo(c10::DeviceIndex device, size_t* largestBlock) override {
    gmlake_device_stats st;
    TORCH_CHECK(api_.device_stats(device, &st, sizeof(st)) == 0,
                "gmlake: ", api_.last_error());
    size_t device_free = 0, total = 0;
    {
      c10::cuda::CUDAGuard guard(device);
      C10_CUDA_CHECK(cudaMemGetInfo(&device_free, &total));
    }
    uint64_t largest =
        device_free + static_cast<uint64_t>(st.cached_free_bytes);
    const double fraction = api_.memory_fraction(device);
    if (fraction > 0 && fraction < 1) {
      const int64_t cap = static_cast<int64_t>(fraction * total) -
                          st.allocated_bytes[GMLAKE_STAT_ALL].current;
      largest = std::min<uint64_t>(largest, std::max<int64_t>(cap, 0));
    }
    *largestBlock = std::max<size_t>(*largestBlock, largest);
  }

  // A gmlake allocation is its own base (stitching is below the address).
  void* getBaseAllocation(void* ptr, size_t* size) override {
    if (size != nullptr) *size = 0;
    return ptr;
  }

  void recordStream(const c10::DataPtr& ptr,
                    c10::cuda::CUDAStream stream) override {
    // Memory gmlake did not hand out (from_blob, IPC) is not its to guard.
    if (ptr.get() == nullptr || ptr.get_deleter() != &Delete) return;
    TORCH_CHECK(api_.record_stream(ptr.get(), reinterpret_cast<uint64_t>(
                                                  stream.stream())) == 0,
                "gmlake: record_stream: ", api_.last_error());
  }

  // --- statistics, in PyTorch's own structure ---
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex device) override {
    gmlake_device_stats st;
    TORCH_CHECK(api_.device_stats(device, &st, sizeof(st)) == 0,
                "gmlake: ", api_.last_error());
    c10::CachingDeviceAllocator::DeviceStats out;
    Copy(st.allocation, &out.allocation);
    Copy(st.segment, &out.segment);
    Copy(st.active, &out.active);
    Copy(st.inactive_split, &out.inactive_split);
    Copy(st.allocated_bytes, &out.allocated_bytes);
    Copy(st.reserved_bytes, &out.reserved_bytes);
    Copy(st.active_bytes, &out.active_bytes);
    Copy(st.inactive_split_bytes, &out.inactive_split_bytes);
    Copy(st.requested_bytes, &out.requested_bytes);
    out.num_alloc_retries = st.num_alloc_retries;
    out.num_ooms = st.num_ooms;
    out.num_sync_all_streams = st.num_sync_all_streams;
    out.num_device_alloc = st.num_device_alloc;
    out.num_device_free = st.num_device_free;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    TORCH_CHECK(api_.reset_accumulated(device) == 0,
                "gmlake: ", api_.last_error());
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    TORCH_CHECK(api_.reset_peaks(device) == 0, "gmlake: ", api_.last_error());
  }

  // Segments and traces for C++ callers
  // (torch::cuda::_memory_snapshot_pickled); Python's
  // torch.cuda.memory._snapshot() is gmlake/_snapshot.py's.
  cca::SnapshotInfo snapshot(c10::MempoolId_t mempool_id,
                             bool include_traces) override {
    cca::SnapshotInfo info;
    info.device_traces.resize(std::max(device_count_, 1));
    info.config_metadata.garbage_collection_threshold = 0;
    info.config_metadata.max_split_size = SIZE_MAX;
    info.config_metadata.pinned_num_register_threads = 1;
    info.config_metadata.expandable_segments = false;
    info.config_metadata.release_lock_on_malloc = false;
    info.config_metadata.pinned_use_host_register = false;
    info.config_metadata.graph_capture_record_stream_reuse = false;
    info.config_metadata.last_allocator_settings = "gmlake";
    SnapshotVisit visit{&api_, &info, mempool_id};
    const gmlake_snapshot_visitor visitor{
        &VisitSegment, include_traces ? &VisitTrace : nullptr};
    TORCH_CHECK(api_.snapshot_visit(&visitor, &visit) == 0,
                "gmlake: snapshot: ", api_.last_error());
    return info;
  }
  // C++ callers' history (torch::cuda::_record_memory_history): gmlake's,
  // with PyTorch's recorder for the stacks. Python's
  // torch.cuda.memory._record_memory_history is routed to gmlake directly
  // (gmlake/_torch.py) and gets the same stacks through GatherStack.
  bool isHistoryEnabled() override { return history_on_.load(); }
  void recordHistory(bool enabled, cca::CreateContextFn recorder,
                     size_t max_entries, cca::RecordContext when, bool clear,
                     const std::vector<std::string>& /*skip*/) override {
    history_recorder.store(enabled ? recorder : nullptr);
    // PyTorch's RecordContext numbers are gmlake's contexts.
    const int context = enabled ? static_cast<int>(when) : 0;
    const int stacks = context != 0 && recorder != nullptr ? 1 : 0;
    TORCH_CHECK(api_.record_history(enabled ? max_entries : 0, stacks, context,
                                    clear ? 1 : 0) == 0,
                "gmlake: recordHistory: ", api_.last_error());
    history_on_.store(enabled);
  }
  // torch.compile's regions, pushed by PyTorch's record-function callbacks
  // (installed by _record_memory_history(compile_context=True)).
  void pushCompileContext(std::string& md) override {
    api_.push_compile_context(md.c_str());
  }
  void popCompileContext() override { api_.pop_compile_context(); }
  // PyTorch's trace trackers; ProcessGroupNCCL's register each SEGMENT_ALLOC
  // of a pool given to register_mem_pool with NCCL and deregister it at its
  // SEGMENT_FREE. gmlake tells the door of segment events only
  // (gmlake_set_segment_observer): another allocator's segments
  // (MemPool(allocator=ncclMemAlloc)) as SEGMENT_ALLOC/SEGMENT_FREE, its own
  // mapped pages as SEGMENT_MAP/SEGMENT_UNMAP, as PyTorch's expandable
  // segments report theirs (and NCCL's hooks ignore). Per-block events
  // (ALLOC, FREE_*) are not sent: no tracker we know reads them, and each
  // malloc would pay the call.
  void attachAllocatorTraceTracker(
      cca::AllocatorTraceTracker tracker) override {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(trackers_mu_);
      first = trackers_ == nullptr;
      auto next = std::make_shared<std::vector<cca::AllocatorTraceTracker>>(
          first ? std::vector<cca::AllocatorTraceTracker>{} : *trackers_);
      next->push_back(std::move(tracker));
      trackers_ = std::move(next);  // copied on write: TellTrackers reads
    }
    if (first) api_.set_segment_observer(&TellTrackers, this);
  }
  // gmlake's observer: runs under gmlake's lock on the allocating thread,
  // as PyTorch runs its trackers under its own.
  static void TellTrackers(void* ctx, const gmlake_segment_event* s) {
    using Action = cca::TraceEntry::Action;
    Action action;
    switch (s->action) {
      case GMLAKE_SEGMENT_MAP:
        action = Action::SEGMENT_MAP;
        break;
      case GMLAKE_SEGMENT_UNMAP:
        action = Action::SEGMENT_UNMAP;
        break;
      case GMLAKE_SEGMENT_ALLOC:
        action = Action::SEGMENT_ALLOC;
        break;
      case GMLAKE_SEGMENT_FREE:
        action = Action::SEGMENT_FREE;
        break;
      default:
        return;
    }
    auto* door = static_cast<GMLakeAllocator*>(ctx);
    std::shared_ptr<const std::vector<cca::AllocatorTraceTracker>> trackers;
    {
      std::lock_guard<std::mutex> lock(door->trackers_mu_);
      trackers = door->trackers_;
    }
    if (trackers == nullptr) return;
    const cca::TraceEntry e(action, static_cast<c10::DeviceIndex>(s->device),
                            s->addr, s->size,
                            reinterpret_cast<cudaStream_t>(s->stream),
                            {s->pool_id0, s->pool_id1}, /*time=*/0,
                            /*context=*/nullptr, "N/A", "");
    for (const cca::AllocatorTraceTracker& t : *trackers) {
      try {
        t(e);
      } catch (...) {
        // A tracker that throws must not unwind through gmlake's C code.
      }
    }
  }

  void emptyCache(c10::MempoolId_t mempool_id) override {
    // A pool's free memory went back to the lake when it was released
    // (MemPool's destructor calls this right after releasePool): nothing
    // of the rest of the cache is given back for it.
    if (mempool_id.first != 0 || mempool_id.second != 0) return;
    api_.empty_cache();
  }

  // --- private pools: CUDA graphs and torch.cuda.MemPool ---
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t id,
                           std::function<bool(cudaStream_t)> filter) override {
    // PyTorch's beginAllocateToPool takes a reference on the pool (made if
    // unknown) that releasePool drops: CUDAGraph::reset and use_mem_pool's
    // exit call it. gmlake's begin takes one only for an unknown pool, so
    // the door takes it here; graphs sharing a pool then each hold one.
    TORCH_CHECK(api_.pool_create(device, id.first, id.second) == 0,
                "gmlake: beginAllocateToPool: ", api_.last_error());
    auto f = std::make_unique<RouteFilter>();
    f->accepts = std::move(filter);
    RouteFilter* raw = f.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      filters_[{device, id}].push_back(std::move(f));
      routes_open_.fetch_add(1);
    }
    if (api_.pool_begin(device, id.first, id.second, &CallFilter, raw) != 0) {
      const std::string message(api_.last_error());
      DropFilters(device, id);
      api_.pool_release(device, id.first, id.second);
      TORCH_CHECK(false, "gmlake: beginAllocateToPool: ", message);
    }
  }
  void endAllocateToPool(c10::DeviceIndex device,
                         c10::MempoolId_t id) override {
    const int rc = api_.pool_end(device, id.first, id.second);
    DropFilters(device, id);  // gmlake calls them no more
    TORCH_CHECK(rc == 0, "gmlake: endAllocateToPool: ", api_.last_error());
  }
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t id) override {
    TORCH_CHECK(api_.pool_release(device, id.first, id.second) >= 0,
                "gmlake: releasePool: ", api_.last_error());
  }
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t id) override {
    const int n = api_.pool_use_count(device, id.first, id.second);
    TORCH_CHECK(n >= 0, "gmlake: getPoolUseCount: ", api_.last_error());
    return n;
  }
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t id,
                          std::shared_ptr<CUDAAllocator> allocator) override {
    if (allocator != nullptr && allocator.get() != this) {
      // torch.cuda.MemPool(allocator=...): gmlake caches that allocator's
      // segments as PyTorch does; the context keeps it alive until gmlake
      // drops it (the pool and its last block gone).
      auto* ctx = new std::shared_ptr<CUDAAllocator>(std::move(allocator));
      TORCH_CHECK(
          api_.pool_create_external(device, id.first, id.second, &ExternalAlloc,
                                    &ExternalFree, ctx, &ExternalDrop) == 0,
          "gmlake: createOrIncrefPool: ", api_.last_error());
      return;
    }
    TORCH_CHECK(api_.pool_create(device, id.first, id.second) == 0,
                "gmlake: createOrIncrefPool: ", api_.last_error());
  }
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t id,
                   bool use_on_oom) override {
    TORCH_CHECK(api_.pool_set_use_on_oom(device, id.first, id.second,
                                         use_on_oom ? 1 : 0) == 0,
                "gmlake: setUseOnOOM: ", api_.last_error());
  }
  void setNoSplit(c10::DeviceIndex device, c10::MempoolId_t id) override {
    TORCH_CHECK(api_.pool_set_no_split(device, id.first, id.second) == 0,
                "gmlake: setNoSplit: ", api_.last_error());
  }
  bool checkPoolLiveAllocations(
      c10::DeviceIndex device, c10::MempoolId_t id,
      const std::unordered_set<void*>& expected) override {
    const std::vector<void*> live = PoolLive(device, id);
    if (live.size() != expected.size()) return false;
    return std::all_of(live.begin(), live.end(),
                       [&](void* p) { return expected.count(p) != 0; });
  }

  // CUDA graph trees (torch.compile mode="reduce-overhead") checkpoint a
  // pool after each recording: the blocks live then.
  std::shared_ptr<cca::AllocatorState> getCheckpointState(
      c10::DeviceIndex device, c10::MempoolId_t id) override {
    auto state = std::make_shared<GMLakePoolState>();
    state->device = device;
    state->id = id;
    state->live = PoolLiveBlocks(device, id);
    return state;
  }
  // ...and rewind it there before recording again in the middle of a path:
  // as PyTorch's allocator, every block live in the pool now counts as
  // freed and every block of the checkpoint as allocated anew, at its
  // address (DataPtrs the tree hands to the storages still alive). Blocks
  // in both stay allocated in gmlake; the others are freed, or allocated
  // at their address (gmlake_pool_malloc_at).
  cca::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex device,
      std::shared_ptr<cca::AllocatorState> as) override {
    auto state = std::dynamic_pointer_cast<GMLakePoolState>(as);
    TORCH_CHECK(state != nullptr,
                "gmlake: setCheckpointPoolState got a state gmlake did not "
                "make");
    TORCH_CHECK(state->device == device, "gmlake: a checkpoint of device ",
                state->device, " restored on device ", device);
    const c10::MempoolId_t id = state->id;
    std::map<void*, size_t> want(state->live.begin(), state->live.end());
    cca::CheckpointDelta delta;
    for (const auto& [p, size] : PoolLiveBlocks(device, id)) {
      delta.ptrs_freed.push_back(p);
      auto it = want.find(p);
      if (it != want.end() && it->second == size) continue;  // stays
      Free(p);
    }
    const auto now = PoolLiveBlocks(device, id);
    const std::map<void*, size_t> kept(now.begin(), now.end());
    for (const auto& [p, size] : want) {
      if (kept.count(p) == 0) {
        TORCH_CHECK(
            api_.pool_malloc_at(device, id.first, id.second, p, size) == p,
            "gmlake: restoring a CUDA graph tree's checkpoint: ",
            api_.last_error(),
            ". Set torch._inductor.config.triton.cudagraph_trees = False "
            "(plain CUDA graphs) to avoid checkpoints");
      }
      delta.dataptrs_allocd.emplace_back(
          p, p, &Delete, c10::Device(c10::DeviceType::CUDA, device));
    }
    return delta;
  }

  // --- CUDA IPC (torch.multiprocessing, Tensor.share_memory_) ---
  // gmlake's memory is cuMem chunks stitched under one address range, which
  // cudaIpcGetMemHandle cannot export: gmlake serves the chunks themselves
  // (gmlake_ipc_share: descriptors over a Unix socket of this process) and
  // the handle names them. A gmlake allocation is its own base: offset 0.
  cca::ShareableHandle shareIpcHandle(void* ptr) override {
    char handle[GMLAKE_IPC_HANDLE_MAX];
    size_t len = 0;
    TORCH_CHECK(api_.ipc_share(ptr, handle, &len) == 0,
                "gmlake: sharing a CUDA tensor with another process: ",
                api_.last_error());
    return cca::ShareableHandle{0, std::string(handle, len)};
  }
  // Opens what another process shared: a gmlake handle (the receiver runs
  // gmlake too), or a cudaMalloc block of PyTorch's own allocator (version
  // byte, 'c', cudaIpcMemHandle_t; or the bare handle of old PyTorch). Each
  // handle is opened once per process, as CUDA requires for the latter.
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override {
    std::lock_guard<std::mutex> lock(ipc_mu_);
    auto it = ipc_open_.find(handle);
    if (it != ipc_open_.end()) {
      if (std::shared_ptr<void> p = it->second.lock()) return p;
    }
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    std::shared_ptr<void> sp;
    if (handle.rfind("GMLK1:", 0) == 0) {
      void* p = api_.ipc_open(handle.data(), handle.size(), device);
      TORCH_CHECK(p != nullptr,
                  "gmlake: opening a CUDA tensor another "
                  "process shared: ",
                  api_.last_error());
      sp = std::shared_ptr<void>(p, [this, handle](void* q) {
        {
          std::lock_guard<std::mutex> lock(ipc_mu_);
          ForgetIpc(handle);
        }
        if (api_.ipc_close(q) != 0) {
          std::fprintf(stderr, "gmlake: %s\n", api_.last_error());
        }
      });
    } else {
      sp = OpenCudaIpc(handle, device);
    }
    ipc_open_[handle] = sp;
    return sp;
  }

  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> lock(mu_);
    oom_observers_.push_back(std::move(observer));
  }

  void enablePeerAccess(c10::DeviceIndex dev,
                        c10::DeviceIndex dev_to_access) override {
    c10::cuda::CUDAGuard guard(dev);
    const cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
    } else {
      C10_CUDA_CHECK(err);
    }
  }
  // gmlake's memory is cuMem-mapped: without peer access only the Peer copy
  // works across devices (as for PyTorch's expandable segments).
  cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src,
                          int srcDevice, size_t count, cudaStream_t stream,
                          bool p2p_enabled) override {
    if (p2p_enabled || srcDevice == dstDevice) {
      return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    }
    return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
  }

 private:
  static void Copy(const gmlake_stat (&from)[3],
                   c10::CachingAllocator::StatArray* to) {
    for (size_t i = 0; i < 3; ++i) {
      (*to)[i].current = from[i].current;
      (*to)[i].peak = from[i].peak;
      (*to)[i].allocated = from[i].allocated;
      (*to)[i].freed = from[i].freed;
    }
  }

  // Drops the cache entry of `handle` unless it was opened anew meanwhile.
  // Called under ipc_mu_.
  void ForgetIpc(const std::string& handle) {
    auto it = ipc_open_.find(handle);
    if (it != ipc_open_.end() && it->second.expired()) ipc_open_.erase(it);
  }

  // A cudaMalloc block PyTorch's own allocator shared. Called under ipc_mu_.
  std::shared_ptr<void> OpenCudaIpc(const std::string& handle,
                                    c10::DeviceIndex device) {
    cudaIpcMemHandle_t h;
    if (handle.size() == sizeof(h)) {
      std::memcpy(&h, handle.data(), sizeof(h));
    } else {
      TORCH_CHECK(handle.size() == 2 + sizeof(h) && handle[1] == 'c',
                  "gmlake: this CUDA IPC handle (", handle.size(),
                  " bytes) is neither gmlake's nor a cudaMalloc block of "
                  "PyTorch's allocator; gmlake opens only those (a sender "
                  "on PyTorch's allocator must not use expandable_segments)");
      std::memcpy(&h, handle.data() + 2, sizeof(h));
    }
    void* dev = nullptr;
    C10_CUDA_CHECK(
        cudaIpcOpenMemHandle(&dev, h, cudaIpcMemLazyEnablePeerAccess));
    return std::shared_ptr<void>(dev, [this, handle, device](void* p) {
      {
        std::lock_guard<std::mutex> lock(ipc_mu_);
        ForgetIpc(handle);
      }
      c10::cuda::CUDAGuard guard(device);
      C10_CUDA_CHECK_WARN(cudaIpcCloseMemHandle(p));
    });
  }

  // --- pools another allocator serves: torch.cuda.MemPool(allocator=...),
  // as NCCL's ncclMemAlloc pools for symmetric memory. gmlake keeps their
  // books (client/external_pool.h) and calls these for segments. No
  // exception may cross into gmlake: a failure is no memory. ---
  static void* ExternalAlloc(void* ctx, size_t size, uint64_t stream) {
    try {
      return (*static_cast<std::shared_ptr<CUDAAllocator>*>(ctx))
          ->raw_alloc_with_stream(size, reinterpret_cast<cudaStream_t>(stream));
    } catch (const std::exception& e) {
      TORCH_WARN("gmlake: a MemPool's allocator failed: ", e.what());
      return nullptr;
    }
  }
  static void ExternalFree(void* ctx, void* ptr, size_t /*size*/,
                           uint64_t /*stream*/) {
    try {
      (*static_cast<std::shared_ptr<CUDAAllocator>*>(ctx))->raw_delete(ptr);
    } catch (const std::exception& e) {
      TORCH_WARN("gmlake: a MemPool's allocator failed to free: ", e.what());
    }
  }
  static void ExternalDrop(void* ctx) {
    delete static_cast<std::shared_ptr<CUDAAllocator>*>(ctx);
  }

  void* Malloc(size_t n, c10::DeviceIndex device, cudaStream_t stream) {
    void* p = nullptr;
    int out_of_memory = 0;
    {
      RelaxedCapture relaxed(routes_open_.load(std::memory_order_relaxed) > 0);
      if (api_.try_malloc(static_cast<ssize_t>(n), device, stream, &p,
                          &out_of_memory) == 0) {
        if (c10::memoryProfilingEnabled()) Profile(p, n, device);
        return p;
      }
    }
    // Copied before anything else on this thread can call into gmlake.
    const std::string message(api_.last_error());
    if (out_of_memory) {
      NotifyOutOfMemory(device);
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    }
    TORCH_CHECK(false, message);
  }

  // The profiler's memory timeline (profile_memory=True): PyTorch's
  // allocator reports each allocation and free with the device's totals.
  // Only while profiling, so the sizes of what was reported are kept for
  // the frees (gmlake_free needs no size) only then.
  void Profile(void* p, size_t n, c10::DeviceIndex device) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      profiled_sizes_[p] = {n, device};
      profiled_.store(true, std::memory_order_relaxed);
    }
    ReportToProfiler(p, static_cast<int64_t>(n), device);
  }
  void Unprofile(void* p) {
    std::pair<size_t, c10::DeviceIndex> entry;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = profiled_sizes_.find(p);
      if (it == profiled_sizes_.end()) return;
      entry = it->second;
      profiled_sizes_.erase(it);
      if (profiled_sizes_.empty()) profiled_.store(false);
    }
    // After the free, as PyTorch's allocator reports it.
    ReportToProfiler(p, -static_cast<int64_t>(entry.first), entry.second,
                     entry.first);
  }
  void ReportToProfiler(void* p, int64_t delta, c10::DeviceIndex device,
                        size_t freed = 0) {
    gmlake_device_stats st;
    if (api_.device_stats(device, &st, sizeof(st)) != 0) return;
    const int64_t allocated = st.allocated_bytes[GMLAKE_STAT_ALL].current -
                              static_cast<int64_t>(freed);
    c10::reportMemoryUsageToProfiler(
        p, delta, static_cast<size_t>(std::max<int64_t>(allocated, 0)),
        static_cast<size_t>(st.reserved_bytes[GMLAKE_STAT_ALL].current),
        c10::Device(c10::DeviceType::CUDA, device));
  }

  void NotifyOutOfMemory(c10::DeviceIndex device) {
    std::vector<cca::OutOfMemoryObserver> observers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      observers = oom_observers_;
    }
    if (observers.empty()) return;
    gmlake_device_stats st;
    const int64_t allocated = api_.device_stats(device, &st, sizeof(st)) == 0
                                  ? st.allocated_bytes[GMLAKE_STAT_ALL].current
                                  : 0;
    size_t device_free = 0, total = 0;
    cudaMemGetInfo(&device_free, &total);
    for (auto& o : observers) {
      o(device, static_cast<size_t>(allocated), total, device_free);
    }
  }

  std::vector<void*> PoolLive(c10::DeviceIndex device, c10::MempoolId_t id) {
    std::vector<void*> live(64);
    for (;;) {
      const int64_t n =
          api_.pool_live(device, id.first, id.second, live.data(), live.size());
      TORCH_CHECK(n >= 0, "gmlake: pool live allocations: ", api_.last_error());
      if (static_cast<size_t>(n) <= live.size()) {
        live.resize(n);
        return live;
      }
      live.resize(n);
    }
  }

  std::vector<std::pair<void*, size_t>> PoolLiveBlocks(c10::DeviceIndex device,
                                                       c10::MempoolId_t id) {
    std::vector<void*> ptrs(64);
    std::vector<size_t> sizes(64);
    for (;;) {
      const int64_t n = api_.pool_live_blocks(
          device, id.first, id.second, ptrs.data(), sizes.data(), ptrs.size());
      TORCH_CHECK(n >= 0, "gmlake: pool live allocations: ", api_.last_error());
      if (static_cast<size_t>(n) <= ptrs.size()) {
        std::vector<std::pair<void*, size_t>> out;
        for (int64_t i = 0; i < n; ++i) out.emplace_back(ptrs[i], sizes[i]);
        return out;
      }
      ptrs.resize(n);
      sizes.resize(n);
    }
  }

  void DropFilters(c10::DeviceIndex device, c10::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = filters_.find({device, id});
    if (it == filters_.end()) return;
    routes_open_.fetch_sub(static_cast<int>(it->second.size()));
    filters_.erase(it);
  }

  const Api api_;
  std::atomic<bool> initialized_{false};
  std::atomic<bool> enabled_{true};
  int device_count_ = 0;
  std::atomic<bool> history_on_{false};
  std::mutex mu_;
  std::map<std::pair<c10::DeviceIndex, c10::MempoolId_t>,
           std::vector<std::unique_ptr<RouteFilter>>>
      filters_;
  std::atomic<int> routes_open_{0};
  std::vector<cca::OutOfMemoryObserver> oom_observers_;
  std::unordered_set<void*> uncached_;  // cudaMalloc'd with caching off
  std::atomic<size_t> uncached_count_{0};
  std::atomic<bool> profiled_{false};
  std::map<void*, std::pair<size_t, c10::DeviceIndex>> profiled_sizes_;
  std::mutex trackers_mu_;  // never held while gmlake is called
  std::shared_ptr<const std::vector<cca::AllocatorTraceTracker>> trackers_;
  std::mutex ipc_mu_;
  std::map<std::string, std::weak_ptr<void>> ipc_open_;
};

// The installed door; it lives as long as the process (PyTorch keeps a raw
// pointer to it).
std::shared_ptr<GMLakeAllocator>* installed = nullptr;

void Delete(void* ptr) {
  if (ptr != nullptr && installed != nullptr) (*installed)->raw_delete(ptr);
}

void DeleteUncached(void* ptr) {
  if (ptr != nullptr && installed != nullptr) (*installed)->FreeUncached(ptr);
}

void SetError(char* err, size_t n, const std::string& what) {
  if (err == nullptr || n == 0) return;
  std::snprintf(err, n, "%s", what.c_str());
}

}  // namespace
}  // namespace gmlake_door

extern "C" {

// Installs the door as PyTorch's CUDA allocator, bound to the libgmlake.so
// at `libgmlake_path` (already loaded by gmlake's Python module). 0 on
// success; -1 with the reason in `err` (PyTorch's CUDA already started, a
// C API entry point missing, ...).
int gmlake_torch_door_install(const char* libgmlake_path, char* err,
                              size_t err_size) {
  using namespace gmlake_door;
  if (installed != nullptr) return 0;
  void* lib = dlopen(libgmlake_path, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen(libgmlake_path, RTLD_NOW);
  if (lib == nullptr) {
    SetError(err, err_size, std::string("dlopen: ") + dlerror());
    return -1;
  }
  Api api;
  std::string missing;
  Bind(lib, "gmlake_torch_try_malloc", &api.try_malloc, &missing);
  Bind(lib, "gmlake_free", &api.free, &missing);
  Bind(lib, "gmlake_record_stream", &api.record_stream, &missing);
  Bind(lib, "gmlake_empty_cache", &api.empty_cache, &missing);
  Bind(lib, "gmlake_set_memory_fraction", &api.set_memory_fraction, &missing);
  Bind(lib, "gmlake_memory_fraction", &api.memory_fraction, &missing);
  Bind(lib, "gmlake_reset_peaks", &api.reset_peaks, &missing);
  Bind(lib, "gmlake_reset_accumulated", &api.reset_accumulated, &missing);
  Bind(lib, "gmlake_get_device_stats", &api.device_stats, &missing);
  Bind(lib, "gmlake_pool_create_or_incref", &api.pool_create, &missing);
  Bind(lib, "gmlake_pool_begin_allocate", &api.pool_begin, &missing);
  Bind(lib, "gmlake_pool_end_allocate", &api.pool_end, &missing);
  Bind(lib, "gmlake_pool_release", &api.pool_release, &missing);
  Bind(lib, "gmlake_pool_live", &api.pool_live, &missing);
  Bind(lib, "gmlake_pool_use_count", &api.pool_use_count, &missing);
  Bind(lib, "gmlake_pool_live_blocks", &api.pool_live_blocks, &missing);
  Bind(lib, "gmlake_pool_malloc_at", &api.pool_malloc_at, &missing);
  Bind(lib, "gmlake_pool_create_external", &api.pool_create_external, &missing);
  Bind(lib, "gmlake_pool_set_use_on_oom", &api.pool_set_use_on_oom, &missing);
  Bind(lib, "gmlake_pool_set_no_split", &api.pool_set_no_split, &missing);
  Bind(lib, "gmlake_record_history", &api.record_history, &missing);
  Bind(lib, "gmlake_snapshot_visit", &api.snapshot_visit, &missing);
  Bind(lib, "gmlake_set_stack_gatherer", &api.set_stack_gatherer, &missing);
  Bind(lib, "gmlake_stack_handle", &api.stack_handle, &missing);
  Bind(lib, "gmlake_push_compile_context", &api.push_compile_context, &missing);
  Bind(lib, "gmlake_pop_compile_context", &api.pop_compile_context, &missing);
  Bind(lib, "gmlake_set_segment_observer", &api.set_segment_observer, &missing);
  Bind(lib, "gmlake_ipc_share", &api.ipc_share, &missing);
  Bind(lib, "gmlake_ipc_open", &api.ipc_open, &missing);
  Bind(lib, "gmlake_ipc_close", &api.ipc_close, &missing);
  Bind(lib, "gmlake_last_error", &api.last_error, &missing);
  if (!missing.empty()) {
    SetError(err, err_size,
             std::string(libgmlake_path) + " lacks " + missing +
                 " (an older libgmlake.so than this gmlake package)");
    return -1;
  }
  try {
    auto door = std::make_shared<GMLakeAllocator>(api);
    // History stacks from PyTorch's own gatherer from now on.
    api.set_stack_gatherer(&GatherStack, &StackFrames, &ReleaseStack,
                           &StackForward, nullptr);
    // Refuses (c10::Error) once PyTorch's own allocator has started.
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(door);
    // torch.accelerator's calls (memory_stats, empty_cache, ...) find the
    // allocator by device type in c10's registry, not through the pointer
    // changeCurrentAllocator sets: this door there too.
    c10::SetAllocator(c10::DeviceType::CUDA, door.get(), /*priority=*/255);
    installed = new std::shared_ptr<GMLakeAllocator>(std::move(door));
  } catch (const c10::Error& e) {
    SetError(err, err_size, e.what_without_backtrace());
    return -1;
  } catch (const std::exception& e) {
    SetError(err, err_size, e.what());
    return -1;
  }
  return 0;
}

// 1 once the door is PyTorch's current allocator.
int gmlake_torch_door_installed(void) {
  return gmlake_door::installed != nullptr &&
         c10::cuda::CUDACachingAllocator::get() ==
             gmlake_door::installed->get();
}

}  // extern "C"
