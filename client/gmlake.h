/* Copyright 2026 The GMLake Authors.
 *
 * libgmlake's C API: GPU memory with virtual memory stitching, for any
 * framework. Every function is thread-safe. Functions returning int give 0
 * on success and -1 on failure; pointer-returning ones give NULL. After a
 * failure gmlake_last_error() says what was wrong and what to do.
 *
 * Options: gmlake_init's `conf`, else the GMLAKE_CONF environment variable,
 * "key:value,key:value" (docs/tuning.md lists every key). Without an
 * explicit gmlake_init, the first call initialises from GMLAKE_CONF.
 *
 * PyTorch: torch.cuda.memory.CUDAPluggableAllocator("libgmlake.so",
 * "gmlake_torch_malloc", "gmlake_torch_free").
 *
 * Fork: a child forked from a process that started gmlake cannot use it;
 * every call there fails at once saying so (docs/design.md, "Fork").
 */

#ifndef GMLAKE_CLIENT_GMLAKE_H_
#define GMLAKE_CLIENT_GMLAKE_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the allocator with `conf` (NULL: GMLAKE_CONF). Fails if already
 * started with other options; call gmlake_shutdown first. */
int gmlake_init(const char* conf);
/* Checks `conf` (NULL: GMLAKE_CONF) without starting anything. */
int gmlake_check_conf(const char* conf);
/* 1 once the allocator has started (and opened its lake), else 0. */
int gmlake_is_initialized(void);
/* Frees everything and returns all memory to the lake. Pointers handed out
 * before become invalid; no other thread may be inside gmlake meanwhile. */
void gmlake_shutdown(void);

/* `size` bytes on `device` for use on `stream` (a CUstream; 0: default).
 * Size 0 gives NULL and is no failure: gmlake_last_error() is then "". */
void* gmlake_malloc(size_t size, int device, uint64_t stream);
int gmlake_free(void* ptr);
/* `ptr` is also used on `stream`: its memory is reused only after the work
 * queued there up to the free has finished. */
int gmlake_record_stream(void* ptr, uint64_t stream);

/* Returns cached free memory to the lake; the bytes returned. */
uint64_t gmlake_empty_cache(void);
/* Caps what this process may hold on `device` (0: no cap). */
int gmlake_set_capacity(int device, uint64_t bytes);
void gmlake_reset_peak_stats(void);
/* Caps `device` at `fraction` [0, 1] of its memory (PyTorch's
 * set_per_process_memory_fraction; 0: no new memory). */
int gmlake_set_memory_fraction(int device, double fraction);
/* The fraction set, else the cap as a fraction of the device's memory (1:
 * none); -1 on failure. */
double gmlake_memory_fraction(int device);
/* Resets the peaks, or the allocated/freed totals, num_alloc_retries and
 * num_ooms, of `device` (-1: all devices). */
int gmlake_reset_peaks(int device);
int gmlake_reset_accumulated(int device);

/* Records the allocator's history for PyTorch's memory_viz: the last
 * `max_entries` events of each device (0: stop) with stacks of `stacks`
 * kind (0: none, 1: Python frames, 2: Python and C++ frames) on the events
 * `context` says (PyTorch's context: 0 none, 1 "state": none in the
 * history, 2 "alloc": allocations, 3 "all": allocations and frees);
 * `clear` drops what was recorded. The snapshot's "device_traces" holds
 * them. */
int gmlake_record_history(uint64_t max_entries, int stacks, int context,
                          int clear);
/* The "user_metadata" string of every history event recorded from now on
 * (torch.cuda.memory._set_memory_metadata; "" for none). */
int gmlake_set_history_metadata(const char* metadata);
/* torch.compile's regions (PyTorch's pushCompileContext/popCompileContext):
 * the history events this thread records until the pop carry `name` as
 * their "compile_context" ("N/A" outside any). */
int gmlake_push_compile_context(const char* name);
int gmlake_pop_compile_context(void);

/* JSON, to be released with gmlake_free_string. Stats use PyTorch's keys
 * ("allocated_bytes.all.current", ...) plus "gmlake.*"; device -1: all.
 * The snapshot has the shape of torch.cuda.memory._snapshot(). */
char* gmlake_stats_json(int device);
char* gmlake_snapshot_json(void);
void gmlake_free_string(char* s);

/* The snapshot as structures, for an embedder's own snapshot type
 * (PyTorch's C++ CUDAAllocator::snapshot): `segment` is called for each
 * segment (its blocks inside), then `trace` for each history event of each
 * device, oldest first; no gmlake lock is held during the calls, and the
 * views live only for the call. `stack` ids name the stack of an allocated
 * block or an event (GMLAKE_NO_STACK: none); gmlake_stack_handle gives the
 * gatherer's handle of one (below). */
