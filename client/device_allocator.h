// Copyright 2026 The GMLake Authors.
//
// DeviceAllocator: the caching allocator with virtual memory stitching, for
// one device. See docs/design.md ("The allocator") for the whole picture.
//
// Requests are rounded to 512 bytes. Those up to small_size come from the
// small arena, where every segment is one chunk and nothing is stitched;
// larger ones from the large arena. Each (stream, kind) has a Pool whose
// FreeIndex finds a fitting free block in O(1): the fast path, which makes
// no driver call and allocates no memory. When nothing fits (the slow path):
//   1. a free block of another stream is taken, the requesting stream made
//      to wait on the device for that stream's work (the host goes on);
//   2. the policy (stitch_policy.h) picks a gap of the arena to map chunks
//      into, next to free bytes it can join;
//   3. chunks come from those held unmapped, then from free blocks elsewhere
//      (whole free chunks mapped here as well: the stitch; their old pages
//      are unmapped later, once the work queued on them has finished), and
//      only then from the lake (ChunkSource);
//   4. if the lake says no, it waits for other threads' slow paths and every
//      stream, merges what that freed, and tries again, then fails with an
//      out-of-memory status that says what was asked, live, reserved and
//      cached.
// malloc and free of a program on one stream never wait for the GPU
// (stats().host_waits stays 0).
// Freed blocks merge with free neighbours of the same pool and stay mapped,
// so the sizes a training step repeats are served by the fast path.

#ifndef GMLAKE_CLIENT_DEVICE_ALLOCATOR_H_
#define GMLAKE_CLIENT_DEVICE_ALLOCATOR_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/arena.h"
#include "client/block.h"
#include "client/chunk_source.h"
#include "client/external_pool.h"
#include "client/free_index.h"
#include "client/memory_pool.h"
#include "client/options.h"
#include "client/stats.h"
#include "client/stitch_policy.h"
#include "client/trace_recorder.h"
#include "common/coalescing_worker.h"
#include "common/mutex.h"
#include "common/unique_fd.h"

namespace gmlake {

struct Pool {
  StreamHandle stream = 0;
  bool small = false;
  // The private memory pool (memory_pool.h) this is part of; 0: none.
  uint32_t mempool = 0;
  // Its pool was released: blocks freed here go to the stream's default.
  bool retired = false;
  // Whether chunks of its free blocks may serve other pools' requests
  // (stolen for a stitch, reactivated, covering a rest). A private pool's
  // free memory is handed to no one else until the pool is released:
  // graphs replay into it. The one place this rule is written.
  bool LendsChunks() const { return mempool == 0; }
  // MemPool(no_split=True): each block is a growth of its own, whole pages,
  // never split, never joined, and reused whole (DeviceAllocator::FindFree).
  bool no_split = false;
  FreeIndex free;
};

class DeviceAllocator {
 public:
  // `source` must outlive the allocator.
  DeviceAllocator(int device, ChunkSource* source,
                  const AllocatorOptions& options);
  // Unmaps everything and returns every chunk to the source.
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Allocates `size` bytes for use on `stream`. 0 bytes gives 0 (null).
  // ResourceExhausted with a full account when memory cannot be found.
  absl::StatusOr<DevicePtr> Malloc(size_t size, StreamHandle stream);
  // Frees an allocation of this device. NotFound if `ptr` is not one (never
  // allocated here, or freed already).
  absl::Status Free(DevicePtr ptr);
  // Notes that `ptr` is also used on `stream`: when freed, it is reused
  // only after the work queued on `stream` up to the free has finished.
  absl::Status RecordStream(DevicePtr ptr, StreamHandle stream);

  // Gives every cached free chunk back to the source. Returns the bytes.
  uint64_t EmptyCache();
  // Gives back up to `bytes` of cached free chunks (at least what is asked,
  // rounded up to chunks, when there is that much). Returns the bytes.
  uint64_t Reclaim(uint64_t bytes);

