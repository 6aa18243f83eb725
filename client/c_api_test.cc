// Copyright 2026 The GMLake Authors.

#include <cstdlib>
#include <cstring>
#include <string>

#include "client/gmlake.h"
#include "gtest/gtest.h"

namespace {

TEST(CApiTest, MallocFreeStatsAndErrors) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  EXPECT_NE(std::string(gmlake_describe()).find("embedded lake"),
            std::string::npos);
  void* p = gmlake_malloc(3 << 20, 0, 0);
  ASSERT_NE(p, nullptr) << gmlake_last_error();
  std::memset(p, 1, 3 << 20);
  char* stats = gmlake_stats_json(0);
  ASSERT_NE(stats, nullptr);
  EXPECT_NE(std::string(stats).find("\"allocated_bytes.all.current\":3145728"),
            std::string::npos)
      << stats;
  gmlake_free_string(stats);
  EXPECT_EQ(gmlake_free(p), 0);
  EXPECT_EQ(gmlake_free(p), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("not a live allocation"),
            std::string::npos);
  EXPECT_EQ(gmlake_malloc(16, 7, 0), nullptr);
  EXPECT_NE(std::string(gmlake_last_error()).find("device 7"),
            std::string::npos);
  EXPECT_EQ(gmlake_empty_cache(), uint64_t{4} << 20);
  // Other options while running: a clear refusal.
  EXPECT_EQ(gmlake_init("backend:accounting"), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("gmlake_shutdown"),
            std::string::npos);
  gmlake_shutdown();
  EXPECT_EQ(gmlake_init("capacity:loads"), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("capacity"),
            std::string::npos);
}

TEST(CApiTest, TorchSignaturesAndCapacity) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false,capacity:8MiB"),
            0)
      << gmlake_last_error();
  void* p = gmlake_torch_malloc(6 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(gmlake_torch_malloc(4 << 20, 0, nullptr), nullptr);
  EXPECT_NE(std::string(gmlake_last_error()).find("out of memory"),
            std::string::npos)
      << gmlake_last_error();
  gmlake_torch_free(p, 6 << 20, 0, nullptr);
  char* snap = gmlake_snapshot_json();
  EXPECT_NE(std::string(snap).find("\"segments\""), std::string::npos);
  gmlake_free_string(snap);
  gmlake_shutdown();
}

TEST(CApiTest, DaemonRequiredButAbsentSaysSo) {
  EXPECT_EQ(gmlake_init("lake:daemon,socket:/nonexistent/gmlaked.sock"), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("/nonexistent/gmlaked.sock"),
            std::string::npos)
      << gmlake_last_error();
}

}  // namespace
