// Copyright 2026 The GMLake Authors.

#include "client/free_index.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(FreeIndexTest, FindsAFitOrNothing) {
  FreeIndex index;
  std::vector<Block> blocks(3);
  blocks[0].size = 4096;
  blocks[1].size = 1 << 20;
  blocks[2].size = 3 << 20;
  for (Block& b : blocks) index.Insert(&b);
  EXPECT_EQ(index.count(), 3u);
  EXPECT_EQ(index.bytes(), 4096u + (1 << 20) + (3 << 20));
  EXPECT_EQ(index.Find(4096), &blocks[0]);
  EXPECT_EQ(index.Find(5000), &blocks[1]);
  EXPECT_EQ(index.Find((1 << 20) + 512), &blocks[2]);
  EXPECT_EQ(index.Find((3 << 20) + 512), nullptr);
  index.Remove(&blocks[1]);
  EXPECT_EQ(index.Find(5000), &blocks[2]);
  EXPECT_EQ(blocks[1].state, BlockState::kDetached);
  EXPECT_EQ(blocks[2].state, BlockState::kFree);
}

TEST(FreeIndexTest, AlwaysReturnsABlockLargeEnoughWithinOneSixteenth) {
  std::mt19937_64 rng(7);
  FreeIndex index;
  std::vector<Block> blocks(2000);
  for (Block& b : blocks) {
    b.size = (1 + rng() % (1 << 20)) * 512;
    index.Insert(&b);
  }
  for (int i = 0; i < 5000; ++i) {
    const size_t want = (1 + rng() % (1 << 20)) * 512;
    Block* got = index.Find(want);
    size_t best = 0;
    for (const Block& b : blocks) {
      if (b.size >= want && (best == 0 || b.size < best)) best = b.size;
    }
    if (best == 0) {
      EXPECT_EQ(got, nullptr);
      continue;
    }
    ASSERT_NE(got, nullptr) << want;
    EXPECT_GE(got->size, want);
    // Good fit: never more than the next bin up from the best.
    EXPECT_LE(FreeIndex::BinOf(got->size), FreeIndex::BinOf(best) + 1);
  }
}

}  // namespace
}  // namespace gmlake