#define GMLAKE_NO_STACK 0xffffffffu
typedef struct {
  uint64_t address, size, requested_size;
  int allocated, active;
  uint32_t stack;
} gmlake_block_view;
typedef struct {
  int device;
  uint64_t address, total_size, allocated_size, active_size, requested_size;
  uint64_t stream;
  int is_large, is_expandable;
  uint64_t pool_id0, pool_id1;
  const gmlake_block_view* blocks;
  size_t num_blocks;
} gmlake_segment_view;
/* Actions: 0 alloc, 1 free_requested, 2 free_completed, 3 segment_map,
 * 4 segment_unmap, 5 oom (device_free: what the lake could still give),
 * 6 segment_alloc, 7 segment_free (segments of another allocator's pool,
 * gmlake_pool_create_external). */
typedef struct {
  int device, action;
  uint64_t addr, size, stream;
  int64_t time_us;
  uint64_t device_free;
  uint32_t stack;
  const char* user_metadata;
  const char* compile_context; /* torch.compile's region, "N/A": none */
} gmlake_trace_view;
typedef struct {
  void (*segment)(void* ctx, const gmlake_segment_view* segment);
  void (*trace)(void* ctx, const gmlake_trace_view* event);
} gmlake_snapshot_visitor;
int gmlake_snapshot_visit(const gmlake_snapshot_visitor* visitor, void* ctx);

/* Stacks for the history from the embedder instead of gmlake's own walk
 * (PyTorch's CapturedTraceback under the native door: TorchScript frames,
 * C++ frames as PyTorch symbolizes them). `gather(ctx, cpp)` captures the
 * calling thread's stack (C++ frames too when `cpp`) with no gmlake lock
 * held and returns a handle (NULL: none); `frames` lists a handle's frames,
 * innermost first, to `sink`; `release` drops a handle. gmlake keeps the
 * first handle of each distinct stack (gmlake_stack_handle) and releases
 * the others at once. NULL `gather`: gmlake's own walk again. */
typedef void (*gmlake_frame_sink)(void* sink_ctx, const char* filename,
                                  const char* name, int line);
/* `forward` (may be NULL) lists a handle's forward trace to `sink`, one
 * string each: anomaly mode's stack of the forward op whose backward is
 * running (PyTorch's forward_frames). A handle with neither frames nor a
 * forward trace is no stack. */
typedef void (*gmlake_text_sink)(void* sink_ctx, const char* text);
int gmlake_set_stack_gatherer(void* (*gather)(void* ctx, int cpp),
                              void (*frames)(void* ctx, void* handle,
                                             gmlake_frame_sink sink,
                                             void* sink_ctx),
                              void (*release)(void* ctx, void* handle),
                              void (*forward)(void* ctx, void* handle,
                                              gmlake_text_sink sink,
                                              void* sink_ctx),
                              void* ctx);
/* The gatherer's handle of stack `stack` of `device`'s history (NULL: none
 * or gmlake's own walk). Valid while the process lives. */
void* gmlake_stack_handle(int device, uint32_t stack);

/* Segment events as they happen, for PyTorch's trace trackers
 * (attachAllocatorTraceTracker: NCCL's buffer registration hooks). gmlake's
 * own pages are mapped and unmapped (GMLAKE_SEGMENT_MAP/_UNMAP, as
 * PyTorch's expandable segments: stitched from chunks, no fixed segment to
 * register); segments of another allocator's pool are taken and given back
 * (GMLAKE_SEGMENT_ALLOC/_FREE, as PyTorch's own segments; _FREE before the
 * segment goes back to that allocator). `observe` runs on the allocating
 * thread with gmlake's lock held: it must not call gmlake. One observer per
 * process; NULL removes it, and once this returns the previous one is
 * called no more. */
enum {
  GMLAKE_SEGMENT_MAP = 3,
  GMLAKE_SEGMENT_UNMAP = 4,
  GMLAKE_SEGMENT_ALLOC = 6,
  GMLAKE_SEGMENT_FREE = 7
};
typedef struct {
  int device, action;
  uint64_t addr, size, stream;
  uint64_t pool_id0, pool_id1; /* PyTorch's MempoolId_t; (0, 0): default */
} gmlake_segment_event;
int gmlake_set_segment_observer(void (*observe)(void* ctx,
                                                const gmlake_segment_event* e),
                                void* ctx);

