// Copyright 2026 The GMLake Authors.

#include <cstdlib>
#include <cstring>
#include <stdexcept>
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
  // The C entry point fails with NULL, never an exception.
  EXPECT_EQ(gmlake_malloc(4 << 20, 0, 0), nullptr);
  EXPECT_NE(std::string(gmlake_last_error()).find("out of memory"),
            std::string::npos)
      << gmlake_last_error();
  gmlake_torch_free(p, 6 << 20, 0, nullptr);
  char* snap = gmlake_snapshot_json();
  EXPECT_NE(std::string(snap).find("\"segments\""), std::string::npos);
  gmlake_free_string(snap);
  gmlake_shutdown();
}

// PyTorch's CUDAPluggableAllocator does not check the pointer our malloc
// returns: a null would become a tensor at address 0. So the torch entry
// point throws, in PyTorch's words, with our whole account.
TEST(CApiTest, TorchMallocThrowsOutOfMemoryInPyTorchsWords) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false,capacity:8MiB"),
            0)
      << gmlake_last_error();
  void* p = gmlake_torch_malloc(6 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  std::string what;
  try {
    gmlake_torch_malloc(3 << 20, 0, nullptr);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  EXPECT_EQ(what.rfind("CUDA out of memory. Tried to allocate 3.00 MiB. ", 0),
            0u)
      << what;
  // The account: asked, live, reserved, cached, capacity, the lake's word.
  for (const char* part :
       {"device 0", "6.00 MiB allocated in 1 blocks", "reserved",
        "free but not usable", "capacity 8.00 MiB", "the embedded lake said"}) {
    EXPECT_NE(what.find(part), std::string::npos) << part << " in: " << what;
  }
  // The process goes on: what fits is still served.
  void* q = gmlake_torch_malloc(1 << 20, 0, nullptr);
  ASSERT_NE(q, nullptr);
  std::memset(q, 7, 1 << 20);
  gmlake_torch_free(q, 1 << 20, 0, nullptr);
  gmlake_torch_free(p, 6 << 20, 0, nullptr);
  gmlake_shutdown();
}

// Other failures throw too (never a null), without claiming to be memory.
TEST(CApiTest, TorchMallocThrowsForOtherErrors) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  std::string what;
  try {
    gmlake_torch_malloc(1 << 20, 5, nullptr);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  EXPECT_EQ(what.rfind("gmlake: device 5 does not exist", 0), 0u) << what;
  try {
    gmlake_torch_malloc(-1, 0, nullptr);
    what.clear();
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("size -1"), std::string::npos) << what;
  // Size 0 is no failure: PyTorch asks for it and gets null.
  EXPECT_EQ(gmlake_torch_malloc(0, 0, nullptr), nullptr);
  gmlake_shutdown();
}

// What a shim throwing the framework's own type calls: no C++ exception,
// the verdict in a flag.
TEST(CApiTest, TorchTryMallocSaysOutOfMemoryWithoutThrowing) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false,capacity:4MiB"),
            0)
      << gmlake_last_error();
  void* p = nullptr;
  int oom = -1;
  EXPECT_EQ(gmlake_torch_try_malloc(2 << 20, 0, nullptr, &p, &oom), 0);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(oom, 0);
  void* q = reinterpret_cast<void*>(1);
  EXPECT_EQ(gmlake_torch_try_malloc(3 << 20, 0, nullptr, &q, &oom), -1);
  EXPECT_EQ(q, nullptr);
  EXPECT_EQ(oom, 1);
  EXPECT_EQ(std::string(gmlake_last_error())
                .rfind("CUDA out of memory. Tried to allocate 3.00 MiB. ", 0),
            0u)
      << gmlake_last_error();
  EXPECT_EQ(gmlake_torch_try_malloc(16, 3, nullptr, &q, &oom), -1);
  EXPECT_EQ(oom, 0);
  EXPECT_EQ(gmlake_torch_try_malloc(0, 0, nullptr, &q, &oom), 0);
  EXPECT_EQ(q, nullptr);
  gmlake_torch_free(p, 2 << 20, 0, nullptr);
  gmlake_shutdown();
}

// NULL from malloc(0) is no failure, so no older error may read as its
// cause.
TEST(CApiTest, MallocZeroClearsTheLastError) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  int here = 0;
  EXPECT_EQ(gmlake_free(&here), -1);
  ASSERT_STRNE(gmlake_last_error(), "");
  EXPECT_EQ(gmlake_malloc(0, 0, 0), nullptr);
  EXPECT_STREQ(gmlake_last_error(), "");
  gmlake_shutdown();
}

TEST(CApiTest, DaemonRequiredButAbsentSaysSo) {
  EXPECT_EQ(gmlake_init("lake:daemon,socket:/nonexistent/gmlaked.sock"), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("/nonexistent/gmlaked.sock"),
            std::string::npos)
      << gmlake_last_error();
}

}  // namespace
