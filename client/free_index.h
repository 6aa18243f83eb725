// Copyright 2026 The GMLake Authors.
//
// FreeIndex: the free blocks of one pool, found by size in O(1).
//
// Two-level segregated fit (as in TLSF): a bin per (power of two, 1/16th
// step), a bitmap of non-empty bins, intrusive doubly-linked lists. Find
// looks for the best fit among the first few blocks of the request's own bin,
// then takes any block of the next non-empty bin (which is guaranteed to fit:
// its smallest size exceeds the request's bin). Nothing here allocates.

#ifndef GMLAKE_CLIENT_FREE_INDEX_H_
#define GMLAKE_CLIENT_FREE_INDEX_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "client/block.h"
#include "client/stats.h"

namespace gmlake {

class FreeIndex {
 public:
  static constexpr int kSubBins = 16;
  static constexpr int kMinShift = 9;  // 512 B, the rounding unit
  static constexpr int kLevels = 64 - kMinShift;
  static constexpr int kBins = kLevels * kSubBins;

  void Insert(Block* b);
  void Remove(Block* b);
  // The free block that best fits `size` (>= size), or null.
  Block* Find(size_t size) const;
  bool empty() const { return count_ == 0; }
  size_t count() const { return count_; }
  uint64_t bytes() const { return bytes_; }

  // Calls f(Block*) for every free block (in bin order). f must not change
  // the index.
  template <typename F>
  void ForEach(F f) const {
    for (int i = 0; i < kBins; ++i) {
      for (Block* b = heads_[i]; b != nullptr; b = b->free_next) f(b);
    }
  }

  static int BinOf(size_t size);

  // Also counts the blocks in `stat` (its small pool if `small`): PyTorch's
  // inactive_split.
  void CountInto(PooledStat* stat, bool small) {
    counted_ = stat;
    small_ = small;
  }

 private:
  int NextNonEmpty(int bin) const;  // first non-empty bin >= bin, or -1

  std::array<Block*, kBins> heads_{};
  std::array<uint64_t, (kBins + 63) / 64> bits_{};
  size_t count_ = 0;
  uint64_t bytes_ = 0;
  PooledStat* counted_ = nullptr;
  bool small_ = false;
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_FREE_INDEX_H_