/* What the last failing call on this thread said ("" if none). */
const char* gmlake_last_error(void);
/* Which backend and lake are in use (NULL before init). */
const char* gmlake_describe(void);

/* Private memory pools, as CUDA graphs and torch.cuda.MemPool use them
 * (PyTorch's MempoolId_t is the pair id0, id1). While a pool is the target
 * of a capture, the allocations of the streams `filter` accepts (every
 * stream when NULL) come from it, and gmlake records, queries and waits for
 * no event on the device (capture forbids them). A pool's memory serves
 * nothing else until its last reference is released; the release returns
 * its free memory to the lake (the bytes; -1 on failure), and blocks still
 * live follow when freed. `filter` is called under gmlake's lock for each
 * malloc while the route is open: it must not call gmlake; `ctx` must live
 * until gmlake_pool_end_allocate. gmlake_pool_begin_allocate takes a
 * reference only on a pool it does not know; PyTorch's beginAllocateToPool
 * always takes one (releasePool drops it), so a PyTorch door calls
 * gmlake_pool_create_or_incref first. */
typedef int (*gmlake_stream_filter)(void* ctx, uint64_t stream);
int gmlake_pool_create_or_incref(int device, uint64_t id0, uint64_t id1);
int gmlake_pool_begin_allocate(int device, uint64_t id0, uint64_t id1,
                               gmlake_stream_filter filter, void* ctx);
int gmlake_pool_end_allocate(int device, uint64_t id0, uint64_t id1);
int64_t gmlake_pool_release(int device, uint64_t id0, uint64_t id1);
/* The pool's live allocations: up to `n` into `ptrs`; returns how many
 * there are (more than `n`: call again with room), -1 on failure. */
int64_t gmlake_pool_live(int device, uint64_t id0, uint64_t id1, void** ptrs,
                         size_t n);
/* gmlake_pool_live with each block's size in `sizes` (room for `n`). */
int64_t gmlake_pool_live_blocks(int device, uint64_t id0, uint64_t id1,
                                void** ptrs, size_t* sizes, size_t n);
/* Allocates `size` bytes at exactly `ptr` from the pool's free memory: how
 * a CUDA graph tree's checkpoint is restored (setCheckpointPoolState), its
 * replays using those addresses. NULL when the range is not free in the
 * pool, the pool unknown, or `ptr` not on a 512-byte boundary. Free it with
 * gmlake_free. */
void* gmlake_pool_malloc_at(int device, uint64_t id0, uint64_t id1, void* ptr,
                            size_t size);
/* CUDA IPC (torch.multiprocessing): shares the live allocation at `ptr`
 * with other processes of this user. Writes a handle (text, at most
 * GMLAKE_IPC_HANDLE_MAX bytes, no NUL) into `handle` and its length into
 * `*len`. This process serves the allocation's chunks to receivers over a
 * Unix socket of its own until the allocation is freed. */
#define GMLAKE_IPC_HANDLE_MAX 256
int gmlake_ipc_share(void* ptr, char* handle, size_t* len);
/* Maps the memory a handle names into this process, on `device`: the same
 * memory the sender's allocation is. NULL on failure (the sender gone, the
 * allocation freed there, another user). Release with gmlake_ipc_close. */
void* gmlake_ipc_open(const char* handle, size_t len, int device);
int gmlake_ipc_close(void* ptr);

/* How many references (graphs, MemPools) hold the pool: 0 when unknown or
 * released; -1 on failure. */
int gmlake_pool_use_count(int device, uint64_t id0, uint64_t id1);
/* torch.cuda.MemPool(use_on_oom=True): when a request of default memory
 * finds none, just before out of memory, the pool's free blocks on its
 * stream serve it. -1 for an unknown pool. */
int gmlake_pool_set_use_on_oom(int device, uint64_t id0, uint64_t id1,
                               int use_on_oom);
/* torch.cuda.MemPool(no_split=True), before the pool's first allocation:
 * each allocation of it is a segment of its own with one block (whole
 * pages; of another allocator's pool, the request rounded up to 2 MiB),
 * never split; a freed one serves whole a request that would have made one
 * of its size. -1 for an unknown pool. */
