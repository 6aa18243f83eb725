// Copyright 2026 The GMLake Authors.

#include "client/device_allocator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/chunk_cover.h"
#include "client/segment_observer.h"
#include "client/stitch_policy.h"
#include "common/bytes.h"
#include "common/mutex.h"

namespace gmlake {
namespace {

constexpr size_t kRound = 512;  // as PyTorch rounds every request

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::vector<int> AllDevices(VmmBackend* backend) {
  std::vector<int> d(backend->device_count());
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<int>(i);
  return d;
}

}  // namespace

DeviceAllocator::DeviceAllocator(int device, ChunkSource* source,
                                 const AllocatorOptions& options)
    : device_(device),
      source_(source),
      backend_(source->backend()),
      options_(options),
      page_size_(source->chunk_size(device)),
      // Every device may touch every allocation (peer access), as with
      // cudaMalloc memory under CUDA's default peer settings for VMM.
      access_devices_(AllDevices(source->backend())) {
  if (options_.unmap_thread) {
    unmapper_ = std::make_unique<CoalescingWorker>([this] {
      MutexLock lock(&mu_);
      UnmapDormant(/*settled=*/false);
    });
  }
}

DeviceAllocator::~DeviceAllocator() {
  unmapper_.reset();  // before mu_: its task takes mu_
  MutexLock lock(&mu_);
  while (slow_paths_ > 0) slow_path_done_.Wait(&mu_);
  if (SettleAll(&AllocatorStats::reclaim_waits).ok()) UnmapDormant(true);
  std::vector<SizedChunk> chunks = std::move(cached_);
  for (auto* arenas : {&large_arenas_, &small_arenas_}) {
    for (auto& arena : *arenas) {
      for (auto& [first, seg] : arena->segments) {
        std::vector<SizedChunk> mapped =
            ForgetMapped(arena.get(), seg->first_page, seg->end_page());
        UnmapChunks(backend_, arena->PageAddr(seg->first_page), mapped)
            .IgnoreError();
        chunks.insert(chunks.end(), mapped.begin(), mapped.end());
        delete seg;
      }
    }
  }
  if (!chunks.empty()) source_->ReturnSized(device_, chunks);
  for (EventHandle e : fence_events_) backend_->DestroyEvent(e).IgnoreError();
  for (EventHandle e : idle_events_) backend_->DestroyEvent(e).IgnoreError();
}

Pool* DeviceAllocator::GetPool(StreamHandle stream, bool small,
                               uint32_t mempool) {
  Pool*& last = last_pool_[small];
  if (last != nullptr && last->stream == stream && last->mempool == mempool) {
    return last;
  }
  for (auto& p : pools_) {
    if (p->stream == stream && p->small == small && p->mempool == mempool) {
      return last = p.get();
    }
  }
  pools_.push_back(std::make_unique<Pool>());
  pools_.back()->stream = stream;
  pools_.back()->small = small;
  pools_.back()->mempool = mempool;
  pools_.back()->no_split = mempool != 0 && mempools_.NoSplit(mempool);
  pools_.back()->free.CountInto(&stats_.inactive_split, small);
  return last = pools_.back().get();
}

Block* DeviceAllocator::FindFree(Pool* pool, size_t size) const {
  if (!pool->no_split) return pool->free.Find(size);
  // Whole blocks only, so no larger than what the request would map: a
  // no_split pool is for few, large buffers (NCCL windows); linear is fine.
  const size_t most = RoundUp(size, page_size_);
  Block* best = nullptr;
  pool->free.ForEach([&](Block* b) {
    if (b->size >= size && b->size <= most &&
        (best == nullptr || b->size < best->size)) {
      best = b;
    }
  });
  return best;
}

// --- The fast path ----------------------------------------------------------

absl::StatusOr<DevicePtr> DeviceAllocator::Malloc(size_t size,
                                                  StreamHandle stream) {
  if (size == 0) return DevicePtr{0};
  const size_t rounded = RoundUp(size, kRound);
  TraceRecorder::CallScope call(&trace_, CallKind::kAllocates);
  MutexLock lock(&mu_);
  // Querying events is illegal while a stream is captured.
  if (!pending_.empty() && !capturing()) ProcessPending();
  const uint32_t route = mempools_.Route(stream);
  if (ExternalFor(route) != nullptr) return MallocExternal(route, size, stream);
  // A no_split pool's blocks are whole pages of their own: large arena.
  const bool small = rounded <= options_.small_size &&
                     (route == 0 || !mempools_.NoSplit(route));
  Pool* pool = GetPool(stream, small, route);
  if (!deferred_.empty() && capturing()) ReuseJoinedFrees(pool);
  Block* b = FindFree(pool, rounded);
  if (b != nullptr) {
    pool->free.Remove(b);
  } else {
    absl::StatusOr<Block*> grown = GrowOrRetry(pool, rounded);
    // PyTorch's last resort: pools made with use_on_oom lend free blocks
    // to default memory.
    if (!grown.ok() && absl::IsResourceExhausted(grown.status()) &&
        route == 0) {
      if (std::optional<DevicePtr> lent =
              BorrowFromUseOnOomPools(rounded, size, stream)) {
        return *lent;
      }
    }
    if (!grown.ok()) return OutOfMemory(size, stream, grown.status());
    b = *grown;
  }
  Allocate(b, rounded, size);
  return b->addr;
}

absl::StatusOr<Block*> DeviceAllocator::GrowOrRetry(Pool* pool,
                                                    size_t rounded) {
  const absl::Time slow_start = absl::Now();
  absl::StatusOr<Block*> grown = Grow(pool, rounded);
  // The retries wait for every stream: not while a capture is under way.
  for (int round = 0; round < 3 && !capturing() && !grown.ok() &&
                      absl::IsResourceExhausted(grown.status());
       ++round) {
    // Before failing, get back what is free but not usable yet and try
    // again: memory other threads' slow paths hold in flight, memory held
    // back for other streams' work, free blocks of different streams that
    // share a chunk, and old pages of stitched chunks.
    ++stats_.num_alloc_retries;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (slow_paths_ > 0 &&
           !slow_path_done_.WaitWithDeadline(&mu_, deadline)) {
    }
    if (!SettleAll(&AllocatorStats::host_waits).ok()) break;
    ProcessPending();
    MergeSettledNeighbours();
    // What came back may fit as it is (Grow only makes or stitches).
    if (Block* back = FindFree(pool, rounded)) {
      pool->free.Remove(back);
      grown = back;
      break;
    }
    grown = Grow(pool, rounded);
  }
  // (Without stitching, for comparison, nothing freed is mapped anew.)
  if (!grown.ok() && absl::IsResourceExhausted(grown.status()) &&
      options_.stitch) {
    grown = Remake(pool, rounded, grown.status());
  }
  stats_.slow_path_us += absl::ToInt64Microseconds(absl::Now() - slow_start);
  return grown;
}

absl::Status DeviceAllocator::OutOfMemory(size_t size, StreamHandle stream,
                                          const absl::Status& cause) {
  ++stats_.num_ooms;
  if (trace_.on()) {
    const uint64_t cap = source_->capacity_bytes(device_);
    const uint64_t held = static_cast<uint64_t>(stats_.reserved_bytes.current);
    trace_.Record(TraceAction::kOom, 0, size, stream,
                  cap > held ? cap - held : 0);
  }
  return absl::Status(cause.code(), OutOfMemoryMessage(size, stream, cause));
}

void DeviceAllocator::Allocate(Block* b, size_t size, size_t requested) {
  const bool small = b->pool->small;
  stats_.inactive_split_bytes.Add(-static_cast<int64_t>(b->size), small);
  if (!b->pool->no_split && b->size - size >= kRound) {
    Block* rest = blocks_.New();
    rest->addr = b->addr + size;
    rest->size = b->size - size;
    rest->pool = b->pool;
    rest->segment = b->segment;
    rest->prev = b;
    rest->next = b->next;
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    if (b->segment->tail == b) b->segment->tail = rest;
    b->size = size;
    // b was a maximal free run of its pool, so rest has no free neighbour
    // of the same pool to merge with.
    rest->pool->free.Insert(rest);
    stats_.inactive_split_bytes.Add(static_cast<int64_t>(rest->size), small);
  }
  b->state = BlockState::kAllocated;
  b->requested = requested;
  b->stack = trace_.block_stacks() ? TraceRecorder::CurrentStack()
                                   : StackCapture::kNoStack;
  live_[b->addr] = b;
  CountLive(b->size, requested, small, +1);
  CountActive(b->size, small, +1);
  if (trace_.on()) {
    trace_.Record(TraceAction::kAlloc, b->addr, requested, b->pool->stream);
  }
}

void DeviceAllocator::CountLive(size_t size, size_t requested, bool small,
                                int sign) {
  (sign > 0 ? stats_.num_mallocs : stats_.num_frees) += 1;
  stats_.allocated_bytes.Add(sign * static_cast<int64_t>(size), small);
  if (sign > 0) {
    most_allocated_ = std::max<uint64_t>(
        most_allocated_, static_cast<uint64_t>(stats_.allocated_bytes.current));
  }
  stats_.requested_bytes.Add(sign * static_cast<int64_t>(requested), small);
  stats_.allocation.Add(sign, small);
}

void DeviceAllocator::CountActive(size_t size, bool small, int sign) {
  stats_.active_bytes.Add(sign * static_cast<int64_t>(size), small);
  stats_.active.Add(sign, small);
}

absl::Status DeviceAllocator::Free(DevicePtr ptr) {
  TraceRecorder::CallScope call(&trace_, CallKind::kFrees);
  MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    if (absl::Status s; FreeExternal(ptr, &s)) return s;
    return absl::NotFoundError(absl::StrFormat(
        "free(0x%x): not a live allocation of device %d (freed twice, or "
        "not from gmlake?)",
        ptr, device_));
  }
  Block* b = it->second;
  live_.erase(it);
  CountLive(b->size, b->requested, b->pool->small, -1);
  if (trace_.on()) {
    trace_.Record(TraceAction::kFreeRequested, ptr, b->requested,
                  b->pool->stream);
  }
  if (!other_streams_.empty()) {
    auto o = other_streams_.find(ptr);
    if (o != other_streams_.end()) {
      // Reuse must wait for the other streams' work queued up to now.
      std::vector<StreamHandle> streams = std::move(o->second);
      other_streams_.erase(o);
      b->state = BlockState::kPending;
      if (capturing()) {
        // No event may be recorded now (PyTorch defers these too); the
        // capture graph may say sooner when the block is safe to reuse.
        std::vector<uint64_t> after = CaptureMarks(streams);
        deferred_.push_back({b, std::move(streams), std::move(after)});
        return absl::OkStatus();
      }
      return FreeAfterStreams(b, std::move(streams));
    }
  }
  MakeReusable(b);
  return absl::OkStatus();
}

