// Copyright 2026 The GMLake Authors.

#include "client/memory_pool.h"

#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(MemoryPoolsTest, RoutesOnlyFilteredStreamsWhileCapturing) {
  MemoryPools pools;
  EXPECT_FALSE(pools.capturing());
  const uint32_t tag = pools.BeginAllocateTo(
      {1, 0}, [](StreamHandle s) { return s == 7 || s == 8; });
  EXPECT_NE(tag, 0u);
  EXPECT_TRUE(pools.capturing());
  EXPECT_EQ(pools.Route(7), tag);
  EXPECT_EQ(pools.Route(8), tag);
  EXPECT_EQ(pools.Route(9), 0u);
  EXPECT_TRUE(pools.EndAllocateTo({1, 0}));
  EXPECT_FALSE(pools.capturing());
  EXPECT_EQ(pools.Route(7), 0u);
  EXPECT_FALSE(pools.EndAllocateTo({1, 0}));
}

TEST(MemoryPoolsTest, SharedPoolLivesUntilTheLastRelease) {
  MemoryPools pools;
  const uint32_t a = pools.CreateOrIncref({0, 1});
  EXPECT_EQ(pools.CreateOrIncref({0, 1}), a);  // a second graph shares it
  EXPECT_EQ(pools.use_count({0, 1}), 2);
  EXPECT_FALSE(pools.Release({0, 1}).has_value());
  EXPECT_EQ(pools.TagOf({0, 1}), a);
  EXPECT_EQ(pools.IdOf(a), (MempoolId{0, 1}));
  EXPECT_FALSE(pools.IdOf(0).has_value());  // default memory
  EXPECT_EQ(pools.Release({0, 1}), a);
  EXPECT_FALSE(pools.TagOf({0, 1}).has_value());
  EXPECT_FALSE(pools.IdOf(a).has_value());  // retired
  EXPECT_FALSE(pools.Release({0, 1}).has_value());
  // Tags are never reused: blocks of the old pool cannot join a new one.
  EXPECT_NE(pools.CreateOrIncref({0, 1}), a);
}

TEST(MemoryPoolsTest, LatestRouteWinsAndBeginMakesAnUnknownPool) {
  MemoryPools pools;
  const uint32_t a = pools.BeginAllocateTo({1, 0}, nullptr);
  const uint32_t b =
      pools.BeginAllocateTo({2, 0}, [](StreamHandle s) { return s == 3; });
  EXPECT_EQ(pools.use_count({1, 0}), 1);
  EXPECT_EQ(pools.Route(3), b);
  EXPECT_EQ(pools.Route(4), a);
  // Releasing a pool closes its routes.
  EXPECT_EQ(pools.Release({2, 0}), b);
  EXPECT_EQ(pools.Route(3), a);
}

TEST(MemoryPoolsTest, UseOnOomMarksOnlyLivePoolsOldestFirst) {
  MemoryPools pools;
  EXPECT_FALSE(pools.SetUseOnOom({0, 1}, true));  // unknown
  const uint32_t a = pools.CreateOrIncref({0, 1});
  const uint32_t b = pools.CreateOrIncref({0, 2});
  pools.CreateOrIncref({0, 3});
  EXPECT_TRUE(pools.SetUseOnOom({0, 2}, true));
  EXPECT_TRUE(pools.SetUseOnOom({0, 1}, true));
  EXPECT_EQ(pools.UseOnOomTags(), (std::vector<uint32_t>{a, b}));
  EXPECT_TRUE(pools.SetUseOnOom({0, 1}, false));
  EXPECT_EQ(pools.UseOnOomTags(), (std::vector<uint32_t>{b}));
  pools.Release({0, 2});  // retired: lends nothing any more
  EXPECT_TRUE(pools.UseOnOomTags().empty());
}

// torch.cuda.MemPool(no_split=True): marked on a live pool, forgotten with
// it.
TEST(MemoryPoolsTest, NoSplitMarksOnlyLivePools) {
  MemoryPools pools;
  EXPECT_FALSE(pools.SetNoSplit({0, 1}));  // unknown
  const uint32_t a = pools.CreateOrIncref({0, 1});
  const uint32_t b = pools.CreateOrIncref({0, 2});
  EXPECT_TRUE(pools.SetNoSplit({0, 2}));
  EXPECT_FALSE(pools.NoSplit(a));
  EXPECT_TRUE(pools.NoSplit(b));
  EXPECT_FALSE(pools.NoSplit(0));  // default memory
  pools.Release({0, 2});
  EXPECT_FALSE(pools.NoSplit(b));
}

}  // namespace
}  // namespace gmlake
