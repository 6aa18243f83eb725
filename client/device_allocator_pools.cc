// Copyright 2026 The GMLake Authors.
//
// DeviceAllocator's private pools (CUDA graphs, torch.cuda.MemPool): the
// mechanism for what memory_pool.h decides. Kept apart from the slow path in
// device_allocator.cc. The hooks there: a pool's tag picks the Pool a
// malloc serves from; while a capture is under way nothing records,
// queries or waits for an event; a private pool's free blocks are never
// taken, stolen, reactivated or merged by other memory.

#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "client/device_allocator.h"

namespace gmlake {

void DeviceAllocator::CreateOrIncrefPool(MempoolId id) {
  MutexLock lock(&mu_);
  mempools_.CreateOrIncref(id);
}

void DeviceAllocator::BeginAllocateToPool(MempoolId id, StreamFilter filter) {
  MutexLock lock(&mu_);
  // PyTorch opens the route before the stream capture begins: the last
  // moment the events of frees deferred by an earlier capture (blocks used
  // on side streams) may be queried, so that what has finished serves this
  // capture (a pool shared by graphs reuses it, as PyTorch's does).
  if (!capturing() && !pending_.empty()) ProcessPending();
  mempools_.BeginAllocateTo(id, std::move(filter));
  last_pool_[0] = last_pool_[1] = nullptr;
}

void DeviceAllocator::EndAllocateToPool(MempoolId id) {
  MutexLock lock(&mu_);
  mempools_.EndAllocateTo(id);
  last_pool_[0] = last_pool_[1] = nullptr;
  if (capturing()) return;
  if (!external_deferred_.empty()) FreeDeferredExternal();
  // Frees made during the capture may record their events now.
  std::vector<DeferredFree> deferred;
  deferred.swap(deferred_);
  for (DeferredFree& d : deferred) {
    FreeAfterStreams(d.block, std::move(d.streams)).IgnoreError();
  }
}

std::vector<uint64_t> DeviceAllocator::CaptureMarks(
    absl::Span<const StreamHandle> streams) {
  std::vector<uint64_t> marks;
  for (StreamHandle s : streams) {
    absl::StatusOr<std::vector<uint64_t>> f = backend_->CaptureFrontier(s);
    // Not captured, or a backend that cannot tell: wait for the end.
    if (!f.ok()) return {};
    marks.insert(marks.end(), f->begin(), f->end());
  }
  // Empty too when no side stream has captured work yet: nothing orders
  // it, so the free waits for the capture's end.
  return marks;
}

void DeviceAllocator::ReuseJoinedFrees(Pool* pool) {
  for (size_t i = 0; i < deferred_.size();) {
    DeferredFree& d = deferred_[i];
    if (d.block->pool != pool || d.after.empty()) {
      ++i;
      continue;
    }
    absl::StatusOr<bool> joined =
        backend_->CaptureFollows(pool->stream, d.after);
    if (!joined.ok() || !*joined) {
      ++i;
      continue;
    }
    Block* b = d.block;
    deferred_.erase(deferred_.begin() + static_cast<ptrdiff_t>(i));
    MakeReusable(b);
  }
}

uint64_t DeviceAllocator::ReleasePool(MempoolId id) {
  uint64_t freed = 0;
  {
    MutexLock lock(&mu_);
    std::optional<uint32_t> tag = mempools_.Release(id);
    if (!tag.has_value()) return 0;
    last_pool_[0] = last_pool_[1] = nullptr;
    if (External* e = ExternalFor(*tag)) {
      // Its memory is its allocator's: the free segments go back there now,
      // the rest as its blocks are freed.
      e->retired = true;
      return GiveBackExternal(*tag);
    }
    // Its free blocks join their streams' default memory (and merge there);
    // blocks still live follow when freed (MakeReusable).
    std::vector<Pool*> retired;
    for (auto& p : pools_) {
      if (p->mempool == *tag) retired.push_back(p.get());
    }
    for (Pool* p : retired) {
      p->retired = true;
      std::vector<Block*> blocks;
      p->free.ForEach([&](Block* b) { blocks.push_back(b); });
      Pool* to = GetPool(p->stream, p->small, 0);
      for (Block* b : blocks) {
        p->free.Remove(b);
        b->pool = to;
        freed += b->size;
        InsertFree(b);
      }
    }
    // Reclaiming waits for streams: not while another capture runs.
    if (capturing()) return 0;
  }
  return freed == 0 ? 0 : Reclaim(freed);
}

std::vector<DevicePtr> DeviceAllocator::PoolLivePointers(MempoolId id) const {
  MutexLock lock(&mu_);
  std::vector<DevicePtr> out;
  std::optional<uint32_t> tag = mempools_.TagOf(id);
  if (!tag.has_value()) return out;
  for (const auto& [ptr, b] : live_) {
    if (b->pool->mempool == *tag) out.push_back(ptr);
  }
  for (const auto& [ptr, t] : external_live_) {
    if (t == *tag) out.push_back(ptr);
  }
  return out;
}

int DeviceAllocator::PoolUseCount(MempoolId id) const {
  MutexLock lock(&mu_);
  return mempools_.use_count(id);
}

std::vector<std::pair<DevicePtr, size_t>> DeviceAllocator::PoolLiveBlocks(
    MempoolId id) const {
  MutexLock lock(&mu_);
  std::vector<std::pair<DevicePtr, size_t>> out;
  std::optional<uint32_t> tag = mempools_.TagOf(id);
  if (!tag.has_value()) return out;
  for (const auto& [ptr, b] : live_) {
    if (b->pool->mempool == *tag) out.emplace_back(ptr, b->size);
  }
  if (const External* e = ExternalFor(*tag)) {
    for (const auto& [addr, seg] : e->books.segments()) {
      for (const auto& [baddr, b] : seg.blocks) {
        if (b.allocated) out.emplace_back(baddr, b.size);
      }
    }
  }
  return out;
}

absl::StatusOr<DevicePtr> DeviceAllocator::MallocAt(MempoolId id,
                                                    DevicePtr addr,
                                                    size_t size) {
  constexpr size_t kGrain = 512;  // every block starts on it
  if (size == 0 || addr % kGrain != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "malloc at 0x%x of %d bytes: the address must be a non-null "
        "multiple of 512 and the size positive",
        addr, size));
  }
  const size_t rounded = (size + kGrain - 1) / kGrain * kGrain;
  TraceRecorder::CallScope call(&trace_, CallKind::kAllocates);
  MutexLock lock(&mu_);
  std::optional<uint32_t> tag = mempools_.TagOf(id);
  if (!tag.has_value()) {
    return absl::NotFoundError(
        absl::StrFormat("pool (%d, %d) of device %d is not live", id.first,
                        id.second, device_));
  }
  Block* found = nullptr;
  for (const auto& p : pools_) {
    if (p->mempool != *tag || p->retired) continue;
    p->free.ForEach([&](Block* b) {
      if (found == nullptr && b->addr <= addr && addr + rounded <= b->end()) {
        found = b;
      }
    });
    if (found != nullptr) break;
  }
  if (found == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "0x%x..0x%x is not free in pool (%d, %d) of device %d (allocated, "
        "or freed and waiting for other streams)",
        addr, addr + rounded, id.first, id.second, device_));
  }
  Pool* pool = found->pool;
  pool->free.Remove(found);
  if (found->addr < addr) {
    // The bytes before the range stay free, as a block of their own.
    Block* front = blocks_.New();
    front->addr = found->addr;
    front->size = addr - found->addr;
    front->pool = pool;
    front->segment = found->segment;
    front->free_seq = found->free_seq;
    front->prev = found->prev;
    front->next = found;
    if (found->prev != nullptr) found->prev->next = front;
    if (found->segment->head == found) found->segment->head = front;
    found->prev = front;
    found->addr = addr;
    found->size -= front->size;
    pool->free.Insert(front);
  }
  Allocate(found, rounded, size);
  return found->addr;
}

