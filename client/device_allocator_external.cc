// Copyright 2026 The GMLake Authors.
//
// DeviceAllocator's pools another allocator serves (torch.cuda.MemPool(
// allocator=...)): the mechanism around external_pool.h's books. A malloc
// routed to such a pool never reaches the arenas: it is served from the
// pool's cached segments, else from a new segment of the pool's memory,
// asked for with the lock down. Those segments count in reserved_bytes and
// segment (as PyTorch counts them) and against the capacity: the lake
// counts only gmlake's chunks, so Grow and MallocExternal check the sum
// (ExternalLeavesRoom). They are never stitched, stolen or reclaimed by
// gmlake: they go back to their memory when their pool is released, or,
// for a pool released while blocks of it lived, when the last is freed.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/device_allocator.h"
#include "common/bytes.h"

namespace gmlake {

absl::Status DeviceAllocator::CreateOrIncrefExternalPool(
    MempoolId id, std::shared_ptr<ExternalMemory> memory) {
  if (memory == nullptr) {
    return absl::InvalidArgumentError("an external pool needs its memory");
  }
  MutexLock lock(&mu_);
  std::optional<uint32_t> known = mempools_.TagOf(id);
  if (known.has_value() && ExternalFor(*known) == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "pool (%d, %d) of device %d serves gmlake's memory already; a "
        "MemPool's own allocator is given when the pool is made",
        id.first, id.second, device_));
  }
  const uint32_t tag = mempools_.CreateOrIncref(id);
  if (!known.has_value()) {
    auto e = std::make_unique<External>();
    e->id = id;
    e->memory = std::move(memory);
    external_[tag] = std::move(e);
  }
  return absl::OkStatus();
}

bool DeviceAllocator::ExternalLeavesRoom(uint64_t bytes) const {
  const uint64_t cap = source_->capacity_bytes(device_);
  return cap == 0 ||
         static_cast<uint64_t>(stats_.reserved_bytes.current) + bytes <= cap;
}

void DeviceAllocator::BookExternalBlock(uint32_t tag,
                                        const ExternalPool::Taken& t,
                                        size_t requested, StreamHandle stream) {
  external_live_[t.addr] = tag;
  external_allocated_ += t.size;
  CountLive(t.size, requested, t.small, +1);
  CountActive(t.size, t.small, +1);
  if (trace_.on())
    trace_.Record(TraceAction::kAlloc, t.addr, requested, stream);
}

absl::StatusOr<DevicePtr> DeviceAllocator::MallocExternal(uint32_t tag,
                                                          size_t size,
                                                          StreamHandle stream) {
  External* e = ExternalFor(tag);
  if (auto t = e->books.TakeFree(size, stream)) {
    BookExternalBlock(tag, *t, size, stream);
    return t->addr;
  }
  const bool small = ExternalIsSmall(ExternalBlockBytes(size));
  const size_t seg = e->books.SegmentBytes(size);
  if (!ExternalLeavesRoom(seg)) {
    // As PyTorch does before it fails: what is cached, gmlake's free chunks
    // (not while a capture forbids the waits) and this pool's own free
    // segments, goes back, then the segment is tried again.
    if (!capturing()) ReleaseFree(seg, &AllocatorStats::host_waits);
    GiveBackExternal(tag);
  }
  e = ExternalFor(tag);
  std::string refused;
  if (e == nullptr) {
    refused = "the pool was released meanwhile";
  } else if (!ExternalLeavesRoom(seg)) {
    refused = absl::StrCat(
        "the capacity is ", FormatBytes(source_->capacity_bytes(device_)),
        " (a memory fraction, or GMLAKE_CONF=capacity:) and ",
        FormatBytes(stats_.reserved_bytes.current), " is reserved, ",
        FormatBytes(external_reserved_), " of it by MemPools' own allocators");
  }
  DevicePtr addr = 0;
  if (refused.empty()) {
    std::shared_ptr<ExternalMemory> memory = e->memory;
    mu_.Unlock();
    addr = memory->Allocate(seg, stream);
    mu_.Lock();
    e = ExternalFor(tag);
    if (addr == 0) {
      refused = "the MemPool's allocator returned no memory";
    } else if (e == nullptr) {
      mu_.Unlock();
      memory->Free(addr, seg, stream);
      mu_.Lock();
      refused = "the pool was released meanwhile";
    }
  }
  if (!refused.empty()) {
    ++stats_.num_ooms;
    if (trace_.on()) trace_.Record(TraceAction::kOom, 0, size, stream);
    return absl::ResourceExhaustedError(absl::StrCat(
        "CUDA out of memory. Tried to allocate ", FormatBytes(size),
        " on device ", device_, " from a MemPool with its own allocator (a ",
        FormatBytes(seg), " segment): ", refused,
        ". Free tensors of that pool, or give the process more memory."));
  }
  e->books.AddSegment(addr, seg, stream, small);
  external_reserved_ += seg;
  if (small) external_small_reserved_ += seg;
  stats_.reserved_bytes.Add(static_cast<int64_t>(seg), small);
  stats_.segment.Add(1, small);
  RecordSegment(TraceAction::kSegmentAlloc, addr, seg, stream, e->id);
  // The lock was held since the segment was booked: it serves the request.
  std::optional<ExternalPool::Taken> t = e->books.TakeFree(size, stream);
  BookExternalBlock(tag, *t, size, stream);
  return t->addr;
}

