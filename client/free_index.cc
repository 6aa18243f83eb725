// Copyright 2026 The GMLake Authors.

#include "client/free_index.h"

namespace gmlake {
namespace {

// How many blocks of the request's own bin are looked at for a best fit.
// Blocks of one bin differ by at most 1/16th, so looking further buys little.
constexpr int kOwnBinScan = 8;

int Log2Floor(size_t x) { return 63 - __builtin_clzll(x); }

}  // namespace

int FreeIndex::BinOf(size_t size) {
  if (size < (size_t{1} << kMinShift)) size = size_t{1} << kMinShift;
  const int level = Log2Floor(size);
  // The four bits below the leading one pick the sub-bin.
  const int sub = static_cast<int>((size >> (level - 4)) & (kSubBins - 1));
  return (level - kMinShift) * kSubBins + sub;
}

void FreeIndex::Insert(Block* b) {
  const int bin = BinOf(b->size);
  b->bin = bin;
  b->free_prev = nullptr;
  b->free_next = heads_[bin];
  if (heads_[bin] != nullptr) heads_[bin]->free_prev = b;
  heads_[bin] = b;
  b->state = BlockState::kFree;
  bits_[bin / 64] |= uint64_t{1} << (bin % 64);
  ++count_;
  bytes_ += b->size;
  if (counted_ != nullptr) counted_->Add(1, small_);
}

void FreeIndex::Remove(Block* b) {
  const int bin = b->bin;
  if (b->free_prev != nullptr) {
    b->free_prev->free_next = b->free_next;
  } else {
    heads_[bin] = b->free_next;
  }
  if (b->free_next != nullptr) b->free_next->free_prev = b->free_prev;
  if (heads_[bin] == nullptr) bits_[bin / 64] &= ~(uint64_t{1} << (bin % 64));
  b->free_prev = b->free_next = nullptr;
  b->state = BlockState::kDetached;
  --count_;
  bytes_ -= b->size;
  if (counted_ != nullptr) counted_->Add(-1, small_);
}

int FreeIndex::NextNonEmpty(int bin) const {
  if (bin >= kBins) return -1;
  int word = bin / 64;
  uint64_t bits = bits_[word] & (~uint64_t{0} << (bin % 64));
  while (bits == 0) {
    if (++word >= static_cast<int>(bits_.size())) return -1;
    bits = bits_[word];
  }
  return word * 64 + __builtin_ctzll(bits);
}

Block* FreeIndex::Find(size_t size) const {
  const int bin = BinOf(size);
  Block* best = nullptr;
  int scanned = 0;
  for (Block* b = heads_[bin]; b != nullptr && scanned < kOwnBinScan;
       b = b->free_next, ++scanned) {
    if (b->size >= size && (best == nullptr || b->size < best->size)) {
      best = b;
      if (b->size == size) break;
    }
  }
  if (best != nullptr) return best;
  const int next = NextNonEmpty(bin + 1);
  if (next >= 0) return heads_[next];
  // Nothing larger anywhere: the rest of the own bin is the last chance.
  for (Block* b = heads_[bin]; b != nullptr; b = b->free_next) {
    if (b->size >= size && (best == nullptr || b->size < best->size)) best = b;
  }
  return best;
}

}  // namespace gmlake