uint64_t DeviceAllocator::PoolReservedBytes(MempoolId id) const {
  MutexLock lock(&mu_);
  std::optional<uint32_t> tag = mempools_.TagOf(id);
  if (!tag.has_value()) return 0;
  if (const External* e = ExternalFor(*tag)) return e->books.reserved_bytes();
  uint64_t bytes = 0;
  for (const auto& [ptr, b] : live_) {
    if (b->pool->mempool == *tag) bytes += b->size;
  }
  for (const auto& p : pools_) {
    if (p->mempool != *tag) continue;
    p->free.ForEach([&](Block* b) { bytes += b->size; });
  }
  return bytes;
}

absl::Status DeviceAllocator::SetPoolUseOnOom(MempoolId id, bool use) {
  MutexLock lock(&mu_);
  if (!mempools_.SetUseOnOom(id, use)) {
    return absl::NotFoundError(
        absl::StrFormat("pool (%d, %d) of device %d is not live", id.first,
                        id.second, device_));
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::SetPoolNoSplit(MempoolId id) {
  MutexLock lock(&mu_);
  const std::optional<uint32_t> tag = mempools_.TagOf(id);
  if (!tag.has_value()) {
    return absl::NotFoundError(
        absl::StrFormat("pool (%d, %d) of device %d is not live", id.first,
                        id.second, device_));
  }
  if (External* e = ExternalFor(*tag)) {
    e->books.SetNoSplit();
    return absl::OkStatus();
  }
  mempools_.SetNoSplit(id);
  for (auto& p : pools_) {
    if (p->mempool == *tag) p->no_split = true;
  }
  last_pool_[0] = last_pool_[1] = nullptr;
  return absl::OkStatus();
}

std::optional<DevicePtr> DeviceAllocator::BorrowFromUseOnOomPools(
    size_t rounded, size_t requested, StreamHandle stream) {
  const bool small = rounded <= options_.small_size;
  // Only what the pool has free on this stream, as PyTorch's get_free_block:
  // nothing new is made for it, and no other stream's work is waited for.
  for (uint32_t tag : mempools_.UseOnOomTags()) {
    if (External* e = ExternalFor(tag)) {
      if (auto t = e->books.TakeFree(requested, stream)) {
        BookExternalBlock(tag, *t, requested, stream);
        return t->addr;
      }
      continue;
    }
    for (auto& p : pools_) {
      if (p->mempool != tag || p->stream != stream || p->small != small) {
        continue;
      }
      if (Block* b = FindFree(p.get(), rounded)) {
        p->free.Remove(b);
        Allocate(b, rounded, requested);
        return b->addr;
      }
    }
  }
  return std::nullopt;
}

}  // namespace gmlake