  // --- Private pools, for CUDA graphs and torch.cuda.MemPool ---
  // (memory_pool.h). While a route is open the allocator records, queries
  // and waits for no event: a capturing stream forbids them. A pool's
  // memory serves only allocations routed to it until it is released.
  void CreateOrIncrefPool(MempoolId id);
  void BeginAllocateToPool(MempoolId id, StreamFilter filter);
  // Ends the route; frees deferred during the capture record their events
  // now, when no capture is left.
  void EndAllocateToPool(MempoolId id);
  // Drops a reference; at the last, the pool's free memory returns to the
  // lake (unless a capture is under way: then it joins the default memory
  // and the next reclaim returns it). Returns the bytes given back.
  uint64_t ReleasePool(MempoolId id);
  // The live allocations of pool `id` (empty for an unknown id).
  std::vector<DevicePtr> PoolLivePointers(MempoolId id) const;
  // The same with each block's size (what MallocAt takes back).
  std::vector<std::pair<DevicePtr, size_t>> PoolLiveBlocks(MempoolId id) const;
  // Allocates `size` bytes at exactly `addr` from pool `id`'s free memory,
  // as a CUDA graph tree's checkpoint restore needs (its replays use those
  // addresses): the free block holding the range is split around it.
  // FailedPrecondition when the range is not free in the pool (allocated,
  // or freed but still waiting for other streams), NotFound for an unknown
  // pool, InvalidArgument for an address not on PyTorch's 512-byte grain.
  absl::StatusOr<DevicePtr> MallocAt(MempoolId id, DevicePtr addr, size_t size);
  // References held on pool `id` (0 for an unknown or released id).
  int PoolUseCount(MempoolId id) const;
  // Bytes held by pool `id`: allocated and free.
  uint64_t PoolReservedBytes(MempoolId id) const;
  // torch.cuda.MemPool(use_on_oom=True): when a request of default memory
  // finds none (after every retry, just before out of memory), a free
  // block of pool `id` on the request's stream serves it, and goes back to
  // the pool when freed. NotFound for an unknown pool.
  absl::Status SetPoolUseOnOom(MempoolId id, bool use);
  // torch.cuda.MemPool(no_split=True), set before the pool's first
  // allocation: each of its allocations is a segment of its own with one
  // block, whole pages (of another allocator's pool: the request rounded
  // up to 2 MiB), never split; a freed block serves only a request that
  // would have made one of its size. NotFound for an unknown pool.
  absl::Status SetPoolNoSplit(MempoolId id);

  // --- Pools another allocator serves (device_allocator_external.cc) ---
  // torch.cuda.MemPool(allocator=...): takes a reference on pool `id`
  // (made if unknown) whose requests are served from segments of `memory`,
  // cached as PyTorch caches them (external_pool.h), counted in the
  // statistics and against the capacity (a memory fraction) like gmlake's
  // own. `memory` is called with no lock held, and kept while the pool or
  // a block of it lives. FailedPrecondition when `id` is a pool of gmlake's
  // own memory already.
  absl::Status CreateOrIncrefExternalPool(
      MempoolId id, std::shared_ptr<ExternalMemory> memory);

  // --- CUDA IPC (device_allocator_ipc.cc) ---
  // The chunks behind live allocation `ptr`, exported as descriptors
  // another process can map (in address order; each mapped whole, one after
  // another, they hold the allocation at `offset`). NotFound if `ptr` is
  // not a live allocation here; the backend's error for a chunk it cannot
  // export (the CUDA driver refuses chunks it imported from gmlaked).
  struct Exported {
    size_t offset = 0;
    size_t size = 0;
    std::vector<UniqueFd> fds;
    std::vector<size_t> chunk_sizes;
  };
  absl::StatusOr<Exported> ExportLive(DevicePtr ptr);

  AllocatorStats stats() const;
  // Live bytes and bytes held but free, for the lake's usage reports: two
  // numbers under the lock, never a driver call.
  ChunkSource::AllocatorUsage usage() const;
  void ResetPeaks();
  void ResetAccumulated();
  // A snapshot's segment, as PyTorch's SegmentInfo: one run of blocks of
  // one pool and stream (a mapped range of gmlake's may hold several).
  struct BlockView {
    DevicePtr addr = 0;
    size_t size = 0;
    size_t requested = 0;  // allocated blocks only
    bool allocated = false;
    bool active = false;  // allocated, or freed and waiting for streams
    uint32_t stack = StackCapture::kNoStack;  // the trace's stack id
  };
  struct SegmentView {
    DevicePtr addr = 0;
    size_t total = 0, allocated = 0, active = 0, requested = 0;
    StreamHandle stream = 0;
    bool small = false;
    bool expandable = true;  // false: another allocator's fixed segment
    MempoolId pool{0, 0};    // (0, 0): default memory
    std::vector<BlockView> blocks;
  };
  std::vector<SegmentView> Segments() const;
  // The segments in the format of torch.cuda.memory._snapshot()["segments"]
  // (a JSON array).
  std::string SegmentsJson() const;
  // Checks every invariant of the books (tests call it after each step).
  absl::Status CheckInvariants() const;