int gmlake_pool_set_no_split(int device, uint64_t id0, uint64_t id1);
/* torch.cuda.MemPool(allocator=...): a pool (made with one reference, or
 * one more) whose memory another allocator gives: `alloc` returns a
 * segment of `size` bytes for `stream` (NULL when it has none), `free`
 * takes one back. gmlake sizes, splits and caches those segments as
 * PyTorch's allocator does (2 MiB segments for requests up to 1 MiB, 20 MiB
 * up to 10 MiB), counts them in its statistics and against the capacity,
 * and gives them back when the pool is released (or, for blocks live then,
 * when freed). The callbacks are called with no gmlake lock held, possibly
 * from any thread; `drop(ctx)` is called once nothing more will be (at once
 * when the pool was known). -1 when the pool serves gmlake's own memory. */
typedef void* (*gmlake_external_alloc)(void* ctx, size_t size, uint64_t stream);
typedef void (*gmlake_external_free)(void* ctx, void* ptr, size_t size,
                                     uint64_t stream);
int gmlake_pool_create_external(int device, uint64_t id0, uint64_t id1,
                                gmlake_external_alloc alloc,
                                gmlake_external_free free, void* ctx,
                                void (*drop)(void* ctx));

/* One statistic as PyTorch keeps it (c10::CachingAllocator::Stat). */
typedef struct gmlake_stat {
  int64_t current, peak, allocated, freed;
} gmlake_stat;
/* The index of each gmlake_stat[3]: PyTorch's StatType order. */
enum { GMLAKE_STAT_ALL = 0, GMLAKE_STAT_SMALL = 1, GMLAKE_STAT_LARGE = 2 };
/* One device's statistics in the shape of PyTorch's DeviceStats, for a
 * native door (client/python/gmlake/_torch_allocator.cc) that has no JSON
 * parser. docs/stats.md says what each means under gmlake. */
typedef struct gmlake_device_stats {
  gmlake_stat allocation[3];
  gmlake_stat segment[3];
  gmlake_stat active[3];
  gmlake_stat inactive_split[3];
  gmlake_stat allocated_bytes[3];
  gmlake_stat reserved_bytes[3];
  gmlake_stat active_bytes[3];
  gmlake_stat inactive_split_bytes[3];
  gmlake_stat requested_bytes[3];
  int64_t num_alloc_retries;
  int64_t num_ooms;
  int64_t num_sync_all_streams;
  int64_t num_device_alloc; /* chunks taken from the lake */
  int64_t num_device_free;  /* chunks given back */
  /* Bytes held but not handed out (reserved - allocated): what a request
   * can have without asking the lake, stitched from any free block. */
  int64_t cached_free_bytes;
} gmlake_device_stats;
/* Fills `*out` for `device`; `out_size` is sizeof(gmlake_device_stats) as
 * the caller was compiled (a mismatch fails, naming both sizes). */
int gmlake_get_device_stats(int device, gmlake_device_stats* out,
                            size_t out_size);

/* The signatures torch.cuda.memory.CUDAPluggableAllocator expects.
 *
 * gmlake_torch_malloc never returns NULL for a failure (PyTorch would make
 * a tensor at address 0 of it): it throws std::runtime_error, a C++
 * exception through this C signature, which PyTorch calls from C++ and
 * turns into a Python RuntimeError. Out of memory reads as PyTorch's own
 * message begins, "CUDA out of memory. Tried to allocate 3.00 GiB. ", then
 * gmlake's account (asked, allocated, reserved, free but unusable, capacity,
 * what the lake said). Size 0 gives NULL. Only this entry point throws. */
void* gmlake_torch_malloc(ssize_t size, int device, void* stream);
void gmlake_torch_free(void* ptr, ssize_t size, int device, void* stream);
/* gmlake_torch_malloc without the exception, for a shim that throws its
 * framework's own type (client/python/gmlake/_torch_oom.cc throws
 * torch.OutOfMemoryError): 0 with *ptr on success (NULL for size 0); -1 on
 * failure with *ptr NULL, *out_of_memory 1 when no memory could be had (0
 * for a bad call) and gmlake_last_error() worded as the exception is. */
int gmlake_torch_try_malloc(ssize_t size, int device, void* stream, void** ptr,
                            int* out_of_memory);
/* PyTorch's optional hooks on that allocator (set_record_stream_fn,
 * set_reset_fn, set_memory_fraction_fn): Tensor.record_stream,
 * torch.cuda.empty_cache, torch.cuda.set_per_process_memory_fraction.
 * They return nothing, so a failure is printed to stderr; record_stream of
 * memory gmlake did not hand out is ignored, as PyTorch's allocator does. */
void gmlake_torch_record_stream(void* ptr, void* stream);
void gmlake_torch_empty_cache(void);
void gmlake_torch_set_memory_fraction(double fraction, int device);

#ifdef __cplusplus
}
#endif

#endif /* GMLAKE_CLIENT_GMLAKE_H_ */
