// Copyright 2026 The GMLake Authors.
//
// DeviceAllocator's private pools (CUDA graphs, torch.cuda.MemPool): the
// mechanism for what memory_pool.h decides. Kept apart from the slow path in
// device_allocator.cc. The hooks there: a pool's tag picks the Pool a
// malloc serves from; while a capture is under way nothing records,
// queries or waits for an event; a private pool's free blocks are never
// taken, stolen, reactivated or merged by other memory.

#include <utility>

#include "client/device_allocator.h"

namespace gmlake {

void DeviceAllocator::CreateOrIncrefPool(MempoolId id) {
  MutexLock lock(&mu_);
  mempools_.CreateOrIncref(id);
}

void DeviceAllocator::BeginAllocateToPool(MempoolId id, StreamFilter filter) {
  MutexLock lock(&mu_);
  mempools_.BeginAllocateTo(id, std::move(filter));
  last_pool_[0] = last_pool_[1] = nullptr;
}

void DeviceAllocator::EndAllocateToPool(MempoolId id) {
  MutexLock lock(&mu_);
  mempools_.EndAllocateTo(id);
  last_pool_[0] = last_pool_[1] = nullptr;
  if (capturing()) return;
  // Frees made during the capture may record their events now.
  std::vector<std::pair<Block*, std::vector<StreamHandle>>> deferred;
  deferred.swap(deferred_);
  for (auto& [b, streams] : deferred) {
    FreeAfterStreams(b, std::move(streams)).IgnoreError();
  }
}

uint64_t DeviceAllocator::ReleasePool(MempoolId id) {
  uint64_t freed = 0;
  {
    MutexLock lock(&mu_);
    std::optional<uint32_t> tag = mempools_.Release(id);
    if (!tag.has_value()) return 0;
    last_pool_[0] = last_pool_[1] = nullptr;
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
  return out;
}

int DeviceAllocator::PoolUseCount(MempoolId id) const {
  MutexLock lock(&mu_);
  return mempools_.use_count(id);
}

uint64_t DeviceAllocator::PoolReservedBytes(MempoolId id) const {
  MutexLock lock(&mu_);
  std::optional<uint32_t> tag = mempools_.TagOf(id);
  if (!tag.has_value()) return 0;
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

}  // namespace gmlake