bool DeviceAllocator::FreeExternal(DevicePtr ptr, absl::Status* status) {
  if (external_live_.empty()) return false;
  auto it = external_live_.find(ptr);
  if (it == external_live_.end()) return false;
  const uint32_t tag = it->second;
  *status = absl::OkStatus();
  if (auto o = other_streams_.find(ptr); o != other_streams_.end()) {
    // Reuse waits for the other streams' work (Tensor.record_stream). Such
    // pools are rare and their memory is not gmlake's to stitch, so the
    // host waits, once no capture forbids it.
    std::vector<StreamHandle> streams = std::move(o->second);
    other_streams_.erase(o);
    if (capturing()) {
      external_deferred_.push_back({ptr, std::move(streams)});
      return true;
    }
    *status = Settle(std::move(streams), {}, &AllocatorStats::host_waits);
    it = external_live_.find(ptr);     // the lock was down
    if (it == external_live_.end()) {  // another thread freed it meanwhile
      *status = absl::NotFoundError(absl::StrFormat(
          "free(0x%x): freed twice (by another thread meanwhile)", ptr));
      return true;
    }
  }
  external_live_.erase(it);
  External* e = ExternalFor(tag);
  absl::StatusOr<ExternalPool::Freed> f = e->books.Free(ptr);
  if (!f.ok()) {  // the books and external_live_ agree: never
    *status = f.status();
    return true;
  }
  external_allocated_ -= f->size;
  CountLive(f->size, f->requested, f->small, -1);
  CountActive(f->size, f->small, -1);
  if (trace_.on()) {
    trace_.Record(TraceAction::kFreeRequested, ptr, f->requested, f->stream);
    trace_.Record(TraceAction::kFreeCompleted, ptr, f->requested, f->stream);
  }
  if (e->retired) GiveBackExternal(tag);
  return true;
}

void DeviceAllocator::FreeDeferredExternal() {
  std::vector<std::pair<DevicePtr, std::vector<StreamHandle>>> deferred;
  deferred.swap(external_deferred_);
  for (auto& [ptr, streams] : deferred) {
    Settle(std::move(streams), {}, &AllocatorStats::host_waits).IgnoreError();
    absl::Status status;
    FreeExternal(ptr, &status);
  }
}

uint64_t DeviceAllocator::GiveBackExternal(uint32_t tag) {
  External* e = ExternalFor(tag);
  if (e == nullptr) return 0;
  std::vector<ExternalPool::Released> back = e->books.TakeFreeSegments();
  std::shared_ptr<ExternalMemory> memory = e->memory;
  const MempoolId id = e->id;
  if (e->retired && e->books.empty()) external_.erase(tag);  // e is gone
  uint64_t bytes = 0;
  for (const ExternalPool::Released& r : back) {
    bytes += r.size;
    external_reserved_ -= r.size;
    if (r.small) external_small_reserved_ -= r.size;
    stats_.reserved_bytes.Add(-static_cast<int64_t>(r.size), r.small);
    stats_.segment.Add(-1, r.small);
    // Before the memory goes back: NCCL deregisters it here.
    RecordSegment(TraceAction::kSegmentFree, r.addr, r.size, r.stream, id);
  }
  if (back.empty()) return 0;
  mu_.Unlock();
  for (const ExternalPool::Released& r : back) {
    memory->Free(r.addr, r.size, r.stream);
  }
  mu_.Lock();
  return bytes;
}

void DeviceAllocator::AppendExternalSegments(
    std::vector<SegmentView>* out) const {
  for (const auto& [tag, e] : external_) {
    for (const auto& [addr, seg] : e->books.segments()) {
      SegmentView v;
      v.addr = addr;
      v.stream = seg.stream;
      v.small = seg.small;
      v.expandable = false;
      v.pool = e->id;
      for (const auto& [baddr, b] : seg.blocks) {
        BlockView bv;
        bv.addr = baddr;
        bv.size = b.size;
        bv.requested = b.requested;
        bv.allocated = bv.active = b.allocated;
        if (b.allocated) {
          v.allocated += b.size;
          v.requested += b.requested;
        }
        v.total += b.size;
        v.blocks.push_back(bv);
      }
      v.active = v.allocated;
      out->push_back(std::move(v));
    }
  }
}

}  // namespace gmlake