absl::Status DeviceAllocator::FreeAfterStreams(
    Block* b, std::vector<StreamHandle> streams) {
  Pending pending{b, TakeIdleEvents(streams.size())};
  mu_.Unlock();
  absl::Status recorded;
  for (size_t i = 0; i < streams.size() && recorded.ok(); ++i) {
    if (i == pending.events.size()) {
      absl::StatusOr<EventHandle> e = backend_->CreateEvent(device_);
      if (!e.ok()) {
        recorded = e.status();
        break;
      }
      pending.events.push_back(*e);
    }
    recorded = backend_->RecordEvent(pending.events[i], streams[i]);
  }
  mu_.Lock();
  if (recorded.ok()) {
    pending_.push_back(std::move(pending));
    return absl::OkStatus();
  }
  // No event to wait on: wait for every stream now instead, so the
  // block is never lost nor reused too early.
  idle_events_.insert(idle_events_.end(), pending.events.begin(),
                      pending.events.end());
  absl::Status settled = SettleAll(&AllocatorStats::host_waits);
  MakeReusable(b);
  return settled;
}

void DeviceAllocator::MakeReusable(Block* b) {
  // A released pool's block joins its stream's default memory.
  if (b->pool->retired) b->pool = GetPool(b->pool->stream, b->pool->small, 0);
  b->free_seq = ++free_seq_;
  const bool small = b->pool->small;
  CountActive(b->size, small, -1);
  stats_.inactive_split_bytes.Add(static_cast<int64_t>(b->size), small);
  if (trace_.on()) {
    trace_.Record(TraceAction::kFreeCompleted, b->addr, b->requested,
                  b->pool->stream);
  }
  InsertFree(b);
}

void DeviceAllocator::Absorb(Block* b, Block* next) {
  b->size += next->size;
  b->free_seq = std::max(b->free_seq, next->free_seq);
  b->next = next->next;
  if (next->next != nullptr) next->next->prev = b;
  if (b->segment->tail == next) b->segment->tail = b;
  blocks_.Delete(next);
}

Block* DeviceAllocator::InsertFree(Block* b) {
  Pool* pool = b->pool;
  auto mergeable = [pool](const Block* n) {
    return n != nullptr && n->state == BlockState::kFree && n->pool == pool;
  };
  if (mergeable(b->prev)) {
    Block* prev = b->prev;
    pool->free.Remove(prev);
    Absorb(prev, b);
    b = prev;
  }
  if (mergeable(b->next)) {
    pool->free.Remove(b->next);
    Absorb(b, b->next);
  }
  pool->free.Insert(b);
  return b;
}

absl::Status DeviceAllocator::RecordStream(DevicePtr ptr, StreamHandle stream) {
  MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  const bool external = it == live_.end() && external_live_.contains(ptr);
  if (it == live_.end() && !external) {
    return absl::NotFoundError(absl::StrFormat(
        "record_stream(0x%x): not a live allocation of device %d", ptr,
        device_));
  }
  if (!external && it->second->pool->stream == stream) {
    return absl::OkStatus();
  }
  std::vector<StreamHandle>& streams = other_streams_[ptr];
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) {
    streams.push_back(stream);
  }
  return absl::OkStatus();
}

void DeviceAllocator::ProcessPending() {
  // Query the events with the lock down: other threads keep allocating.
  std::vector<Pending> work;
  work.swap(pending_);
  std::vector<bool> done(work.size(), true);
  mu_.Unlock();
  for (size_t i = 0; i < work.size(); ++i) {
    for (EventHandle e : work[i].events) {
      absl::StatusOr<bool> q = backend_->QueryEvent(e);
      if (!q.ok() || !*q) {
        done[i] = false;
        break;
      }
    }
  }
  mu_.Lock();
  for (size_t i = 0; i < work.size(); ++i) {
    if (!done[i]) {
      pending_.push_back(std::move(work[i]));
      continue;
    }
    idle_events_.insert(idle_events_.end(), work[i].events.begin(),
                        work[i].events.end());
    MakeReusable(work[i].block);
  }
}

std::vector<EventHandle> DeviceAllocator::TakeIdleEvents(size_t n) {
  std::vector<EventHandle> events;
  while (events.size() < n && !idle_events_.empty()) {
    events.push_back(idle_events_.back());
    idle_events_.pop_back();
  }
  return events;
}

