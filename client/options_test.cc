// Copyright 2026 The GMLake Authors.

#include "client/options.h"

#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(ParseConfTest, ReadsEveryKindOfValue) {
  auto o =
      ParseConf("backend:host, capacity:40GiB,stitch:false,socket:/x.sock");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->backend, "host");
  EXPECT_EQ(o->capacity, uint64_t{40} << 30);
  EXPECT_FALSE(o->stitch);
  EXPECT_EQ(o->socket, "/x.sock");
}

TEST(ParseConfTest, EmptyKeepsDefaults) {
  auto o = ParseConf("");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->lake, "auto");
  EXPECT_EQ(o->small_size, 1u << 20);
}

TEST(ParseConfTest, BadInputNamesTheKeyAndWhatIsAccepted) {
  auto unknown = ParseConf("capacty:1GiB");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown key 'capacty'"),
            std::string::npos);
  EXPECT_NE(unknown.status().message().find("capacity"), std::string::npos);
  auto bad = ParseConf("backend:gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto|cuda|host|accounting"),
            std::string::npos);
  auto bytes = ParseConf("capacity:lots");
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("'capacity'"), std::string::npos);
  EXPECT_FALSE(ParseConf("capacity:").ok());
}

TEST(OptionsTest, GrowSlackIsAFraction) {
  auto o = ParseConf("grow_slack:0.02");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_DOUBLE_EQ(o->grow_slack, 0.02);
  EXPECT_DOUBLE_EQ(ParseConf("")->grow_slack, 0.005);
  for (const char* bad : {"grow_slack:2", "grow_slack:-0.1", "grow_slack:x"}) {
    auto b = ParseConf(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("grow_slack"), std::string::npos)
        << b.status();
  }
}

TEST(OptionsTest, GrowSlackLargeIsAFraction) {
  auto o = ParseConf("grow_slack_large:0.01");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_DOUBLE_EQ(o->grow_slack_large, 0.01);
  EXPECT_DOUBLE_EQ(ParseConf("")->grow_slack_large, 0.0075);
  EXPECT_DOUBLE_EQ(ParseConf("grow_slack_large:0")->grow_slack_large, 0);
  EXPECT_FALSE(ParseConf("grow_slack_large:1.5").ok());
}

TEST(OptionsTest, CoversAreSetInBytesAndAFraction) {
  auto o = ParseConf("cover_tail:4MiB,cover_after:0.01");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cover_tail, uint64_t{4} << 20);
  EXPECT_DOUBLE_EQ(o->cover_after, 0.01);
  EXPECT_EQ(ParseConf("")->cover_tail, uint64_t{32} << 20);
  EXPECT_DOUBLE_EQ(ParseConf("")->cover_after, 0.002);
  auto b = ParseConf("cover_after:2");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("cover_after"), std::string::npos)
      << b.status();
}

// Coarser chunks for a process that holds much: 1/2048 of what it holds,
// at most 16 MiB, by default (docs/design.md, "Chunk sizes").
TEST(OptionsTest, HeldChunksAreAWholeDivisorAndABound) {
  EXPECT_EQ(ParseConf("")->held_chunk_divisor, 2048u);
  EXPECT_EQ(ParseConf("")->held_chunk_max, uint64_t{16} << 20);
  auto o = ParseConf("held_chunk_divisor:0,held_chunk_max:64MiB");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->held_chunk_divisor, 0u);
  EXPECT_EQ(o->held_chunk_max, uint64_t{64} << 20);
  for (const char* bad : {"held_chunk_divisor:0.5", "held_chunk_divisor:-1",
                          "held_chunk_divisor:many"}) {
    auto b = ParseConf(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("held_chunk_divisor"),
              std::string::npos)
        << b.status();
    EXPECT_NE(b.status().message().find("whole number"), std::string::npos)
        << b.status();
  }
}

// 8 GiB by default (docs/design.md, "A KV cache that grows"); 0 keeps the
// bound of before, what is reserved plus 2 GiB.
TEST(OptionsTest, DormantViewsAreBoundAtEightGiBUnlessSet) {
  EXPECT_EQ(ParseConf("")->max_dormant, uint64_t{8} << 30);
  auto o = ParseConf("max_dormant:0");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->max_dormant, 0u);
  EXPECT_EQ(ParseConf("max_dormant:512MiB")->max_dormant, uint64_t{512} << 20);
}

// An arena's page tables are sized by it: an absurd arena would be a
// bad_alloc (a crash) on the first large request, not an error.
TEST(ParseConfTest, ArenasLargerThanAnAddressSpaceAreRefused) {
  for (const char* conf : {"large_arena:100000TiB", "small_arena:65TiB"}) {
    auto o = ParseConf(conf);
    ASSERT_FALSE(o.ok()) << conf;
    EXPECT_NE(o.status().message().find("at most 64.00 TiB"), std::string::npos)
        << o.status();
  }
  EXPECT_TRUE(ParseConf("large_arena:64TiB,small_arena:1TiB").ok());
}

}  // namespace
}  // namespace gmlake
