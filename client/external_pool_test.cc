// Copyright 2026 The GMLake Authors.

#include "client/external_pool.h"

#include "gtest/gtest.h"

namespace gmlake {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(ExternalSizingTest, SizesAsPyTorchsCachingAllocator) {
  EXPECT_EQ(ExternalBlockBytes(1), 512u);
  EXPECT_EQ(ExternalBlockBytes(513), 1024u);
  EXPECT_TRUE(ExternalIsSmall(kMiB));
  EXPECT_FALSE(ExternalIsSmall(kMiB + 512));
  EXPECT_EQ(ExternalSegmentBytes(kMiB), 2 * kMiB);
  EXPECT_EQ(ExternalSegmentBytes(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(ExternalSegmentBytes(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(ExternalSegmentBytes(10 * kMiB + 512), 12 * kMiB);
  EXPECT_EQ(ExternalSegmentBytes(40 * kMiB), 40 * kMiB);
  // A small block leaves a rest of 512 bytes or more free; a large one only
  // more than 1 MiB.
  EXPECT_TRUE(ExternalSplits(2 * kMiB, 2 * kMiB - 512, /*small=*/true));
  EXPECT_FALSE(ExternalSplits(2 * kMiB, 2 * kMiB, /*small=*/true));
  EXPECT_FALSE(ExternalSplits(20 * kMiB, 19 * kMiB, /*small=*/false));
  EXPECT_TRUE(ExternalSplits(20 * kMiB, 18 * kMiB, /*small=*/false));
}

// test_mempool_with_allocator's counts: two 1 MiB tensors share one 2 MiB
// segment, a third needs another.
TEST(ExternalPoolTest, PacksSmallBlocksIntoTwoMiBSegments) {
  ExternalPool pool;
  EXPECT_FALSE(pool.TakeFree(kMiB, 7).has_value());
  pool.AddSegment(0x100000000, ExternalSegmentBytes(kMiB), 7, true);
  auto a = pool.TakeFree(kMiB, 7);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->addr, 0x100000000u);
  auto b = pool.TakeFree(kMiB, 7);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->addr, 0x100000000u + kMiB);
  EXPECT_FALSE(pool.TakeFree(kMiB, 7).has_value());
  EXPECT_EQ(pool.segments().size(), 1u);
  EXPECT_EQ(pool.live_blocks(), 2u);
  EXPECT_EQ(pool.reserved_bytes(), 2 * kMiB);
}

TEST(ExternalPoolTest, ServesOnlyItsStreamAndKind) {
  ExternalPool pool;
  pool.AddSegment(0x200000000, 20 * kMiB, 7, false);
  EXPECT_FALSE(pool.TakeFree(4 * kMiB, 8).has_value());  // another stream
  EXPECT_FALSE(pool.TakeFree(4096, 7).has_value());      // a small request
  auto a = pool.TakeFree(4 * kMiB, 7);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->small);
}

TEST(ExternalPoolTest, FreeMergesAndWholeFreeSegmentsGoBack) {
  ExternalPool pool;
  const DevicePtr base = 0x300000000;
  pool.AddSegment(base, 20 * kMiB, 7, false);
  auto a = pool.TakeFree(4 * kMiB, 7);
  auto b = pool.TakeFree(4 * kMiB, 7);
  auto c = pool.TakeFree(4 * kMiB, 7);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(c->addr, base + 8 * kMiB);
  // The best fit: a freed hole of 4 MiB serves 3 MiB before the 8 MiB tail.
  ASSERT_TRUE(pool.Free(b->addr).ok());
  auto d = pool.TakeFree(3 * kMiB, 7);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->addr, b->addr);
  EXPECT_EQ(d->size, 4 * kMiB);  // a 1 MiB rest is not split off a large one
  EXPECT_TRUE(pool.TakeFreeSegments().empty());  // blocks live in it
  for (DevicePtr p : {a->addr, c->addr, d->addr}) {
    absl::StatusOr<ExternalPool::Freed> f = pool.Free(p);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->stream, 7u);
  }
  EXPECT_EQ(pool.live_blocks(), 0u);
  // Merged into one free block: 20 MiB serves again whole.
  std::vector<ExternalPool::Released> back = pool.TakeFreeSegments();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].addr, base);
  EXPECT_EQ(back[0].size, 20 * kMiB);
  EXPECT_TRUE(pool.empty());
  EXPECT_EQ(pool.reserved_bytes(), 0u);
}

TEST(ExternalPoolTest, FreeOfWhatIsNotLiveSaysSo) {
  ExternalPool pool;
  pool.AddSegment(0x400000000, 2 * kMiB, 7, true);
  auto a = pool.TakeFree(512, 7);
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(absl::IsNotFound(pool.Free(a->addr + 512).status()));
  EXPECT_TRUE(absl::IsNotFound(pool.Free(0x10).status()));
  ASSERT_TRUE(pool.Free(a->addr).ok());
  EXPECT_TRUE(absl::IsNotFound(pool.Free(a->addr).status()));  // twice
}

// MemPool(allocator=..., no_split=True), as NCCL's window registration
// wants it: each block a segment of its own, the request rounded up to
// 2 MiB, never split; a free one serves whole a request that would have
// made a segment of its size.
TEST(ExternalPoolTest, NoSplitGivesEachBlockASegmentOfItsOwn) {
  ExternalPool pool;
  EXPECT_EQ(pool.SegmentBytes(4 * kMiB), 20 * kMiB);  // PyTorch's sizes
  pool.SetNoSplit();
  EXPECT_TRUE(pool.no_split());
  EXPECT_EQ(pool.SegmentBytes(4 * kMiB), 4 * kMiB);
  EXPECT_EQ(pool.SegmentBytes(1024), 2 * kMiB);
  EXPECT_EQ(pool.SegmentBytes(5 * kMiB + 1), 6 * kMiB);
  const DevicePtr base = 0x400000000;
  pool.AddSegment(base, pool.SegmentBytes(kMiB), 7, true);
  auto a = pool.TakeFree(kMiB, 7);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->size, 2 * kMiB);                      // the whole segment
  EXPECT_FALSE(pool.TakeFree(1024, 7).has_value());  // nothing split off
  pool.AddSegment(base + 8 * kMiB, pool.SegmentBytes(3 * kMiB), 7, false);
  auto b = pool.TakeFree(3 * kMiB, 7);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->size, 4 * kMiB);
  ASSERT_TRUE(pool.Free(b->addr).ok());
  // A request of 2 MiB would not have made a 4 MiB segment: not served.
  EXPECT_FALSE(pool.TakeFree(2 * kMiB, 7).has_value());
  auto c = pool.TakeFree(4 * kMiB - 4096, 7);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->addr, b->addr);
  EXPECT_EQ(c->size, 4 * kMiB);
  for (const auto& [addr, seg] : pool.segments()) {
    EXPECT_EQ(seg.blocks.size(), 1u) << addr;
  }
  ASSERT_TRUE(pool.Free(a->addr).ok());
  ASSERT_TRUE(pool.Free(c->addr).ok());
  EXPECT_EQ(pool.TakeFreeSegments().size(), 2u);
  EXPECT_TRUE(pool.empty());
}

}  // namespace
}  // namespace gmlake
