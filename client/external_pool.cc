// Copyright 2026 The GMLake Authors.

#include "client/external_pool.h"

#include <iterator>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace gmlake {
namespace {

// PyTorch's constants, by their names there.
constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = size_t{1} << 20;
constexpr size_t kSmallBuffer = size_t{2} << 20;
constexpr size_t kMinLargeAlloc = size_t{10} << 20;
constexpr size_t kLargeBuffer = size_t{20} << 20;
constexpr size_t kRoundLarge = size_t{2} << 20;

size_t RoundUpTo(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }

}  // namespace

size_t ExternalBlockBytes(size_t requested) {
  return requested < kMinBlockSize ? kMinBlockSize
                                   : RoundUpTo(requested, kMinBlockSize);
}

bool ExternalIsSmall(size_t block_bytes) { return block_bytes <= kSmallSize; }

size_t ExternalSegmentBytes(size_t block_bytes) {
  if (ExternalIsSmall(block_bytes)) return kSmallBuffer;
  if (block_bytes < kMinLargeAlloc) return kLargeBuffer;
  return RoundUpTo(block_bytes, kRoundLarge);
}

bool ExternalSplits(size_t free_bytes, size_t block_bytes, bool small) {
  const size_t rest = free_bytes - block_bytes;
  return small ? rest >= kMinBlockSize : rest > kSmallSize;
}

ExternalPool::Segment* ExternalPool::SegmentOf(DevicePtr addr) {
  auto it = segments_.upper_bound(addr);
  if (it == segments_.begin()) return nullptr;
  --it;
  if (addr >= it->first + it->second.size) return nullptr;
  return &it->second;
}

size_t ExternalPool::SegmentBytes(size_t requested) const {
  const size_t block = ExternalBlockBytes(requested);
  return no_split_ ? RoundUpTo(block, kRoundLarge)
                   : ExternalSegmentBytes(block);
}

std::optional<ExternalPool::Taken> ExternalPool::TakeFree(size_t requested,
                                                          StreamHandle stream) {
  const size_t size = ExternalBlockBytes(requested);
  const bool small = ExternalIsSmall(size);
  auto it = free_.lower_bound({stream, small, size, 0});
  if (it == free_.end() || std::get<0>(*it) != stream ||
      std::get<1>(*it) != small ||
      (no_split_ && std::get<2>(*it) > SegmentBytes(requested))) {
    return std::nullopt;
  }
  const DevicePtr addr = std::get<3>(*it);
  const size_t have = std::get<2>(*it);
  free_.erase(it);
  Segment* seg = SegmentOf(addr);
  Block& b = seg->blocks[addr];
  if (!no_split_ && ExternalSplits(have, size, small)) {
    seg->blocks[addr + size] = Block{have - size, 0, false};
    free_.insert({stream, small, have - size, addr + size});
    b.size = size;
  }
  b.allocated = true;
  b.requested = requested;
  ++live_;
  return Taken{addr, b.size, small};
}

void ExternalPool::AddSegment(DevicePtr addr, size_t size, StreamHandle stream,
                              bool small) {
  Segment& seg = segments_[addr];
  seg.size = size;
  seg.stream = stream;
  seg.small = small;
  seg.blocks[addr] = Block{size, 0, false};
  free_.insert({stream, small, size, addr});
  reserved_ += size;
}

absl::StatusOr<ExternalPool::Freed> ExternalPool::Free(DevicePtr addr) {
  Segment* seg = SegmentOf(addr);
  auto it = seg == nullptr ? std::map<DevicePtr, Block>::iterator()
                           : seg->blocks.find(addr);
  if (seg == nullptr || it == seg->blocks.end() || !it->second.allocated) {
    return absl::NotFoundError(absl::StrFormat(
        "free(0x%x): not a live block of this MemPool's allocator", addr));
  }
  Freed freed{it->second.size, it->second.requested, seg->small, seg->stream};
  it->second.allocated = false;
  it->second.requested = 0;
  --live_;
  // Merge with the free neighbours (each out of the free set first).
  if (auto next = std::next(it);
      next != seg->blocks.end() && !next->second.allocated) {
    free_.erase({seg->stream, seg->small, next->second.size, next->first});
    it->second.size += next->second.size;
    seg->blocks.erase(next);
  }
  if (it != seg->blocks.begin()) {
    auto prev = std::prev(it);
    if (!prev->second.allocated) {
      free_.erase({seg->stream, seg->small, prev->second.size, prev->first});
      prev->second.size += it->second.size;
      seg->blocks.erase(it);
      it = prev;
    }
  }
  free_.insert({seg->stream, seg->small, it->second.size, it->first});
  return freed;
}

std::vector<ExternalPool::Released> ExternalPool::TakeFreeSegments() {
  std::vector<Released> out;
  for (auto it = segments_.begin(); it != segments_.end();) {
    const Segment& seg = it->second;
    if (seg.blocks.size() != 1 || seg.blocks.begin()->second.allocated) {
      ++it;
      continue;
    }
    free_.erase({seg.stream, seg.small, seg.size, it->first});
    out.push_back({it->first, seg.size, seg.stream, seg.small});
    reserved_ -= seg.size;
    it = segments_.erase(it);
  }
  return out;
}

}  // namespace gmlake