  int device() const { return device_; }
  // The history memory_viz shows (off until configured).
  TraceRecorder& trace() { return trace_; }
  const TraceRecorder& trace() const { return trace_; }

 private:
  // What CheckInvariants counts as it walks the arenas, to hold against
  // the stats and the indexes.
  struct InvariantTally {
    int64_t allocated = 0;
    int64_t live = 0;
    int64_t free_bytes = 0;
    int64_t mapped_pages = 0;
    int64_t small_mapped_pages = 0;
    size_t dormant_pages = 0;
    size_t free_blocks = 0;
  };
  // CheckInvariants' parts: the blocks of one segment tile it; one arena's
  // page tables agree; the external pools' books; the tally against the
  // stats.
  absl::Status CheckSegmentLocked(const Arena& a, const Segment& seg,
                                  InvariantTally* t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckPagesLocked(const Arena& a, InvariantTally* t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckExternalLocked(InvariantTally* t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckTallyLocked(const InvariantTally& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Pool* GetPool(StreamHandle stream, bool small, uint32_t mempool = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The free block of `pool` that serves `size` (removed from nothing):
  // the index's best fit; in a no_split pool the smallest of at most the
  // pages `size` would map. Null when none does.
  Block* FindFree(Pool* pool, size_t size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records events on `streams` for freed block `b` (pending until they
  // complete), or waits for every stream if that fails. Releases mu_.
  absl::Status FreeAfterStreams(Block* b, std::vector<StreamHandle> streams)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool capturing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return mempools_.capturing();
  }
  // Marks (part of) free block `b`, already out of its index, allocated.
  void Allocate(Block* b, size_t size, size_t requested)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The statistics of a block handed out (sign +1) or freed (-1): what
  // live allocations hold; and of a block becoming active or not (freed
  // blocks stay active until other streams' work on them is done).
  void CountLive(size_t size, size_t requested, bool small, int sign)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountActive(size_t size, bool small, int sign)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A freed block, no longer in use on any stream, goes back to its pool.
  void MakeReusable(Block* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // During a capture: the capture-graph nodes `streams` have reached now,
  // for a free deferred until they are joined (empty: unknown).
  std::vector<uint64_t> CaptureMarks(absl::Span<const StreamHandle> streams)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // During a capture: the frees deferred on `pool` whose side streams'
  // captured work the pool's stream now follows in the capture graph
  // become reusable (PyTorch's graph_capture_record_stream_reuse): no
  // event, no wait, only graph queries.
  void ReuseJoinedFrees(Pool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `b` takes over its address neighbour `next` (out of every index).
  void Absorb(Block* b, Block* next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts a free block back, merging with free neighbours of its pool.
  Block* InsertFree(Block* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes blocks whose other-stream events completed reusable. Releases mu_
  // while querying the events.
  void ProcessPending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Up to `n` events from the idle list.
  std::vector<EventHandle> TakeIdleEvents(size_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records an event on each of `streams` into `events` (creating events
  // when it has too few). Called without mu_.
  absl::Status RecordOn(absl::Span<const StreamHandle> streams,
                        std::vector<EventHandle>* events);
  // RecordOn, then blocks until each event completed, adding to `waited`
  // the events it had to block for (not those complete at once). Called
  // without mu_.
  absl::Status WaitForStreams(absl::Span<const StreamHandle> streams,
                              std::vector<EventHandle>* events,
                              int64_t* waited);
  // Queries `event`; blocks for it (and counts one in `waited`) only when
  // it has not completed. Called without mu_.
  absl::Status WaitForEvent(EventHandle event, int64_t* waited);
  // RecordOn, then makes `user` wait on the device for each stream other
  // than itself: memory last used on `streams` may then be used on `user`
  // at once. The host does not wait. Called without mu_.
  absl::Status HandOver(StreamHandle user,
                        absl::Span<const StreamHandle> streams,
                        std::vector<EventHandle>* events);
  // Which counter a wait for the GPU adds to.
  using WaitCounter = int64_t AllocatorStats::*;
  // Waits until the work queued on `streams` so far has finished, and for
  // `also_wait`; counts the waits in `counter`. Releases mu_ while it waits.
  absl::Status Settle(std::vector<StreamHandle> streams,
                      std::vector<EventHandle> also_wait, WaitCounter counter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every stream this device has a pool for, once each.
  std::vector<StreamHandle> SeenStreams() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Settle for every stream this device has seen and every pending free.
  absl::Status SettleAll(WaitCounter counter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adjacent free blocks of different streams, both freed before the last
  // completed SettleAll, become one, so chunks they share can be stitched
  // or returned.
  void MergeSettledNeighbours() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps dormant chunks whose last users have finished: all of those
  // dormant before the last completed SettleAll when `settled` (the caller
  // just settled), else, only while more pages are dormant than the bound,
  // those older than the last fence passed. Releases mu_ for the calls.
  void UnmapDormant(bool settled) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether more pages are dormant than the bound (max_dormant).
  bool DormantOverBound() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a growing malloc does about dormant pages over the bound: unmaps
  // them itself, or with unmap_thread asks unmapper_ to.
  void TrimDormant() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Dormant pages [first, end) of `arena`.
  struct DormantSpan {
    Arena* arena;
    size_t first;
    size_t end;
  };
  // The spans of [first, end), a dormant run of `a`, that no stream can
  // use any more (dormant before the last fence passed).
  void AppendUnmappable(Arena* a, size_t first, size_t end,
                        std::vector<DormantSpan>* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps `spans` and forgets them. Releases mu_ for the calls.
  void UnmapSpans(absl::Span<const DormantSpan> spans)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the free block of `pool` that comes nearest below `size` ends its
  // segment and dormant pages follow it, unmaps those its shortfall needs
  // (if no stream can use them any more), so the plan can grow the block
  // in place instead of stitching all of a new view. True when it did.
  // Releases mu_.
  bool ClearRoomToGrow(Pool* pool, size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The fence: events recorded on every stream this device has seen. The
  // first call records it; later calls query it (the host never waits) and
  // return true once it has completed, advancing done_gen_ over every
  // generation that was dormant when it was recorded. Releases mu_.
  bool PassFence() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Serves `size` for `pool` from a dormant window: chunks free elsewhere
  // but still mapped side by side here, from an earlier stitch. Books and
  // events only, no map call; their free pages elsewhere go dormant. Null
  // when no dormant window fits.
  Block* Reactivate(Pool* pool, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Each whole chunk mapped in a free block of a pool that lends chunks:
  // its arena and first page there.
  using FreeChunkPlaces =
      absl::flat_hash_map<ChunkHandle, std::pair<Arena*, size_t>>;
  FreeChunkPlaces FreeChunksInUse() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pages [first, end) of dormant chunks of `arena`; arena null: none.
  struct DormantWindow {
    Arena* arena = nullptr;
    size_t first = 0;
    size_t end = 0;
  };
  // The first window of at least `need` pages in the dormant runs of
  // `pool`'s arenas whose chunks are all in `free_at` and all different.
  DormantWindow FindDormantWindow(const Pool& pool, size_t need,
                                  const FreeChunkPlaces& free_at) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The free block holding the page at `page` of `arena`.
  Block* FreeBlockAt(Arena* arena, size_t page) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back at least `bytes` of free cache (whole chunks), or all of it:
  // the cache, then whole free chunks of any arena and stream, after
  // waiting for every stream (the host blocks only for a stream not idle;
  // counted in `counter`) and unmapping dormant views. Releases mu_ for
  // the calls. Returns the bytes given.
  uint64_t ReleaseFree(uint64_t bytes, WaitCounter counter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReleaseFree's first step: wait for every stream, then make everything
  // free whole chunks in free blocks or the cache. False while a capture
  // is under way (nothing may go back then).
  bool SettleToRelease(WaitCounter counter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReleaseFree's second: gives back at least `bytes` of what is free now
  // (a wait for a stream counted in `counter`).
  uint64_t GiveBackFree(uint64_t bytes, WaitCounter counter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The last resort of a request the lake refused after every retry: free
  // cache no slow path could use for it (another arena's, chunks larger
  // than it can map) goes back to the lake, just what it needs first, then
  // all, and Grow takes chunks again. `cause` when nothing was free.
  absl::StatusOr<Block*> Remake(Pool* pool, size_t size, absl::Status cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives chunks back to the source, except those still mapped dormant
  // somewhere (kept unmapped-cached until a later reclaim). Releases mu_ for
  // the source. Returns the bytes given.
  uint64_t GiveBack(std::vector<SizedChunk> chunks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- The slow path (device_allocator.cc explains the locking) ---

  // Where to map chunks for a request: a gap of an arena and the free
  // blocks of the pool on either side that the mapping will join.
  struct Plan {
    Arena* arena = nullptr;
    size_t first_page = 0;
    size_t pages = 0;
    Block* keep_a = nullptr;  // free tail of the segment on the left
    Block* keep_b = nullptr;  // free head of the segment on the right
  };
  // Chunks taken out of a free block while the lock is down.
  struct Detached {
    Arena* arena = nullptr;
    size_t first_page = 0;
    Pool* pool = nullptr;
    std::vector<SizedChunk> chunks;
    // The chunks went to the caller (unmapped here by a reclaim; by a stitch
    // still mapped here, to be unmapped when retired).
    bool taken = false;
  };
  // Reactivate's hand-over failed: the window's chunks go back to the free
  // blocks they came from, the window back to the dormant books, and the
  // events back to the idle ones.
  void UndoReactivate(const DormantWindow& w,
                      const std::vector<SizedChunk>& chunks,
                      std::vector<Detached>* moved,
                      std::vector<EventHandle>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A free block of at least `size` bytes for `pool`, out of the index.
  // Each try plans a mapping, gathers its chunks (GatherChunks), maps them
  // with the lock down (MapGathered) and books the outcome (BookMapping).
  absl::StatusOr<Block*> Grow(Pool* pool, size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The chunks of one try of Grow, from gathering to booking.
  struct Gathering;
  // With the lock held: what `plan` maps, from the cache, from free blocks
  // (stolen, in transit) or a cover; `missing` is left for the lake. May
  // grow the plan by a cover's extra pages.
  Gathering GatherChunks(Pool* pool, Plan* plan, size_t size, bool capture,
                         bool lake_refused) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases mu_: hands the stolen chunks over from their streams, acquires
  // `missing` from the lake and maps everything at the plan's pages.
  absl::Status MapGathered(Pool* pool, const Plan& plan, Gathering* g)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Back under mu_: the chunks leave transit, mapped (`mapped`) or kept
  // unmapped; the steals end, the plan's free neighbours return.
  void BookMapping(const Plan& plan, bool mapped, Gathering* g)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* TakeFromOtherStream(Pool* pool, size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reserves another arena (with mu_ released).
  absl::StatusOr<Arena*> NewArena(bool small)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where `size` bytes for `pool` go: room in an arena, or a new arena.
  absl::StatusOr<Plan> PlanMapping(Pool* pool, size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Room for `size` bytes for `pool` in the arenas there are, if any.
  std::optional<Plan> FindRoom(Pool* pool, size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the unmapped gaps of large arena `a` (between what is mapped,
  // in flight or dormant) to `gaps`, each with the plan that would map it
  // for `pool` in `owners`: the free blocks of `pool` on either side that
  // a mapping there extends.
  void AddGaps(Arena* a, Pool* pool, std::vector<GapView>* gaps,
               std::vector<Plan>* owners) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One segment of Segments(): the blocks from `head` to `end` (not
  // included) of a mapped range of `a`.
  SegmentView ViewOf(const Arena& a, const Block* head, const Block* end) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cached chunks covering at most `pages` pages, largest first; with
  // `at_least`, then one more (the smallest) if they cover fewer.
  std::vector<SizedChunk> TakeCached(size_t pages, bool at_least)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes whole chunks out of free blocks (not `keep_a` or `keep_b`),
  // smallest block first, covering up to `pages` pages (with `at_least`:
  // at least `pages`, or all there are, by taking chunks larger than the
  // rest): in the books only; the caller unmaps them after waiting for
  // `streams`. Returns the pages.
  size_t StealBooks(size_t pages, const Block* keep_a, const Block* keep_b,
                    std::vector<Detached>* out,
                    std::vector<StreamHandle>* streams, bool at_least)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cuts pages [q0, q1) of whole chunks out of free block `b` into `out`,
  // in transit, noting its stream. Returns the pages.
  size_t StealPages(Block* b, size_t q0, size_t q1, std::vector<Detached>* out,
                    std::vector<StreamHandle>* streams)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Without mu_: waits for `streams`, then unmaps the stolen runs (each
  // marked taken) and appends their chunks to `into`.
  absl::Status UnmapStolen(absl::Span<const StreamHandle> streams,
                           std::vector<EventHandle>* events,
                           std::vector<Detached>* stolen,
                           std::vector<SizedChunk>* into, int64_t* waited);
  // Ends the steals: runs not taken go back where they were, as free
  // memory. Taken runs were unmapped (a reclaim: `events` null) or are
  // still mapped, and go dormant in a generation of `events` (a stitch).
  void FinishSteals(std::vector<Detached>* stolen,
                    std::vector<EventHandle>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes pages [q0, q1) of free block `f` (whole chunks) out of the books,
  // splitting its segment around them, and marks them in flight.
  std::vector<SizedChunk> CutPages(Block* f, size_t q0, size_t q1)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CutPages' segment books: pages [q0, q1) leave `seg`; `before` (the
  // last block left of them, or null) ends what keeps `seg`, and `after`
  // (the first block right of them, or null) heads a segment of its own.
  // A segment left with no block is deleted.
  void CutSegment(Segment* seg, size_t q0, size_t q1, Block* before,
                  Block* after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The run of pages [first, end) of whole chunks inside free block `b`.
  std::pair<size_t, size_t> WholeChunksIn(const Block* b) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The larger chunk that covers what a plan still misses (CoverRest).
  struct Cover {
    ChunkHandle handle = 0;  // 0: none
    bool at_front = false;   // its extra pages come before the plan's
  };
  // Unmapped pages beside [first, end) of `a`, up to `limit`: before
  // `first` or after `end`.
  size_t RoomBeside(const Arena* a, size_t first, size_t end, size_t limit,
                    bool before) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The chunk CoverRest takes for the last `rest` pages of `plan`, up to
  // `max_pages` pages: a cached one (`cached`, its index), else with
  // `steal` a whole free chunk of a free block (`block`, at `first_page`)
  // that `plan` does not extend; `pages` 0 where none fits.
  struct CoverChoice {
    size_t pages = 0;
    size_t cached = 0;
    Block* block = nullptr;
    size_t first_page = 0;
  };
  CoverChoice ChooseCover(const Plan& plan, size_t rest, size_t max_pages,
                          bool steal) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Covers the last `rest` pages of `plan` with one chunk larger than them
  // (client/chunk_cover.h): a cached one (appended to `chunks`), else, with
  // `steal`, a whole free chunk of a free block (into `stolen`). The plan
  // grows by its extra pages where the arena has room, and its in-flight
  // mark with it.
  Cover CoverRest(Plan* plan, size_t rest, bool steal,
                  std::vector<SizedChunk>* chunks,
                  std::vector<Detached>* stolen,
                  std::vector<StreamHandle>* streams)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Gathering {
    std::vector<SizedChunk> chunks;
    std::vector<Detached> stolen;
    std::vector<StreamHandle> streams;  // the stolen chunks' users
    std::vector<EventHandle> events;    // recorded on them at hand-over
    Cover cover;
    bool grow = false;           // new chunks rather than a stitch
    uint64_t missing = 0;        // bytes to acquire from the lake
    bool external_full = false;  // MemPools' allocators leave no room
    bool lake_refused = false;   // the lake (or capacity) said no
    size_t acquired_chunks = 0;  // how many `missing` came in
    int64_t acquire_nanos = 0;
  };
  // Moves the cover's chunk to the end of `chunks` its extra pages are on.
  static void PlaceCover(const Cover& cover, std::vector<SizedChunk>* chunks);
  // Holds chunks that are not mapped anywhere, for the next slow path.
  void KeepUnmapped(absl::Span<const SizedChunk> chunks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After RecordMapped: a free block over the new pages, joined to the
  // segments on either side (unless `arena` is small) and merged, in the
  // index.
  Block* AdoptPages(Arena* arena, size_t first_page, size_t pages, Pool* pool)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Malloc's slow path for a `rounded` request `pool` has no free block
  // for: Grow; where memory is short, up to three rounds of getting back
  // what is free but not usable yet (in flight, held for other streams,
  // unsettled), then Remake. Counts its time in slow_path_us.
  absl::StatusOr<Block*> GrowOrRetry(Pool* pool, size_t rounded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts and traces an out of memory for a request of `size` bytes and
  // returns its error, with `cause`'s code.
  absl::Status OutOfMemory(size_t size, StreamHandle stream,
                           const absl::Status& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string OutOfMemoryMessage(size_t size, StreamHandle stream,
                                 const absl::Status& cause) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MemPool(use_on_oom=True)'s last resort for a request of default memory
  // (`rounded` of `requested` bytes): a free block of a pool so marked, on
  // `stream`, allocated; nullopt when none fits.
  std::optional<DevicePtr> BorrowFromUseOnOomPools(size_t rounded,
                                                   size_t requested,
                                                   StreamHandle stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Pools another allocator serves (device_allocator_external.cc).
  struct External {
    MempoolId id{0, 0};  // PyTorch's, kept for snapshots after release
    std::shared_ptr<ExternalMemory> memory;
    ExternalPool books;
    bool retired = false;  // released: nothing is cached for it any more
  };
  // The external pool a malloc routed to `tag` goes to; null if none.
  External* ExternalFor(uint32_t tag) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (external_.empty()) return nullptr;
    auto it = external_.find(tag);
    return it == external_.end() ? nullptr : it->second.get();
  }
  // Serves `size` from external pool `tag`: a cached block, else a new
  // segment of its memory (within the capacity). Releases mu_ for the
  // memory's calls.
  absl::StatusOr<DevicePtr> MallocExternal(uint32_t tag, size_t size,
                                           StreamHandle stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One segment event (segment_observer.h) into the history and to the
  // process's segment observer: gmlake's pages mapped or unmapped for
  // `pool`, or another allocator's segment taken or given back for `id`.
  void RecordMapping(TraceAction action, DevicePtr addr, uint64_t bytes,
                     const Pool& pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordSegment(TraceAction action, DevicePtr addr, uint64_t bytes,
                     StreamHandle stream, MempoolId id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Books an external block handed out (statistics, history).
  void BookExternalBlock(uint32_t tag, const ExternalPool::Taken& t,
                         size_t requested, StreamHandle stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees `ptr` if an external pool's block: true then (with `*status`).
  bool FreeExternal(DevicePtr ptr, absl::Status* status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the external blocks freed during a capture with other streams
  // to wait for (now that no capture is left). Releases mu_.
  void FreeDeferredExternal() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives pool `tag`'s wholly free segments back to its memory (all of
  // them, once retired and empty: then the pool is forgotten). Releases
  // mu_ for the calls. Returns the bytes.
  uint64_t GiveBackExternal(uint32_t tag) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `bytes` more would pass the capacity while external pools
  // hold memory (gmlake's lake counts only its own chunks).
  bool ExternalLeavesRoom(uint64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendExternalSegments(std::vector<SegmentView>* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_;
  ChunkSource* const source_;
  VmmBackend* const backend_;
  const AllocatorOptions options_;
  const size_t page_size_;
  const std::vector<int> access_devices_;

  mutable Mutex mu_;
  std::vector<std::unique_ptr<Arena>> large_arenas_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Arena>> small_arenas_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Pool>> pools_ ABSL_GUARDED_BY(mu_);
  Pool* last_pool_[2] ABSL_GUARDED_BY(mu_) = {nullptr, nullptr};
  absl::flat_hash_map<DevicePtr, Block*> live_ ABSL_GUARDED_BY(mu_);
  // Streams other than its own that an allocation was used on.
  absl::flat_hash_map<DevicePtr, std::vector<StreamHandle>> other_streams_
      ABSL_GUARDED_BY(mu_);
  struct Pending {
    Block* block;
    std::vector<EventHandle> events;
  };
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  MemoryPools mempools_ ABSL_GUARDED_BY(mu_);
  // Frees of blocks used on other streams, made during a capture: their
  // events are recorded once no capture is left. `after`: the capture
  // graph's nodes those streams had reached at the free (none where the
  // backend cannot tell); once the block's own stream follows all of them,
  // the block is reusable inside the capture (ReuseJoinedFrees).
  struct DeferredFree {
    Block* block;
    std::vector<StreamHandle> streams;
    std::vector<uint64_t> after;
  };
  std::vector<DeferredFree> deferred_ ABSL_GUARDED_BY(mu_);
  std::vector<EventHandle> idle_events_ ABSL_GUARDED_BY(mu_);
  // Pages go dormant in generations, one per slow path. Every generation
  // up to done_gen_ is no longer in use on any stream the device has seen
  // (a SettleAll or a fence completed after it).
  uint64_t next_gen_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t done_gen_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<EventHandle> fence_events_ ABSL_GUARDED_BY(mu_);
  uint64_t fence_gen_ ABSL_GUARDED_BY(mu_) = 0;
  bool fence_busy_ ABSL_GUARDED_BY(mu_) = false;
  // Dormant mappings per chunk: a chunk leaves the process only with none.
  absl::flat_hash_map<ChunkHandle, uint32_t> dormant_count_
      ABSL_GUARDED_BY(mu_);
  size_t dormant_pages_ ABSL_GUARDED_BY(mu_) = 0;
  // Slow paths and reclaims under way with mu_ down (they hold memory in
  // flight); a malloc about to fail waits for them first.
  int slow_paths_ ABSL_GUARDED_BY(mu_) = 0;
  // Frees so far; blocks freed at or before settled_seq_ were freed before
  // a completed wait for every stream.
  uint64_t free_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t settled_seq_ ABSL_GUARDED_BY(mu_) = 0;
  CondVar slow_path_done_;
  // Whether a thread is reserving a large [0] or small [1] arena with mu_
  // down; arena_reserved_ is signalled when it is done.
  bool reserving_arena_[2] ABSL_GUARDED_BY(mu_) = {false, false};
  CondVar arena_reserved_;
  std::vector<SizedChunk> cached_ ABSL_GUARDED_BY(mu_);  // held, unmapped
  // Bytes the lake made for the rest of a mapping while a larger free chunk
  // could have covered it (CoverNow).
  uint64_t stranded_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Held chunks on their way between mapped and cached/returned while a
  // slow path has the lock down.
  uint64_t in_transit_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  ObjectPool<Block> blocks_ ABSL_GUARDED_BY(mu_);
  // By pool tag; the live blocks of all of them, by address, with their
  // pool's tag.
  absl::flat_hash_map<uint32_t, std::unique_ptr<External>> external_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<DevicePtr, uint32_t> external_live_ ABSL_GUARDED_BY(mu_);
  // Their segments (in reserved_bytes too), all and small.
  uint64_t external_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t external_small_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t external_allocated_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<DevicePtr, std::vector<StreamHandle>>>
      external_deferred_ ABSL_GUARDED_BY(mu_);
  AllocatorStats stats_ ABSL_GUARDED_BY(mu_);
  // The most allocated at once, ever: what the policies (grow or stitch,
  // cover) measure against. stats_'s peak is the caller's to reset
  // (torch.cuda.reset_peak_memory_stats); a reset must not make the process
  // stitch where it would have grown.
  uint64_t most_allocated_ ABSL_GUARDED_BY(mu_) = 0;
  TraceRecorder trace_;
  // With unmap_thread: unmaps dormant pages over the bound off the malloc
  // thread. Stopped first in the destructor (its task takes mu_).
  std::unique_ptr<CoalescingWorker> unmapper_;
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_DEVICE_ALLOCATOR_H_