absl::Status DeviceAllocator::RecordOn(absl::Span<const StreamHandle> streams,
                                       std::vector<EventHandle>* events) {
  for (size_t i = 0; i < streams.size(); ++i) {
    if (i == events->size()) {
      absl::StatusOr<EventHandle> e = backend_->CreateEvent(device_);
      if (!e.ok()) return e.status();
      events->push_back(*e);
    }
    if (absl::Status s = backend_->RecordEvent((*events)[i], streams[i]);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::WaitForStreams(
    absl::Span<const StreamHandle> streams, std::vector<EventHandle>* events,
    int64_t* waited) {
  absl::Status s = RecordOn(streams, events);
  for (size_t i = 0; i < streams.size() && s.ok(); ++i) {
    s = WaitForEvent((*events)[i], waited);
  }
  return s;
}

absl::Status DeviceAllocator::WaitForEvent(EventHandle event, int64_t* waited) {
  // An idle stream's event has completed already: no wait to count.
  absl::StatusOr<bool> done = backend_->QueryEvent(event);
  if (done.ok() && *done) return absl::OkStatus();
  ++*waited;
  return backend_->SyncEvent(event);
}

absl::Status DeviceAllocator::HandOver(StreamHandle user,
                                       absl::Span<const StreamHandle> streams,
                                       std::vector<EventHandle>* events) {
  absl::Status s = RecordOn(streams, events);
  for (size_t i = 0; i < streams.size() && s.ok(); ++i) {
    // On its own stream, work is ordered already.
    if (streams[i] != user) s = backend_->WaitEventOnStream(user, (*events)[i]);
  }
  return s;
}

absl::Status DeviceAllocator::Settle(std::vector<StreamHandle> streams,
                                     std::vector<EventHandle> also_wait,
                                     WaitCounter counter) {
  std::vector<EventHandle> events = TakeIdleEvents(streams.size());
  int64_t waited = 0;
  mu_.Unlock();
  absl::Status s = WaitForStreams(streams, &events, &waited);
  for (EventHandle e : also_wait) {
    if (s.ok()) s = WaitForEvent(e, &waited);
  }
  mu_.Lock();
  stats_.*counter += waited;
  idle_events_.insert(idle_events_.end(), events.begin(), events.end());
  return s;
}

std::vector<StreamHandle> DeviceAllocator::SeenStreams() const {
  std::vector<StreamHandle> streams;
  for (const auto& p : pools_) {
    if (std::find(streams.begin(), streams.end(), p->stream) == streams.end()) {
      streams.push_back(p->stream);
    }
  }
  return streams;
}

absl::Status DeviceAllocator::SettleAll(WaitCounter counter) {
  ++stats_.num_sync_all_streams;
  const uint64_t seq = free_seq_;
  const uint64_t gen = next_gen_ - 1;
  std::vector<StreamHandle> streams = SeenStreams();
  std::vector<EventHandle> pending_events;
  for (const Pending& p : pending_) {
    pending_events.insert(pending_events.end(), p.events.begin(),
                          p.events.end());
  }
  absl::Status s =
      Settle(std::move(streams), std::move(pending_events), counter);
  if (s.ok()) {
    settled_seq_ = std::max(settled_seq_, seq);
    done_gen_ = std::max(done_gen_, gen);
  }
  return s;
}

void DeviceAllocator::MergeSettledNeighbours() {
  for (auto* arenas : {&large_arenas_, &small_arenas_}) {
    for (auto& a : *arenas) {
      for (auto& [first, seg] : a->segments) {
        for (Block* b = seg->head; b != nullptr && b->next != nullptr;) {
          Block* n = b->next;
          if (b->state != BlockState::kFree || n->state != BlockState::kFree ||
              b->pool == n->pool || b->pool->mempool != n->pool->mempool ||
              b->free_seq > settled_seq_ || n->free_seq > settled_seq_) {
            b = n;
            continue;
          }
          b->pool->free.Remove(b);
          n->pool->free.Remove(n);
          Absorb(b, n);
          // b may now touch a free block of its own pool beyond n.
          b = InsertFree(b);
        }
      }
    }
  }
}

bool DeviceAllocator::PassFence() {
  if (fence_busy_) return false;
  fence_busy_ = true;
  std::vector<EventHandle> events;
  uint64_t gen = fence_gen_;
  const bool recorded = !fence_events_.empty();
  std::vector<StreamHandle> streams;
  if (recorded) {
    events = fence_events_;
  } else {
    streams = SeenStreams();
    events = TakeIdleEvents(streams.size());
    gen = next_gen_ - 1;
  }
  bool passed = false;
  mu_.Unlock();
  if (recorded) {
    passed = true;
    for (EventHandle e : events) {
      absl::StatusOr<bool> done = backend_->QueryEvent(e);
      if (!done.ok() || !*done) {
        passed = false;
        break;
      }
    }
  } else if (!RecordOn(streams, &events).ok()) {
    events.resize(std::min(events.size(), streams.size()));
    streams.clear();  // not recorded: nothing to wait for
  }
  mu_.Lock();
  fence_busy_ = false;
  if (!recorded) {
    if (streams.empty()) {
      idle_events_.insert(idle_events_.end(), events.begin(), events.end());
    } else {
      fence_events_ = std::move(events);
      fence_gen_ = gen;
    }
    return false;
  }
  if (!passed) return false;
  done_gen_ = std::max(done_gen_, fence_gen_);
  idle_events_.insert(idle_events_.end(), fence_events_.begin(),
                      fence_events_.end());
  fence_events_.clear();
  return true;
}

bool DeviceAllocator::DormantOverBound() const {
  // Dormant pages cost address space and, on the host backend, a mapping
  // each; keep at most about as many as are mapped in segments.
  const uint64_t limit =
      options_.max_dormant != 0
          ? options_.max_dormant
          : static_cast<uint64_t>(stats_.reserved_bytes.current) +
                (uint64_t{2} << 30);
  return dormant_pages_ > static_cast<size_t>(limit / page_size_);
}

void DeviceAllocator::TrimDormant() {
  if (unmapper_ == nullptr) {
    UnmapDormant(/*settled=*/false);
  } else if (DormantOverBound()) {
    unmapper_->Request();
  }
}

void DeviceAllocator::UnmapDormant(bool settled) {
  if (dormant_pages_ == 0) return;
  if (!settled && (!DormantOverBound() || !PassFence())) return;
  std::vector<DormantSpan> spans;
  for (auto* arenas : {&large_arenas_, &small_arenas_}) {
    for (auto& a : *arenas) {
      for (const auto& [first, end] : a->dormant_runs) {
        AppendUnmappable(a.get(), first, end, &spans);
      }
    }
  }
  UnmapSpans(spans);
}

void DeviceAllocator::AppendUnmappable(Arena* a, size_t first, size_t end,
                                       std::vector<DormantSpan>* out) const {
  size_t start = first;
  for (size_t q = first; q < end; q += a->dormant_pages[q]) {
    if (a->dormant_gen[q] > done_gen_) {
      if (start < q) out->push_back({a, start, q});
      start = q + a->dormant_pages[q];
    }
  }
  if (start < end) out->push_back({a, start, end});
}

void DeviceAllocator::UnmapSpans(absl::Span<const DormantSpan> spans) {
  // Take the spans out of the books, in flight.
  struct Run {
    Arena* arena;
    size_t first;
    std::vector<SizedChunk> chunks;
  };
  std::vector<Run> runs;
  for (const DormantSpan& d : spans) {
    runs.push_back({d.arena, d.first, ForgetDormant(d.arena, d.first, d.end)});
    d.arena->in_flight[d.first] = d.end - d.first;
    dormant_pages_ -= d.end - d.first;
  }
  if (runs.empty()) return;
  std::vector<bool> unmapped(runs.size(), false);
  ++slow_paths_;
  mu_.Unlock();
  for (size_t i = 0; i < runs.size(); ++i) {
    unmapped[i] = UnmapChunks(backend_, runs[i].arena->PageAddr(runs[i].first),
                              runs[i].chunks)
                      .ok();
  }
  mu_.Lock();
  --slow_paths_;
  slow_path_done_.SignalAll();
  for (size_t i = 0; i < runs.size(); ++i) {
    // A run whose unmap failed stays in flight: its address space is lost,
    // and its chunks stay counted dormant, so they never leave the process.
    if (!unmapped[i]) continue;
    runs[i].arena->in_flight.erase(runs[i].first);
    for (const SizedChunk& c : runs[i].chunks) {
      auto it = dormant_count_.find(c.handle);
      if (--it->second == 0) dormant_count_.erase(it);
      --stats_.dormant_chunks;
    }
  }
}

bool DeviceAllocator::ClearRoomToGrow(Pool* pool, size_t size) {
  // Nothing can stand in the way, or growing in place is off.
  if (dormant_pages_ == 0 || options_.grow_reach <= 0) return false;
  // Twice at most: once more after the fence passed with the lock down.
  for (int look = 0; look < 2; ++look) {
    // The free block closest below `size` that ends its segment, with
    // dormant pages right after it: a stitch left them there, and they stop
    // the block from growing by its shortfall. (A tensor that grows a
    // little each step, as a KV cache in Hugging Face's generate, otherwise
    // gets a fresh view of every chunk each time: docs/design.md.)
    Block* best = nullptr;
    pool->free.ForEach([&](Block* b) {
      mu_.AssertHeld();  // held by our caller; tells the lock checker
      if (b->size >= size || b != b->segment->tail) return;
      if (best != nullptr && b->size <= best->size) return;
      const Arena* a = b->segment->arena;
      const size_t end = b->segment->end_page();
      if (end < a->num_pages && a->dormant[end] != 0) best = b;
    });
    if (best == nullptr ||
        !GrowInPlace(best->size, size, options_.grow_reach)) {
      return false;
    }
    Arena* a = best->segment->arena;
    const size_t first = best->segment->end_page();
    const size_t need = (size - best->size + page_size_ - 1) / page_size_;
    // Whole dormant chunks over the pages it needs, up to the first page
    // that is not dormant (a gap, or mapped: the plan sees which).
    size_t end = first;
    while (end < a->num_pages && end < first + need && a->dormant[end] != 0) {
      end += a->dormant_pages[end];
    }
    // All of them, or none: a part would leave the block hemmed in still.
    std::vector<DormantSpan> spans;
    AppendUnmappable(a, first, end, &spans);
    if (spans.size() == 1 && spans[0].first == first && spans[0].end == end) {
      UnmapSpans(spans);
      return true;
    }
    // Perhaps still in use by work queued before the stitch: ask the fence
    // (a query, never a wait; the first call records it, the second finds
    // it passed when the streams are idle), else try on a later request.
    if (!PassFence() && !PassFence()) return false;
  }
  return false;
}

Block* DeviceAllocator::FreeBlockAt(Arena* arena, size_t page) const {
  const DevicePtr addr = arena->PageAddr(page);
  for (Block* b = arena->seg[page]->head; b != nullptr; b = b->next) {
    if (addr >= b->addr && addr < b->end()) return b;
  }
  return nullptr;
}

DeviceAllocator::FreeChunkPlaces DeviceAllocator::FreeChunksInUse() const {
  FreeChunkPlaces free_at;
  for (auto& p : pools_) {
    if (!p->LendsChunks()) continue;
    p->free.ForEach([&](Block* b) {
      mu_.AssertHeld();  // held by our caller; tells the lock checker
      Arena* a = b->segment->arena;
      const auto [first, end] = WholeChunksIn(b);
      for (size_t q = first; q < end; q += a->chunk_pages[q]) {
        free_at[a->chunk[q]] = {a, q};
      }
    });
  }
  return free_at;
}

DeviceAllocator::DormantWindow DeviceAllocator::FindDormantWindow(
    const Pool& pool, size_t need, const FreeChunkPlaces& free_at) const {
  absl::flat_hash_map<ChunkHandle, size_t> window;
  for (auto& a : pool.small ? small_arenas_ : large_arenas_) {
    for (const auto& [run_first, run_end] : a->dormant_runs) {
      window.clear();
      size_t start = run_first;
      for (size_t q = run_first; q < run_end;) {
        const ChunkHandle c = a->dormant[q];
        const size_t n = a->dormant_pages[q];
        if (!free_at.contains(c)) {
          window.clear();
          start = q + n;
        } else if (auto dup = window.find(c); dup != window.end()) {
          // Restart just after the first mapping of the same chunk.
          const size_t after = dup->second + a->dormant_pages[dup->second];
          for (size_t r = start; r < after; r += a->dormant_pages[r]) {
            window.erase(a->dormant[r]);
          }
          start = after;
          window[c] = q;
        } else {
          window[c] = q;
        }
        q += n;
        if (q - start >= need && !window.empty()) return {a.get(), start, q};
      }
    }
  }
  return {};
}

Block* DeviceAllocator::Reactivate(Pool* pool, size_t size) {
  if (dormant_pages_ == 0) return nullptr;
  const size_t need = (size + page_size_ - 1) / page_size_;
  // Where each whole free chunk is in use now (mapped in a free block).
  const FreeChunkPlaces free_at = FreeChunksInUse();
  if (free_at.empty()) return nullptr;
  // The first window of `need` pages of dormant chunks, all free and all
  // different (a chunk mapped twice in one block would alias itself).
  const DormantWindow w = FindDormantWindow(*pool, need, free_at);
  if (w.arena == nullptr) return nullptr;
  Arena* const arena = w.arena;
  const size_t first = w.first, end = w.end;

  // The window leaves the dormant books and is in flight; its chunks leave
  // the free blocks they are in (those pages stay mapped: dormant, below).
  std::vector<SizedChunk> chunks = ForgetDormant(arena, first, end);
  arena->in_flight[first] = end - first;
  dormant_pages_ -= end - first;
  std::vector<Detached> moved;
  std::vector<StreamHandle> streams;
  uint64_t bytes = 0;
  for (const SizedChunk& c : chunks) {
    auto it = dormant_count_.find(c.handle);
    if (--it->second == 0) dormant_count_.erase(it);
    --stats_.dormant_chunks;
    const auto [a, q] = free_at.at(c.handle);
    Block* f = FreeBlockAt(a, q);
    if (std::find(streams.begin(), streams.end(), f->pool->stream) ==
        streams.end()) {
      streams.push_back(f->pool->stream);
    }
    Detached d;
    d.arena = a;
    d.first_page = q;
    d.pool = f->pool;
    d.chunks = CutPages(f, q, q + c.size / page_size_);
    moved.push_back(std::move(d));
    bytes += c.size;
  }
  std::vector<EventHandle> events = TakeIdleEvents(streams.size());
  in_transit_bytes_ += bytes;
  ++slow_paths_;
  mu_.Unlock();
  const absl::Status handed = HandOver(pool->stream, streams, &events);
  mu_.Lock();
  --slow_paths_;
  slow_path_done_.SignalAll();
  in_transit_bytes_ -= bytes;
  arena->in_flight.erase(first);
  if (!handed.ok()) {
    UndoReactivate(w, chunks, &moved, &events);
    return nullptr;
  }
  for (Detached& d : moved) d.taken = true;
  FinishSteals(&moved, &events);
  RecordMapped(arena, first, chunks);
  ++stats_.reactivations;
  Block* b = AdoptPages(arena, first, end - first, pool);
  pool->free.Remove(b);
  return b;
}

void DeviceAllocator::UndoReactivate(const DormantWindow& w,
                                     const std::vector<SizedChunk>& chunks,
                                     std::vector<Detached>* moved,
                                     std::vector<EventHandle>* events) {
  // Everything back where it was: the chunks in their free blocks, the
  // window dormant.
  for (Detached& d : *moved) {
    d.arena->in_flight.erase(d.first_page);
    RecordMapped(d.arena, d.first_page, d.chunks);
    AdoptPages(d.arena, d.first_page, PagesOf(d.chunks, page_size_), d.pool);
  }
  RecordDormant(w.arena, w.first, chunks, next_gen_++);
  dormant_pages_ += w.end - w.first;
  for (const SizedChunk& c : chunks) ++dormant_count_[c.handle];
  stats_.dormant_chunks += static_cast<int64_t>(chunks.size());
  idle_events_.insert(idle_events_.end(), events->begin(), events->end());
}

uint64_t DeviceAllocator::GiveBack(std::vector<SizedChunk> chunks) {
  // A chunk still mapped at old pages must not reach another process.
  std::vector<SizedChunk> keep;
  chunks.erase(std::remove_if(chunks.begin(), chunks.end(),
                              [&](const SizedChunk& c) {
                                mu_.AssertHeld();  // held by our caller
                                if (!dormant_count_.contains(c.handle)) {
                                  return false;
                                }
                                keep.push_back(c);
                                return true;
                              }),
               chunks.end());
  uint64_t bytes = 0;
  for (const SizedChunk& c : keep) in_transit_bytes_ -= c.size;
  KeepUnmapped(keep);
  for (const SizedChunk& c : chunks) bytes += c.size;
  if (chunks.empty()) return 0;
  // Out of the books before the lake has them: another thread may take
  // them from the lake as soon as they are there, and reserved must never
  // count them twice (nor exceed the capacity).
  in_transit_bytes_ -= bytes;
  stats_.chunks_returned += static_cast<int64_t>(chunks.size());
  // Unmapped by now, so counted in the large pool.
  stats_.reserved_bytes.Add(-static_cast<int64_t>(bytes), false);
  mu_.Unlock();
  source_->ReturnSized(device_, chunks);
  mu_.Lock();
  return bytes;
}

// --- The slow path ----------------------------------------------------------
//
// The slow path makes driver calls (events, unmap, map, set access) and may
// wait for the lake; it never holds mu_ while it does. It decides under the
// lock, marks what it will touch (the pages it maps into and the chunks it
// takes are "in flight", the free blocks it will join are detached), drops
// the lock for the calls, and takes it again to record the result. Other
// threads meanwhile allocate and free as usual and plan around what is in
// flight.

Block* DeviceAllocator::TakeFromOtherStream(Pool* pool, size_t size) {
  // By index, and nothing of pools_ read with the lock down: other threads
  // add pools for new streams meanwhile, which moves the vector (a Pool
  // itself stays where it is).
  for (size_t i = 0; i < pools_.size(); ++i) {
    Pool* other = pools_[i].get();
    if (other == pool || other->small != pool->small ||
        other->mempool != pool->mempool) {
      continue;
    }
    Block* b = other->free.Find(size);
    if (b == nullptr) continue;
    other->free.Remove(b);
    b->state = BlockState::kDetached;
    // The block's last user may still be running on its stream: the new
    // one waits for it on the device, not here.
    std::vector<EventHandle> events = TakeIdleEvents(1);
    const StreamHandle streams[] = {other->stream};
    const StreamHandle user = pool->stream;
    mu_.Unlock();
    const absl::Status handed = HandOver(user, streams, &events);
    mu_.Lock();
    idle_events_.insert(idle_events_.end(), events.begin(), events.end());
    b->state = BlockState::kFree;
    if (!handed.ok()) {
      InsertFree(b);
      continue;
    }
    b->pool = pool;
    ++stats_.cross_stream_reuses;
    // It may now touch free blocks of its new pool: merge with them.
    Block* merged = InsertFree(b);
    pool->free.Remove(merged);
    return merged;
  }
  return nullptr;
}

absl::StatusOr<Arena*> DeviceAllocator::NewArena(bool small) {
  mu_.Unlock();
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(
      backend_, small ? options_.small_arena : options_.large_arena, page_size_,
      small, device_);
  mu_.Lock();
  if (!arena.ok()) return arena.status();
  auto& list = small ? small_arenas_ : large_arenas_;
  list.push_back(*std::move(arena));
  return list.back().get();
}

std::optional<DeviceAllocator::Plan> DeviceAllocator::FindRoom(Pool* pool,
                                                               size_t size) {
  if (pool->small) {
    // One chunk, anywhere: small blocks never span chunks.
    for (auto& a : small_arenas_) {
      for (size_t p = 0; p < a->num_pages; ++p) {
        if (!a->Taken(p)) {
          Plan plan;
          plan.arena = a.get();
          plan.first_page = p;
          plan.pages = 1;
          return plan;
        }
      }
    }
    return std::nullopt;
  }
  std::vector<GapView> gaps;
  std::vector<Plan> owners;
  for (auto& a : large_arenas_) AddGaps(a.get(), pool, &gaps, &owners);
  // The best gap of every arena, not the first arena's that fits.
  std::optional<Placement> p = ChoosePlacement(gaps, size, page_size_);
  if (!p.has_value()) return std::nullopt;
  Plan plan = owners[p->gap];
  plan.first_page = p->first_page;
  plan.pages = p->pages;
  return plan;
}

void DeviceAllocator::AddGaps(Arena* a, Pool* pool, std::vector<GapView>* gaps,
                              std::vector<Plan>* owners) {
  auto usable = [&](Block* b) {
    return b != nullptr && b->state == BlockState::kFree && b->pool == pool
               ? b
               : nullptr;
  };
  // What is mapped or in flight, in address order; the rest is gap.
  std::map<size_t, std::pair<size_t, const Segment*>> taken;
  for (const auto& [first, seg] : a->segments) {
    taken[first] = {seg->end_page(), seg};
  }
  for (const auto& [first, pages] : a->in_flight) {
    taken[first] = {first + pages, nullptr};
  }
  for (const auto& [first, end] : a->dormant_runs) {
    taken[first] = {end, nullptr};
  }
  size_t cursor = 0;
  const Segment* left = nullptr;
  auto add_gap = [&](size_t end, const Segment* right) {
    Plan o;
    o.arena = a;
    // A no_split pool's growth extends nothing: a block of its own.
    if (!pool->no_split) {
      o.keep_a = usable(left != nullptr ? left->tail : nullptr);
      o.keep_b = usable(right != nullptr ? right->head : nullptr);
    }
    // A private pool's growth stays a page apart from whatever is mapped
    // beside it, unless it extends a free block of its own: one segment
    // per growth, as PyTorch's cudaMalloc per segment
    // (test_allocate_in_thread_to_pool counts them), not as many as the
    // other streams' mappings happened to leave room for. Only address
    // space pays.
    size_t first = cursor;
    if (pool->mempool != 0) {
      if (cursor > 0 && o.keep_a == nullptr) ++first;
      if (end < a->num_pages && o.keep_b == nullptr && end > first) --end;
    }
    if (end <= first) return;
    gaps->push_back(GapView{first, end - first, o.keep_a ? o.keep_a->size : 0,
                            o.keep_b ? o.keep_b->size : 0});
    owners->push_back(o);
  };
  for (const auto& [first, run] : taken) {
    add_gap(first, run.second);
    cursor = run.first;
    left = run.second;
  }
  add_gap(a->num_pages, nullptr);
}

absl::StatusOr<DeviceAllocator::Plan> DeviceAllocator::PlanMapping(
    Pool* pool, size_t size) {
  // No room in any arena: reserve another, one thread at a time. Threads
  // that found no room while one reserves look again in what it reserved:
  // an arena is 512 GiB of address space, and eight threads growing at
  // once reserved eight (under ThreadSanitizer, whose heap holds few such
  // ranges, all but the first failed as out of memory).
  const int kind = pool->small ? 1 : 0;
  for (;;) {
    if (std::optional<Plan> room = FindRoom(pool, size)) return *room;
    if (!reserving_arena_[kind]) break;
    arena_reserved_.Wait(&mu_);
  }
  Plan plan;
  plan.pages = pool->small ? 1 : (size + page_size_ - 1) / page_size_;
  reserving_arena_[kind] = true;
  absl::StatusOr<Arena*> made = NewArena(pool->small);
  reserving_arena_[kind] = false;
  arena_reserved_.SignalAll();
  if (!made.ok()) return made.status();
  if (plan.pages > (*made)->num_pages) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a request of ", FormatBytes(size), " exceeds the arena (",
                     FormatBytes((*made)->num_pages * page_size_),
                     "): raise large_arena in GMLAKE_CONF"));
  }
  plan.arena = *made;
  plan.first_page = 0;
  return plan;
}

absl::StatusOr<Block*> DeviceAllocator::Grow(Pool* pool, size_t size) {
  // Another thread can leave the books other than planned while the lock
  // is down (it never takes what is in flight); then plan again. While a
  // stream is captured only memory mapped anew or cached serves: taking
  // from other streams, reactivating and stitching record events.
  const bool capture = capturing();
  if (!capture) TrimDormant();
  bool lake_refused = false;
  for (int attempt = 0; attempt < 4; ++attempt) {
    // Both hand over a block inside a mapping of other blocks: not for a
    // no_split pool, whose every block is a segment.
    if (!capture && !pool->no_split) {
      if (Block* b = TakeFromOtherStream(pool, size)) return b;
    }
    if (options_.stitch && !capture && !pool->no_split) {
      if (Block* b = Reactivate(pool, size)) return b;
    }
    if (attempt == 0 && !capture && !pool->small) ClearRoomToGrow(pool, size);
    absl::StatusOr<Plan> plan = PlanMapping(pool, size);
    if (!plan.ok()) return plan.status();
    plan->arena->in_flight[plan->first_page] = plan->pages;
    for (Block* keep : {plan->keep_a, plan->keep_b}) {
      if (keep != nullptr) keep->pool->free.Remove(keep);
    }
    Gathering g = GatherChunks(pool, &*plan, size, capture, lake_refused);
    absl::Status status = MapGathered(pool, *plan, &g);
    // Refused while growing rather than stitching: stitch next time.
    if (g.lake_refused && g.grow) lake_refused = true;
    BookMapping(*plan, status.ok(), &g);
    if (!status.ok()) {
      if (g.grow && absl::IsResourceExhausted(status)) continue;  // stitch
      return status;
    }
    Block* b = AdoptPages(plan->arena, plan->first_page, plan->pages, pool);
    if (b->size >= size) {
      pool->free.Remove(b);
      return b;
    }
  }
  return absl::InternalError(absl::StrCat(
      "gmlake: mapped memory for a ", size,
      "-byte request four times and another thread took it each time"));
}

DeviceAllocator::Gathering DeviceAllocator::GatherChunks(Pool* pool, Plan* plan,
                                                         size_t size,
                                                         bool capture,
                                                         bool lake_refused) {
  // Chunks: held unmapped, then whole free chunks of free blocks (the
  // stitch; unmapped later), then new ones from the lake (MapGathered).
  Gathering g;
  g.chunks = TakeCached(plan->pages, /*at_least=*/false);
  size_t have = PagesOf(g.chunks, page_size_);
  const uint64_t allocated_after =
      static_cast<uint64_t>(stats_.allocated_bytes.current) + size;
  const uint64_t allocated_peak =
      std::max<uint64_t>(most_allocated_, allocated_after);
  g.grow = !lake_refused &&
           GrowRatherThanStitch(
               static_cast<uint64_t>(stats_.reserved_bytes.current),
               uint64_t{plan->pages - have} * page_size_, allocated_peak,
               GrowSlackFor(size, allocated_after > most_allocated_,
                            options_.grow_slack, options_.grow_slack_large));
  const bool steal = options_.stitch && !g.grow && !capture;
  // A free block growing by a page: a cover first (CoverBeforeStealing).
  if (have < plan->pages && steal &&
      CoverBeforeStealing(pool->small,
                          plan->keep_a != nullptr || plan->keep_b != nullptr,
                          plan->pages - have)) {
    g.cover = CoverRest(plan, plan->pages - have, steal, &g.chunks, &g.stolen,
                        &g.streams);
    if (g.cover.handle != 0) have = plan->pages;
  }
  if (have < plan->pages && steal) {
    have += StealBooks(plan->pages - have, plan->keep_a, plan->keep_b,
                       &g.stolen, &g.streams, /*at_least=*/false);
  }
  // Every free chunk left is larger than the rest: one of them whole,
  // its extra pages a free tail, rather than a new chunk. Also after a
  // cover tried first: that try counted its rest as stranded, which can
  // make CoverNow say yes now (llama3b_infer_large: 25,308 calls, 27,526
  // trying once).
  if (have < plan->pages) {
    g.cover = CoverRest(plan, plan->pages - have, steal, &g.chunks, &g.stolen,
                        &g.streams);
    if (g.cover.handle != 0) have = plan->pages;
  }
  g.missing = uint64_t{plan->pages - have} * page_size_;
  // The lake counts only its chunks; MemPools' own allocators' segments
  // count against the capacity too.
  g.external_full = g.missing != 0 && external_reserved_ != 0 &&
                    !ExternalLeavesRoom(g.missing);
  return g;
}

absl::Status DeviceAllocator::MapGathered(Pool* pool, const Plan& plan,
                                          Gathering* g) {
  g->events = TakeIdleEvents(g->streams.size());
  ++slow_paths_;
  mu_.Unlock();
  // The stolen chunks stay mapped where they were, for the kernels queued
  // on them (unmapping does not wait for kernels), and are mapped here as
  // well: the stitch costs no wait for the GPU. Their old pages are
  // unmapped once the events recorded now have completed.
  absl::Status status = HandOver(pool->stream, g->streams, &g->events);
  if (status.ok()) {
    for (Detached& d : g->stolen) {
      d.taken = true;
      g->chunks.insert(g->chunks.end(), d.chunks.begin(), d.chunks.end());
    }
  }
  if (status.ok() && g->external_full) {
    status = absl::ResourceExhaustedError(absl::StrCat(
        "the capacity (", FormatBytes(source_->capacity_bytes(device_)),
        ") holds segments of MemPools' own allocators as well"));
    g->lake_refused = true;
  } else if (status.ok() && g->missing != 0) {
    const absl::Time acquire_start = absl::Now();
    absl::StatusOr<std::vector<SizedChunk>> more =
        source_->AcquireBytes(device_, g->missing);
    g->acquire_nanos = absl::ToInt64Nanoseconds(absl::Now() - acquire_start);
    if (more.ok()) {
      g->acquired_chunks = more->size();
      g->chunks.insert(g->chunks.end(), more->begin(), more->end());
    } else {
      g->lake_refused = true;
      status = more.status();
    }
  }
  if (status.ok() && g->cover.handle != 0) PlaceCover(g->cover, &g->chunks);
  if (status.ok()) {
    status = MapChunks(backend_, plan.arena->PageAddr(plan.first_page),
                       g->chunks, access_devices_);
  }
  mu_.Lock();
  --slow_paths_;
  slow_path_done_.SignalAll();
  return status;
}

void DeviceAllocator::BookMapping(const Plan& plan, bool mapped, Gathering* g) {
  // What came from the cache or from free blocks is no longer in transit:
  // it is mapped below, or kept unmapped.
  const uint64_t acquired = g->acquired_chunks != 0 ? g->missing : 0;
  in_transit_bytes_ -= PagesOf(g->chunks, page_size_) * page_size_ - acquired;
  stats_.acquire_us += g->acquire_nanos / 1000;
  if (acquired != 0) {
    stats_.chunks_acquired += static_cast<int64_t>(g->acquired_chunks);
    // Counted in the large pool until mapped in the small arena.
    stats_.reserved_bytes.Add(static_cast<int64_t>(acquired), false);
  }
  FinishSteals(&g->stolen, &g->events);
  for (Block* keep : {plan.keep_a, plan.keep_b}) {
    if (keep != nullptr) InsertFree(keep);
  }
  plan.arena->in_flight.erase(plan.first_page);
  if (!mapped) {
    KeepUnmapped(g->chunks);
    return;
  }
  RecordMapped(plan.arena, plan.first_page, g->chunks);
  if (!g->stolen.empty()) {
    ++stats_.stitches;
    stats_.stitched_bytes += static_cast<int64_t>(plan.pages * page_size_);
  }
}

std::vector<SizedChunk> DeviceAllocator::TakeCached(size_t pages,
                                                    bool at_least) {
  std::vector<SizedChunk> out;
  size_t have = 0;
  auto take = [&](size_t i) {
    mu_.AssertHeld();  // held by our caller; tells the lock checker
    out.push_back(cached_[i]);
    cached_bytes_ -= cached_[i].size;
    in_transit_bytes_ += cached_[i].size;
    have += cached_[i].size / page_size_;
    cached_.erase(cached_.begin() + i);
  };
  // Those that fit what is still missing, largest first.
  std::sort(
      cached_.begin(), cached_.end(),
      [](const SizedChunk& a, const SizedChunk& b) { return a.size < b.size; });
  for (size_t i = cached_.size(); i-- > 0 && have < pages;) {
    if (cached_[i].size / page_size_ <= pages - have) take(i);
  }
  // Every one left is larger than the rest: the smallest covers it.
  if (at_least && have < pages && !cached_.empty()) take(0);
  return out;
}

size_t DeviceAllocator::RoomBeside(const Arena* a, size_t first, size_t end,
                                   size_t limit, bool before) const {
  size_t room = 0;
  if (before) {
    while (room < limit && first > room && !a->Taken(first - room - 1)) ++room;
  } else {
    while (room < limit && end + room < a->num_pages && !a->Taken(end + room)) {
      ++room;
    }
  }
  return room;
}

DeviceAllocator::Cover DeviceAllocator::CoverRest(
    Plan* plan, size_t rest, bool steal, std::vector<SizedChunk>* chunks,
    std::vector<Detached>* stolen, std::vector<StreamHandle>* streams) {
  Cover cover;
  const size_t max_extra = options_.cover_tail / page_size_;
  if (max_extra == 0) return cover;
  Arena* a = plan->arena;
  const size_t end = plan->first_page + plan->pages;
  const size_t after = RoomBeside(a, plan->first_page, end, max_extra, false);
  const size_t before = after >= max_extra ? 0
                                           : RoomBeside(a, plan->first_page,
                                                        end, max_extra, true);
  const size_t max_pages =
      MaxCoverPages(rest, std::max(after, before), max_extra);
  if (max_pages <= rest) return cover;
  const CoverChoice choice = ChooseCover(*plan, rest, max_pages, steal);
  if (choice.pages == 0) return cover;
  if (choice.block != nullptr &&
      !CoverNow(plan->arena->small, stranded_bytes_, most_allocated_,
                options_.cover_after)) {
    stranded_bytes_ += rest * page_size_;  // the lake makes the rest
    return cover;
  }
  if (choice.block != nullptr) {
    StealPages(choice.block, choice.first_page,
               choice.first_page + choice.pages, stolen, streams);
    cover.handle = stolen->back().chunks.front().handle;
  } else {
    const SizedChunk c = cached_[choice.cached];
    cached_.erase(cached_.begin() + choice.cached);
    cached_bytes_ -= c.size;
    in_transit_bytes_ += c.size;
    chunks->push_back(c);
    cover.handle = c.handle;
  }
  ++stats_.covers;
  // The plan grows by the extra pages, on the side with room for them.
  const size_t extra = choice.pages - rest;
  a->in_flight.erase(plan->first_page);
  cover.at_front = after < extra;
  if (cover.at_front) plan->first_page -= extra;
  plan->pages += extra;
  a->in_flight[plan->first_page] = plan->pages;
  return cover;
}

DeviceAllocator::CoverChoice DeviceAllocator::ChooseCover(const Plan& plan,
                                                          size_t rest,
                                                          size_t max_pages,
                                                          bool steal) {
  CoverChoice c;
  // The large pool takes the largest cover within the bound (BetterCover).
  const bool largest = !plan.arena->small;
  // Held unmapped first (no steal), then whole free chunks of free blocks.
  for (size_t i = 0; i < cached_.size(); ++i) {
    const size_t n = cached_[i].size / page_size_;
    if (BetterCover(n, c.pages, rest, max_pages, largest)) {
      c.pages = n;
      c.cached = i;
    }
  }
  if (c.pages != 0 || !steal) return c;
  for (auto& pool : pools_) {
    if (!pool->LendsChunks()) continue;
    pool->free.ForEach([&](Block* b) {
      mu_.AssertHeld();  // held by our caller; tells the lock checker
      if (b == plan.keep_a || b == plan.keep_b) return;
      const Arena* ba = b->segment->arena;
      const auto [first, last] = WholeChunksIn(b);
      for (size_t q = first; q < last; q += ba->chunk_pages[q]) {
        const size_t n = ba->chunk_pages[q];
        if (BetterCover(n, c.pages, rest, max_pages, largest) ||
            (n == c.pages && c.block != nullptr && b->size < c.block->size)) {
          c.pages = n;
          c.block = b;
          c.first_page = q;
        }
      }
    });
  }
  return c;
}

void DeviceAllocator::PlaceCover(const Cover& cover,
                                 std::vector<SizedChunk>* chunks) {
  auto it = std::find_if(
      chunks->begin(), chunks->end(),
      [&](const SizedChunk& c) { return c.handle == cover.handle; });
  if (it == chunks->end()) return;
  if (cover.at_front) {
    std::rotate(chunks->begin(), it, it + 1);
  } else {
    std::rotate(it, it + 1, chunks->end());
  }
}

void DeviceAllocator::KeepUnmapped(absl::Span<const SizedChunk> chunks) {
  for (const SizedChunk& c : chunks) cached_bytes_ += c.size;
  cached_.insert(cached_.end(), chunks.begin(), chunks.end());
}

std::pair<size_t, size_t> DeviceAllocator::WholeChunksIn(const Block* b) const {
  const Arena* a = b->segment->arena;
  size_t first = (b->addr - a->base() + page_size_ - 1) / page_size_;
  size_t end = (b->end() - a->base()) / page_size_;
  if (end <= first) return {0, 0};
  if (a->chunk_start[first] != first) {
    const size_t s = a->chunk_start[first];
    first = s + a->chunk_pages[s];
  }
  const size_t last = a->chunk_start[end - 1];
  if (last + a->chunk_pages[last] > end) end = last;
  if (end <= first) return {0, 0};
  return {first, end};
}

size_t DeviceAllocator::StealBooks(size_t pages, const Block* keep_a,
                                   const Block* keep_b,
                                   std::vector<Detached>* out,
                                   std::vector<StreamHandle>* streams,
                                   bool at_least) {
  std::vector<Block*> candidates;
  std::vector<VictimView> views;
  for (auto& pool : pools_) {
    if (!pool->LendsChunks()) continue;
    pool->free.ForEach([&](Block* b) {
      mu_.AssertHeld();  // held by our caller; tells the lock checker
      if (b == keep_a || b == keep_b) return;
      const auto [first, end] = WholeChunksIn(b);
      if (end <= first) return;
      candidates.push_back(b);
      views.push_back({b->size, end - first, b->addr});
    });
  }
  size_t got = 0;
  for (size_t i : OrderVictims(views)) {
    if (got >= pages) break;
    Block* b = candidates[i];
    // Whole chunks from the end of the run that fit what is missing.
    Arena* a = b->segment->arena;
    const auto [first, end] = WholeChunksIn(b);
    size_t q1 = end, q0 = end;
    while (q0 > first) {
      const size_t s = a->chunk_start[q0 - 1];
      if (got + (q1 - s) <= pages) {
        q0 = s;
      } else if (q0 == q1) {
        q0 = q1 = s;  // too large: skip it
      } else {
        break;
      }
    }
    if (q1 <= q0) continue;
    got += StealPages(b, q0, q1, out, streams);
  }
  // Chunks of odd sizes left a rest: the chunk that fits it best, one at a
  // time (the largest no larger than the rest, else the smallest).
  while (at_least && got < pages) {
    Block* best = nullptr;
    size_t best_q = 0, best_n = 0;
    for (auto& pool : pools_) {
      if (!pool->LendsChunks()) continue;
      pool->free.ForEach([&](Block* b) {
        mu_.AssertHeld();  // held by our caller; tells the lock checker
        if (b == keep_a || b == keep_b) return;
        const Arena* a = b->segment->arena;
        const auto [first, end] = WholeChunksIn(b);
        for (size_t q = first; q < end; q += a->chunk_pages[q]) {
          const size_t n = a->chunk_pages[q];
          if (best == nullptr || BetterFit(n, best_n, pages - got)) {
            best = b;
            best_q = q;
            best_n = n;
          }
        }
      });
    }
    if (best == nullptr) break;
    got += StealPages(best, best_q, best_q + best_n, out, streams);
  }
  return got;
}

size_t DeviceAllocator::StealPages(Block* b, size_t q0, size_t q1,
                                   std::vector<Detached>* out,
                                   std::vector<StreamHandle>* streams) {
  const StreamHandle stream = b->pool->stream;
  if (std::find(streams->begin(), streams->end(), stream) == streams->end()) {
    streams->push_back(stream);
  }
  Detached d;
  d.arena = b->segment->arena;
  d.first_page = q0;
  d.pool = b->pool;
  d.chunks = CutPages(b, q0, q1);
  for (const SizedChunk& c : d.chunks) in_transit_bytes_ += c.size;
  out->push_back(std::move(d));
  stats_.chunks_stolen += static_cast<int64_t>(q1 - q0);
  return q1 - q0;
}

absl::Status DeviceAllocator::UnmapStolen(
    absl::Span<const StreamHandle> streams, std::vector<EventHandle>* events,
    std::vector<Detached>* stolen, std::vector<SizedChunk>* into,
    int64_t* waited) {
  // Unmapping does not wait for kernels still touching the memory.
  absl::Status status = WaitForStreams(streams, events, waited);
  for (Detached& d : *stolen) {
    if (status.ok()) {
      status = UnmapChunks(backend_, d.arena->PageAddr(d.first_page), d.chunks);
    }
    if (!status.ok()) break;
    d.taken = true;
    into->insert(into->end(), d.chunks.begin(), d.chunks.end());
  }
  return status;
}

void DeviceAllocator::FinishSteals(std::vector<Detached>* stolen,
                                   std::vector<EventHandle>* events) {
  uint64_t gen = 0;
  for (Detached& d : *stolen) {
    const size_t pages = PagesOf(d.chunks, page_size_);
    d.arena->in_flight.erase(d.first_page);
    if (d.taken && events != nullptr) {
      // Still mapped here: dormant, until reactivated or unmapped.
      if (gen == 0) gen = next_gen_++;
      RecordDormant(d.arena, d.first_page, d.chunks, gen);
      dormant_pages_ += pages;
      for (const SizedChunk& c : d.chunks) ++dormant_count_[c.handle];
      stats_.dormant_chunks += static_cast<int64_t>(d.chunks.size());
      continue;
    }
    if (d.taken) continue;
    // Still mapped where it was (its stream or the unmap failed): put the
    // pages back as free memory of their pool.
    for (const SizedChunk& c : d.chunks) in_transit_bytes_ -= c.size;
    RecordMapped(d.arena, d.first_page, d.chunks);
    AdoptPages(d.arena, d.first_page, pages, d.pool);
    stats_.chunks_stolen -= static_cast<int64_t>(pages);
  }
  // The hand-over's device-side waits are queued: the events may be reused.
  if (events != nullptr) {
    idle_events_.insert(idle_events_.end(), events->begin(), events->end());
    events->clear();
  }
}

std::vector<SizedChunk> DeviceAllocator::CutPages(Block* f, size_t q0,
                                                  size_t q1) {
  Segment* seg = f->segment;
  Arena* a = seg->arena;
  Pool* pool = f->pool;
  const size_t pages = q1 - q0;
  const DevicePtr cut0 = a->PageAddr(q0);
  const DevicePtr cut1 = a->PageAddr(q1);

  std::vector<SizedChunk> chunks = ForgetMapped(a, q0, q1);
  a->in_flight[q0] = pages;
  pool->free.Remove(f);
  const int64_t cut_bytes = static_cast<int64_t>(pages * page_size_);
  stats_.inactive_split_bytes.Add(-cut_bytes, a->small);
  if (a->small) stats_.reserved_bytes.Shift(cut_bytes, /*to_small=*/false);
  // The pages leave the segment (stitched elsewhere, or given back).
  RecordMapping(TraceAction::kSegmentUnmap, cut0, cut_bytes, *pool);

  // The part of f after the cut heads the right-hand segment.
  Block* right = nullptr;
  Block* after = f->next;
  if (cut1 < f->end()) {
    right = blocks_.New();
    right->addr = cut1;
    right->size = f->end() - cut1;
    right->pool = pool;
    right->next = f->next;
    if (f->next != nullptr) f->next->prev = right;
    after = right;
  }
  // The part before the cut ends the left-hand segment.
  Block* before = f->prev;
  if (cut0 > f->addr) {
    f->size = cut0 - f->addr;
    before = f;
  } else {
    blocks_.Delete(f);
    f = nullptr;
  }
  if (before != nullptr) before->next = nullptr;
  if (after != nullptr) after->prev = nullptr;

  CutSegment(seg, q0, q1, before, after);
  // Neither remainder can merge: f was a maximal free run of its pool.
  if (f != nullptr) pool->free.Insert(f);
  if (right != nullptr) pool->free.Insert(right);
  return chunks;
}

void DeviceAllocator::CutSegment(Segment* seg, size_t q0, size_t q1,
                                 Block* before, Block* after) {
  Arena* a = seg->arena;
  const size_t seg_end = seg->end_page();
  if (before != nullptr) {
    seg->num_pages = q0 - seg->first_page;
    seg->tail = before;
  }
  if (after != nullptr) {
    // The pages after the cut form a segment of their own: a new one when
    // the left part keeps `seg`, else `seg` itself, moved.
    Segment* right_seg = seg;
    if (before != nullptr) {
      right_seg = new Segment();
      right_seg->arena = a;
      stats_.segment.Add(1, a->small);
    } else {
      a->segments.erase(seg->first_page);
    }
    right_seg->first_page = q1;
    right_seg->num_pages = seg_end - q1;
    right_seg->head = after;
    for (Block* b = after; b != nullptr; b = b->next) {
      b->segment = right_seg;
      right_seg->tail = b;
    }
    for (size_t p = q1; p < seg_end; ++p) a->seg[p] = right_seg;
    a->segments[q1] = right_seg;
  } else if (before == nullptr) {
    a->segments.erase(seg->first_page);
    delete seg;
    stats_.segment.Add(-1, a->small);
  }
}

Block* DeviceAllocator::AdoptPages(Arena* a, size_t first_page, size_t pages,
                                   Pool* pool) {
  const size_t end = first_page + pages;
  Block* n = blocks_.New();
  n->addr = a->PageAddr(first_page);
  n->size = pages * page_size_;
  n->pool = pool;
  Segment* left =
      (!a->small && first_page > 0) ? a->seg[first_page - 1] : nullptr;
  Segment* right = (!a->small && end < a->num_pages) ? a->seg[end] : nullptr;
  Segment* seg = left;
  if (left != nullptr) {
    left->tail->next = n;
    n->prev = left->tail;
    left->tail = n;
    left->num_pages += pages;
  } else {
    seg = new Segment();
    seg->arena = a;
    seg->first_page = first_page;
    seg->num_pages = pages;
    seg->head = seg->tail = n;
    a->segments[first_page] = seg;
    stats_.segment.Add(1, a->small);
  }
  n->segment = seg;
  for (size_t p = first_page; p < end; ++p) a->seg[p] = seg;
  if (right != nullptr) {
    n->next = right->head;
    right->head->prev = n;
    for (Block* b = right->head; b != nullptr; b = b->next) b->segment = seg;
    for (size_t p = right->first_page; p < right->end_page(); ++p) {
      a->seg[p] = seg;
    }
    seg->num_pages += right->num_pages;
    seg->tail = right->tail;
    a->segments.erase(right->first_page);
    delete right;
    stats_.segment.Add(-1, a->small);
  }
  const int64_t bytes = static_cast<int64_t>(pages * page_size_);
  stats_.inactive_split_bytes.Add(bytes, a->small);
  if (a->small) stats_.reserved_bytes.Shift(bytes, /*to_small=*/true);
  // The pages join a segment (memory_viz: segment_map, which joins
  // neighbours as here).
  RecordMapping(TraceAction::kSegmentMap, n->addr, bytes, *pool);
  return InsertFree(n);
}

void DeviceAllocator::RecordMapping(TraceAction action, DevicePtr addr,
                                    uint64_t bytes, const Pool& pool) {
  if (!trace_.on() && !SegmentObserved()) return;
  RecordSegment(action, addr, bytes, pool.stream,
                mempools_.IdOf(pool.mempool).value_or(MempoolId{0, 0}));
}

void DeviceAllocator::RecordSegment(TraceAction action, DevicePtr addr,
                                    uint64_t bytes, StreamHandle stream,
                                    MempoolId id) {
  if (trace_.on()) trace_.Record(action, addr, bytes, stream);
  if (SegmentObserved()) {
    NotifySegment({device_, action, addr, bytes, stream, id});
  }
}

// --- Giving memory back -----------------------------------------------------

uint64_t DeviceAllocator::Reclaim(uint64_t bytes) {
  TraceRecorder::CallScope call(&trace_, CallKind::kFrees);
  MutexLock lock(&mu_);
  // In pieces, each given back before the next is unmapped. Pressure asks
  // an idle process for a busy one's whole need (GiBs), every chunk costs
  // an unmap and a release (~40 us on an H100: 0.1-0.2 s for a turn
  // switch's 2,000-3,200 chunks), and the busy process's lease waits in
  // gmlaked for the room: it goes on once the first pieces are back.
  constexpr uint64_t kPiece = uint64_t{512} << 20;
  uint64_t given = 0;
  if (SettleToRelease(&AllocatorStats::reclaim_waits)) {
    while (given < bytes) {
      const uint64_t got = GiveBackFree(std::min(bytes - given, kPiece),
                                        &AllocatorStats::reclaim_waits);
      if (got == 0) break;
      given += got;
    }
  }
  ++stats_.reclaims;
  stats_.reclaim_asked_bytes += static_cast<int64_t>(bytes);
  stats_.reclaim_returned_bytes += static_cast<int64_t>(given);
  return given;
}

uint64_t DeviceAllocator::EmptyCache() {
  TraceRecorder::CallScope call(&trace_, CallKind::kFrees);
  MutexLock lock(&mu_);
  return ReleaseFree(~uint64_t{0}, &AllocatorStats::reclaim_waits);
}

uint64_t DeviceAllocator::ReleaseFree(uint64_t bytes, WaitCounter counter) {
  if (!SettleToRelease(counter)) return 0;
  return GiveBackFree(bytes, counter);
}

bool DeviceAllocator::SettleToRelease(WaitCounter counter) {
  // Releasing waits for every stream: never while a capture is under way.
  if (capturing()) return false;
  // Everything free becomes whole chunks in free blocks or the cache: held
  // back blocks come back, blocks of different streams sharing a chunk
  // merge, and dormant views (a stitch's old pages) are unmapped, so a
  // chunk mapped in a free stitched block and dormant elsewhere can leave.
  if (SettleAll(counter).ok()) {
    ProcessPending();
    MergeSettledNeighbours();
    UnmapDormant(/*settled=*/true);
  }
  return true;
}

uint64_t DeviceAllocator::GiveBackFree(uint64_t bytes, WaitCounter counter) {
  const size_t want = static_cast<size_t>(bytes / page_size_ +
                                          (bytes % page_size_ != 0 ? 1 : 0));
  // At least what is asked: a chunk larger than the rest still goes (the
  // lake asked for room; less than asked breaks a colocated process).
  std::vector<SizedChunk> chunks = TakeCached(want, /*at_least=*/true);
  size_t have = PagesOf(chunks, page_size_);
  std::vector<Detached> stolen;
  std::vector<StreamHandle> streams;
  if (have < want) {
    have += StealBooks(want - have, nullptr, nullptr, &stolen, &streams,
                       /*at_least=*/true);
  }
  std::vector<EventHandle> events = TakeIdleEvents(streams.size());
  int64_t waited = 0;
  ++slow_paths_;
  mu_.Unlock();
  UnmapStolen(streams, &events, &stolen, &chunks, &waited).IgnoreError();
  mu_.Lock();
  --slow_paths_;
  slow_path_done_.SignalAll();
  stats_.*counter += waited;
  idle_events_.insert(idle_events_.end(), events.begin(), events.end());
  FinishSteals(&stolen, nullptr);
  return GiveBack(std::move(chunks));
}

absl::StatusOr<Block*> DeviceAllocator::Remake(Pool* pool, size_t size,
                                               absl::Status cause) {
  // First just what the request needs (the rest of the cache stays for the
  // sizes the program repeats), then everything free.
  for (uint64_t bytes : {uint64_t{RoundUp(size, page_size_)}, ~uint64_t{0}}) {
    const uint64_t given = ReleaseFree(bytes, &AllocatorStats::host_waits);
    stats_.remade_bytes += static_cast<int64_t>(given);
    if (given == 0) break;
    absl::StatusOr<Block*> grown = Grow(pool, size);
    if (grown.ok() || !absl::IsResourceExhausted(grown.status())) {
      return grown;
    }
    cause = grown.status();
  }
  return cause;
}

// --- Reporting --------------------------------------------------------------

AllocatorStats DeviceAllocator::stats() const {
  MutexLock lock(&mu_);
  AllocatorStats s = stats_;
  s.cached_chunks = static_cast<int64_t>(cached_.size());
  s.driver_calls = backend_->call_stats();
  return s;
}

ChunkSource::AllocatorUsage DeviceAllocator::usage() const {
  MutexLock lock(&mu_);
  // The lake's memory only: MemPools' own allocators' is not its to ask.
  const int64_t reserved =
      stats_.reserved_bytes.current - static_cast<int64_t>(external_reserved_);
  const int64_t used = std::min(stats_.allocated_bytes.current -
                                    static_cast<int64_t>(external_allocated_),
                                reserved);
  return {static_cast<uint64_t>(used), static_cast<uint64_t>(reserved - used)};
}

void DeviceAllocator::ResetPeaks() {
  MutexLock lock(&mu_);
  stats_.ResetPeaks();
}

void DeviceAllocator::ResetAccumulated() {
  MutexLock lock(&mu_);
  stats_.ResetAccumulated();
}

std::string DeviceAllocator::OutOfMemoryMessage(
    size_t size, StreamHandle stream, const absl::Status& cause) const {
  const uint64_t cached_free =
      static_cast<uint64_t>(stats_.inactive_split_bytes.current) +
      cached_bytes_;
  const uint64_t capacity = source_->capacity_bytes(device_);
  return absl::StrCat(
      "gmlake: out of memory on device ", device_, ": tried to allocate ",
      FormatBytes(size), " on stream ", stream, "; this process has ",
      FormatBytes(stats_.allocated_bytes.current), " allocated in ",
      stats_.allocation.current, " blocks, ",
      FormatBytes(stats_.reserved_bytes.current), " reserved (",
      FormatBytes(cached_free), " of it free but not usable for this request)",
      capacity ? absl::StrCat(", capacity ", FormatBytes(capacity)) : "",
      "; the ", source_->name(), " lake said: ", cause.message(),
      ". Free tensors, lower the batch, or raise the capacity "
      "(GMLAKE_CONF=capacity:...).");
}

std::vector<DeviceAllocator::SegmentView> DeviceAllocator::Segments() const {
  MutexLock lock(&mu_);
  std::vector<SegmentView> out;
  for (const auto* arenas : {&large_arenas_, &small_arenas_}) {
    for (const auto& a : *arenas) {
      for (const auto& [first, seg] : a->segments) {
        // PyTorch's segments each serve one pool and one stream; a mapped
        // range of gmlake's may hold blocks of several (a stitch or a
        // growth beside another pool's blocks): one segment per run of
        // blocks of one pool, so that segment_pool_id and MemPool.snapshot
        // say what PyTorch's would.
        const Block* run = seg->head;
        for (const Block* b = seg->head; b != nullptr; b = b->next) {
          if (b->next == nullptr || b->next->pool != run->pool ||
              run->pool->no_split) {
            out.push_back(ViewOf(*a, run, b->next));
            run = b->next;
          }
        }
      }
    }
  }
  AppendExternalSegments(&out);
  return out;
}

DeviceAllocator::SegmentView DeviceAllocator::ViewOf(const Arena& a,
                                                     const Block* head,
                                                     const Block* end) const {
  SegmentView v;
  v.addr = head->addr;
  v.stream = head->pool->stream;
  v.small = a.small;
  // PyTorch's segment_pool_id: the private pool (graph or MemPool) the
  // segment's memory serves, (0, 0) for default memory.
  v.pool = mempools_.IdOf(head->pool->mempool).value_or(MempoolId{0, 0});
  for (const Block* b = head; b != end; b = b->next) {
    BlockView bv;
    bv.addr = b->addr;
    bv.size = b->size;
    bv.allocated = b->state == BlockState::kAllocated;
    bv.active = bv.allocated || b->state == BlockState::kPending;
    if (bv.allocated) {
      bv.requested = b->requested;
      bv.stack = b->stack;
      v.allocated += b->size;
      v.requested += b->requested;
    }
    if (bv.active) v.active += b->size;
    v.total += b->size;
    v.blocks.push_back(bv);
  }
  return v;
}

std::string DeviceAllocator::SegmentsJson() const {
  std::string out = "[";
  for (const SegmentView& v : Segments()) {
    std::string blocks;
    for (const BlockView& b : v.blocks) {
      absl::StrAppend(&blocks, blocks.empty() ? "" : ",",
                      "{\"address\":", b.addr, ",\"size\":", b.size,
                      ",\"requested_size\":", b.requested, ",\"state\":\"",
                      b.allocated
                          ? "active_allocated"
                          : (b.active ? "active_pending_free" : "inactive"),
                      "\",\"frames\":", trace_.FramesJson(b.stack), "}");
    }
    absl::StrAppend(
        &out, out.size() > 1 ? "," : "", "{\"device\":", device_,
        ",\"address\":", v.addr, ",\"total_size\":", v.total,
        ",\"allocated_size\":", v.allocated, ",\"active_size\":", v.active,
        ",\"requested_size\":", v.requested, ",\"stream\":", v.stream,
        ",\"segment_type\":\"", v.small ? "small" : "large",
        "\",\"segment_pool_id\":[", v.pool.first, ",", v.pool.second,
        "],\"is_expandable\":", v.expandable ? "true" : "false",
        ",\"frames\":[],\"blocks\":[", blocks, "]}");
  }
  absl::StrAppend(&out, "]");
  return out;
}

absl::Status DeviceAllocator::CheckInvariants() const {
  MutexLock lock(&mu_);
  InvariantTally t;
  for (const auto* arenas : {&large_arenas_, &small_arenas_}) {
    for (const auto& a : *arenas) {
      size_t prev_end = 0;
      for (const auto& [first, seg] : a->segments) {
        if (seg->first_page != first || seg->num_pages == 0) {
          return absl::InternalError("segment map out of step");
        }
        if (first < prev_end || (!a->small && first == prev_end && first)) {
          return absl::InternalError(
              absl::StrCat("segments overlap or touch at page ", first));
        }
        prev_end = seg->end_page();
        if (absl::Status s = CheckSegmentLocked(*a, *seg, &t); !s.ok()) {
          return s;
        }
      }
      if (absl::Status s = CheckPagesLocked(*a, &t); !s.ok()) return s;
    }
  }
  if (t.dormant_pages != dormant_pages_) {
    return absl::InternalError(absl::StrCat(t.dormant_pages, " pages dormant, ",
                                            dormant_pages_, " counted"));
  }
  size_t indexed = 0;
  for (const auto& p : pools_) indexed += p->free.count();
  if (indexed != t.free_blocks) {
    return absl::InternalError(absl::StrCat(
        indexed, " blocks indexed, ", t.free_blocks, " free in segments"));
  }
  if (absl::Status s = CheckExternalLocked(&t); !s.ok()) return s;
  return CheckTallyLocked(t);
}

absl::Status DeviceAllocator::CheckSegmentLocked(const Arena& a,
                                                 const Segment& seg,
                                                 InvariantTally* t) const {
  const size_t first = seg.first_page;
  for (size_t p = first; p < seg.end_page(); ++p) {
    if (a.chunk[p] == 0 || a.seg[p] != &seg) {
      return absl::InternalError(
          absl::StrCat("page ", p, " of a segment is not mapped to it"));
    }
  }
  t->mapped_pages += seg.num_pages;
  if (a.small) t->small_mapped_pages += seg.num_pages;
  DevicePtr expect = a.PageAddr(first);
  const Block* last = nullptr;
  for (const Block* b = seg.head; b != nullptr; b = b->next) {
    if (b->addr != expect || b->segment != &seg || b->prev != last) {
      return absl::InternalError(
          absl::StrFormat("blocks do not tile the segment at 0x%x", expect));
    }
    if (b->pool->no_split &&
        ((last != nullptr && last->pool == b->pool) ||
         b->size % page_size_ != 0 || (b->addr - a.base()) % page_size_ != 0)) {
      return absl::InternalError(absl::StrFormat(
          "block 0x%x of a no_split pool is not whole pages of its own",
          b->addr));
    }
    if (b->state == BlockState::kFree) {
      ++t->free_blocks;
      t->free_bytes += b->size;
      if (last && last->state == BlockState::kFree && last->pool == b->pool) {
        return absl::InternalError("two free neighbours not merged");
      }
    } else if (b->state == BlockState::kAllocated) {
      t->allocated += b->size;
      ++t->live;
    } else if (b->state == BlockState::kDetached) {
      // A free block a slow path will join, while its lock is down.
      t->free_bytes += b->size;
    }
    expect = b->end();
    last = b;
  }
  if (expect != a.PageAddr(seg.end_page()) || seg.tail != last) {
    return absl::InternalError("segment tail out of step");
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::CheckPagesLocked(const Arena& a,
                                               InvariantTally* t) const {
  for (size_t p = 0; p < a.num_pages; ++p) {
    if ((a.chunk[p] == 0) != (a.seg[p] == nullptr)) {
      return absl::InternalError("page tables disagree");
    }
    if (a.dormant[p] != 0) {
      ++t->dormant_pages;
      // A dormant chunk is mapped here outside every segment.
      if (a.chunk[p] != 0 || a.InFlight(p)) {
        return absl::InternalError(
            absl::StrCat("dormant page ", p, " is also mapped or in flight"));
      }
    }
    if (a.chunk[p] == 0) continue;
    const size_t start = a.chunk_start[p];
    if (start > p || start + a.chunk_pages[start] <= p ||
        a.chunk[start] != a.chunk[p] || a.seg[start] != a.seg[p]) {
      return absl::InternalError(
          absl::StrCat("page ", p, " is not inside its chunk"));
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::CheckExternalLocked(InvariantTally* t) const {
  // Blocks of pools another allocator serves, from their own books.
  size_t external_live = 0;
  uint64_t external_allocated = 0;
  for (const auto& [tag, e] : external_) {
    for (const auto& [addr, seg] : e->books.segments()) {
      for (const auto& [baddr, b] : seg.blocks) {
        if (b.allocated) external_allocated += b.size;
      }
    }
    external_live += e->books.live_blocks();
  }
  t->allocated += static_cast<int64_t>(external_allocated);
  if (external_live != external_live_.size() ||
      external_allocated != external_allocated_) {
    return absl::InternalError(
        absl::StrCat(external_live, " external blocks live (",
                     external_allocated, " bytes), ", external_live_.size(),
                     " known (", external_allocated_, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::CheckTallyLocked(const InvariantTally& t) const {
  if (t.allocated != stats_.allocated_bytes.current ||
      t.live != static_cast<int64_t>(live_.size())) {
    return absl::InternalError("allocated bytes out of step");
  }
  if (t.mapped_pages * static_cast<int64_t>(page_size_) +
          static_cast<int64_t>(cached_bytes_ + in_transit_bytes_ +
                               external_reserved_) !=
      stats_.reserved_bytes.current) {
    return absl::InternalError(absl::StrCat(
        "reserved ", stats_.reserved_bytes.current, " but ", t.mapped_pages,
        " pages mapped and ", cached_bytes_, " bytes cached"));
  }
  if (t.small_mapped_pages * static_cast<int64_t>(page_size_) +
          static_cast<int64_t>(external_small_reserved_) !=
      stats_.reserved_bytes.small.current) {
    return absl::InternalError(absl::StrCat(
        "small-pool reserved ", stats_.reserved_bytes.small.current, " but ",
        t.small_mapped_pages, " pages mapped in the small arena"));
  }
  if (static_cast<int64_t>(t.free_blocks) != stats_.inactive_split.current) {
    return absl::InternalError(
        absl::StrCat("inactive_split ", stats_.inactive_split.current, " but ",
                     t.free_blocks, " free blocks in segments"));
  }
  if (t.free_bytes != stats_.inactive_split_bytes.current) {
    return absl::InternalError(
        absl::StrCat("inactive_split ", stats_.inactive_split_bytes.current,
                     " but free blocks hold ", t.free_bytes));
  }
  return absl::OkStatus();
}

}  // namespace gmlake
