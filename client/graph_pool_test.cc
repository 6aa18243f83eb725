// Copyright 2026 The GMLake Authors.
//
// Private pools through the DeviceAllocator on the host backend, whose
// streams can be marked captured: what CUDA graph capture needs.

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/device_allocator.h"
#include "client/embedded_lake.h"
#include "client/options.h"
#include "common/host_backend.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gmlake {
namespace {

constexpr size_t kMiB = 1 << 20;
constexpr StreamHandle kCapture = 7;
constexpr StreamHandle kSide = 8;
constexpr StreamHandle kOther = 9;

class GraphPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostBackend::Options bo;
    bo.capacity_bytes = size_t{1} << 30;
    auto backend = HostBackend::Create(bo);
    ASSERT_TRUE(backend.ok()) << backend.status();
    host_ = backend->get();
    lake_ = std::make_unique<EmbeddedLake>(*std::move(backend), 0);
    auto options = ParseConf("");
    ASSERT_TRUE(options.ok()) << options.status();
    alloc_ = std::make_unique<DeviceAllocator>(0, lake_.get(), *options);
  }
  void TearDown() override {
    alloc_.reset();
    lake_.reset();
  }
  DevicePtr Malloc(size_t size, StreamHandle stream) {
    auto p = alloc_->Malloc(size, stream);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : 0;
  }
  // Capture on kCapture (and kSide, joined), as torch.cuda.graph does:
  // CUDAGraph::capture_begin opens the route, then begins the capture.
  void BeginCapture(MempoolId id) {
    alloc_->BeginAllocateToPool(
        id, [](StreamHandle s) { return s == kCapture || s == kSide; });
    host_->SetCaptured(kCapture, true);
    host_->SetCaptured(kSide, true);
  }
  // As CUDAGraph::capture_end: the stream capture ends, then the route.
  void EndCapture(MempoolId id) {
    host_->SetCaptured(kCapture, false);
    host_->SetCaptured(kSide, false);
    alloc_->EndAllocateToPool(id);
  }
  uint64_t Count(VmmCall c) { return host_->call_stats().Count(c); }

  HostBackend* host_ = nullptr;
  std::unique_ptr<EmbeddedLake> lake_;
  std::unique_ptr<DeviceAllocator> alloc_;
};

TEST_F(GraphPoolTest, PoolMemoryIsHandedToNoOneElseUntilReleased) {
  const MempoolId id{1, 0};
  alloc_->CreateOrIncrefPool(id);
  // Memory the default pool freed is not taken by the capture either.
  DevicePtr warm = Malloc(8 * kMiB, kCapture);
  ASSERT_TRUE(alloc_->Free(warm).ok());
  BeginCapture(id);
  std::vector<DevicePtr> in_pool;
  for (size_t s : {3 * kMiB, 5 * kMiB, size_t{700} * 1024, size_t{1024}}) {
    in_pool.push_back(Malloc(s, kCapture));
  }
  in_pool.push_back(Malloc(2 * kMiB, kSide));
  EXPECT_EQ(std::find(in_pool.begin(), in_pool.end(), warm), in_pool.end());
  // Outside the filter: default memory.
  DevicePtr outside = Malloc(kMiB, kOther);
  EXPECT_EQ(alloc_->PoolLivePointers(id).size(), in_pool.size());
  for (DevicePtr p : in_pool) ASSERT_TRUE(alloc_->Free(p).ok());
  EndCapture(id);
  ASSERT_TRUE(alloc_->Free(outside).ok());
  // Freed pool blocks are not reused by anyone outside the pool, on any
  // stream, whatever the size, even through the slow path.
  std::vector<DevicePtr> others;
  for (StreamHandle s : {kCapture, kSide, kOther}) {
    for (size_t size :
         {3 * kMiB, 5 * kMiB, size_t{700} * 1024, size_t{1024}, 2 * kMiB}) {
      others.push_back(Malloc(size, s));
    }
  }
  for (DevicePtr p : others) {
    for (DevicePtr q : in_pool) EXPECT_NE(p, q);
  }
  EXPECT_GT(alloc_->PoolReservedBytes(id), 0u);
  // Snapshots name the pool a segment serves, as PyTorch's segment_pool_id
  // (test_cuda_graph_allocator_propagates_stream looks for the graph's).
  const std::string segments = alloc_->SegmentsJson();
  EXPECT_NE(segments.find("\"segment_pool_id\":[1,0]"), std::string::npos)
      << segments;
  EXPECT_NE(segments.find("\"segment_pool_id\":[0,0]"), std::string::npos)
      << segments;
  for (DevicePtr p : others) ASSERT_TRUE(alloc_->Free(p).ok());
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
  EXPECT_EQ(host_->capture_violations(), 0u);
}

// PyTorch's test_allocate_in_thread_to_pool: each growth of a private pool
// is a segment of its own, as each cudaMalloc is natively, whatever the
// other streams map meanwhile. Counted before from how the mappings
// happened to land (one segment where b was mapped right after a, three
// where another stream's mapping came between).
TEST_F(GraphPoolTest, EachGrowthOfAPrivatePoolIsASegmentOfItsOwn) {
  const MempoolId id{6, 0};
  alloc_->CreateOrIncrefPool(id);
  alloc_->BeginAllocateToPool(id, [](StreamHandle s) { return s == kCapture; });
  auto pool_segments = [&] {
    int n = 0;
    for (const auto& s : alloc_->Segments()) n += s.pool == id ? 1 : 0;
    return n;
  };
  for (int round = 0; round < 10; ++round) {
    DevicePtr a = Malloc(20 * kMiB, kCapture);
    DevicePtr b = Malloc(20 * kMiB, kCapture);
    DevicePtr x = round % 2 == 0 ? Malloc(20 * kMiB, kOther) : 0;
    DevicePtr c = Malloc(20 * kMiB, kCapture);
    EXPECT_EQ(pool_segments(), 3) << "round " << round;
    for (DevicePtr p : {a, b, c, x}) {
      if (p != 0) {
        ASSERT_TRUE(alloc_->Free(p).ok());
      }
    }
  }
  // Free blocks of the pool still join a growth beside them: a request
  // larger than every free block maps only what it misses, here the one
  // page between two free segments, which become one.
  const uint64_t before = alloc_->PoolReservedBytes(id);
  DevicePtr big = Malloc(30 * kMiB, kCapture);
  EXPECT_EQ(alloc_->PoolReservedBytes(id), before + 2 * kMiB);
  EXPECT_EQ(pool_segments(), 2);
  ASSERT_TRUE(alloc_->Free(big).ok());
  alloc_->EndAllocateToPool(id);
  alloc_->ReleasePool(id);
  alloc_->EmptyCache();
  EXPECT_EQ(pool_segments(), 0);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

// torch.cuda.MemPool(no_split=True) (PyTorch's test_mempool_no_split):
// each allocation is a segment of its own with one block, whole pages,
// never split and never joined; a freed one serves whole a request of its
// page count, and only such a request.
TEST_F(GraphPoolTest, ANoSplitPoolGivesEachAllocationASegmentOfItsOwn) {
  const MempoolId id{0, 7};
  alloc_->CreateOrIncrefPool(id);
  ASSERT_TRUE(alloc_->SetPoolNoSplit(id).ok());
  EXPECT_TRUE(absl::IsNotFound(alloc_->SetPoolNoSplit({0, 99})));
  alloc_->BeginAllocateToPool(id, [](StreamHandle s) { return s == kOther; });
  const DevicePtr a = Malloc(4 * kMiB, kOther);
  const DevicePtr b = Malloc(4 * kMiB, kOther);
  const DevicePtr c = Malloc(1024, kOther);
  const DevicePtr d = Malloc(3 * kMiB, kOther);
  auto pool_segments = [&] {
    std::map<DevicePtr, size_t> out;  // address -> its one block's size
    for (const auto& s : alloc_->Segments()) {
      if (s.pool != id) continue;
      EXPECT_EQ(s.blocks.size(), 1u) << s.addr;
      EXPECT_EQ(s.blocks[0].addr, s.addr);
      EXPECT_EQ(s.blocks[0].size, s.total);
      out[s.addr] = s.total;
    }
    return out;
  };
  EXPECT_EQ(pool_segments(),
            (std::map<DevicePtr, size_t>{
                {a, 4 * kMiB}, {b, 4 * kMiB}, {c, 2 * kMiB}, {d, 4 * kMiB}}));
  EXPECT_EQ(alloc_->PoolReservedBytes(id), 14 * kMiB);
  ASSERT_TRUE(alloc_->Free(b).ok());
  EXPECT_EQ(Malloc(4 * kMiB - 4096, kOther), b);  // whole, again
  ASSERT_TRUE(alloc_->Free(c).ok());
  const DevicePtr e = Malloc(3 * kMiB, kOther);  // 2 MiB cannot serve it
  EXPECT_NE(e, c);
  EXPECT_EQ(Malloc(512, kOther), c);
  ASSERT_TRUE(alloc_->Free(a).ok());
  const DevicePtr f = Malloc(kMiB, kOther);  // 4 MiB is more than its page
  EXPECT_NE(f, a);
  EXPECT_EQ(pool_segments().size(), 6u);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
  for (DevicePtr p : {b, c, d, e, f}) ASSERT_TRUE(alloc_->Free(p).ok());
  alloc_->EndAllocateToPool(id);
  alloc_->ReleasePool(id);
  alloc_->EmptyCache();
  EXPECT_TRUE(pool_segments().empty());
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

TEST_F(GraphPoolTest, NoEventCallDuringCaptureAndDeferredFreesRecordAfter) {
  const MempoolId id{2, 0};
  // A block of default memory used on another stream, freed mid-capture.
  DevicePtr shared = Malloc(4 * kMiB, kOther);
  ASSERT_TRUE(alloc_->RecordStream(shared, kCapture).ok());
  DevicePtr pending = Malloc(4 * kMiB, kOther);
  ASSERT_TRUE(alloc_->RecordStream(pending, kSide).ok());
  ASSERT_TRUE(alloc_->Free(pending).ok());  // an event before the capture
  const uint64_t records = Count(VmmCall::kEventRecord);
  BeginCapture(id);
  DevicePtr a = Malloc(6 * kMiB, kCapture);
  ASSERT_TRUE(alloc_->RecordStream(a, kSide).ok());
  ASSERT_TRUE(alloc_->Free(a).ok());  // used on a captured side stream
  ASSERT_TRUE(alloc_->Free(shared).ok());
  // Mallocs that take the slow path and the fast path, both streams.
  for (int i = 0; i < 8; ++i) {
    DevicePtr p = Malloc((i + 1) * 3 * kMiB, i % 2 ? kSide : kCapture);
    ASSERT_TRUE(alloc_->Free(p).ok());
  }
  EXPECT_EQ(alloc_->EmptyCache(), 0u);  // would wait for the streams
  EXPECT_EQ(Count(VmmCall::kEventRecord), records);
  EXPECT_EQ(host_->capture_violations(), 0u);
  EndCapture(id);
  // The deferred frees recorded their events once the capture ended.
  EXPECT_EQ(Count(VmmCall::kEventRecord), records + 2);
  DevicePtr after = Malloc(4 * kMiB, kOther);
  ASSERT_TRUE(alloc_->Free(after).ok());
  alloc_->ReleasePool(id);
  EXPECT_EQ(host_->capture_violations(), 0u);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

// PyTorch's test_graph_capture_reclaim_shared_pool: a block freed during one
// capture while a side stream used it (record_stream) serves the next
// capture into the same pool, once that side work has finished. PyTorch
// opens the route before the stream capture begins, so the allocator may
// query the deferred free's events then.
TEST_F(GraphPoolTest, ABlockFreedInOneCaptureServesTheNextIntoItsPool) {
  const MempoolId shared{0, 7};
  alloc_->CreateOrIncrefPool(shared);
  alloc_->CreateOrIncrefPool(shared);  // two graphs
  BeginCapture(shared);
  DevicePtr data = Malloc(8 * kMiB, kCapture);
  ASSERT_TRUE(alloc_->RecordStream(data, kSide).ok());
  ASSERT_TRUE(alloc_->Free(data).ok());
  EndCapture(shared);
  BeginCapture(shared);  // the second graph
  EXPECT_EQ(Malloc(8 * kMiB, kCapture), data);
  EXPECT_EQ(host_->capture_violations(), 0u);
  EndCapture(shared);
  alloc_->ReleasePool(shared);
  alloc_->ReleasePool(shared);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

// PyTorch's test_graph_capture_reclaim_2_streams: inside one capture, a
// block used on a side stream (record_stream) and freed is reused once the
// capture graph orders the side stream's work before the block's stream
// (a join), and not before; no event call is made for it.
TEST_F(GraphPoolTest, AFreedSideStreamBlockIsReusedInTheCaptureOnceJoined) {
  const MempoolId id{8, 0};
  alloc_->CreateOrIncrefPool(id);
  BeginCapture(id);
  DevicePtr sink = Malloc(32, kCapture);
  DevicePtr data1 = Malloc(32, kCapture);
  host_->CaptureJoin(kSide, kCapture);  // s2.wait_stream(s1)
  DevicePtr buf2 = Malloc(32, kSide);
  host_->CaptureKernel(kSide);  // torch.add(data1, 2.0, out=buf2) on s2
  ASSERT_TRUE(alloc_->RecordStream(data1, kSide).ok());
  const uint64_t records = Count(VmmCall::kEventRecord);
  ASSERT_TRUE(alloc_->Free(data1).ok());
  DevicePtr data2 = Malloc(32, kCapture);  // before the join
  EXPECT_NE(data2, data1);
  host_->CaptureJoin(kCapture, kSide);     // s1.wait_stream(s2)
  host_->CaptureKernel(kCapture);          // sink.fill_(1.0)
  DevicePtr data3 = Malloc(32, kCapture);  // after it
  EXPECT_EQ(data3, data1);
  EXPECT_EQ(Count(VmmCall::kEventRecord), records);
  EXPECT_GT(Count(VmmCall::kCaptureQuery), 0u);
  EXPECT_EQ(host_->capture_violations(), 0u);
  for (DevicePtr p : {sink, buf2, data2, data3}) {
    ASSERT_TRUE(alloc_->Free(p).ok());
  }
  EndCapture(id);
  alloc_->ReleasePool(id);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

// test_graph_capture_reclaim_4_streams: three side streams, joined in two
// steps; only the join of all of them lets the block be reused.
TEST_F(GraphPoolTest, APartialJoinDoesNotFreeASideStreamBlock) {
  constexpr StreamHandle kThird = 11, kFourth = 12;
  const MempoolId id{9, 0};
  alloc_->CreateOrIncrefPool(id);
  alloc_->BeginAllocateToPool(id, nullptr);
  for (StreamHandle s : {kCapture, kSide, kThird, kFourth}) {
    host_->SetCaptured(s, true);
  }
  DevicePtr data1 = Malloc(32, kCapture);
  host_->CaptureKernel(kCapture);  // torch.ones
  for (StreamHandle s : {kSide, kThird, kFourth}) {
    host_->CaptureJoin(s, kCapture);
    host_->CaptureKernel(s);  // torch.add(data1, ...) on s
    ASSERT_TRUE(alloc_->RecordStream(data1, s).ok());
  }
  ASSERT_TRUE(alloc_->Free(data1).ok());
  host_->CaptureJoin(kCapture, kSide);
  host_->CaptureKernel(kCapture);
  host_->CaptureJoin(kThird, kFourth);
  host_->CaptureKernel(kThird);
  DevicePtr data2 = Malloc(32, kCapture);  // s3's and s4's work not joined
  EXPECT_NE(data2, data1);
  host_->CaptureJoin(kCapture, kThird);
  host_->CaptureKernel(kCapture);
  DevicePtr data3 = Malloc(32, kCapture);
  EXPECT_EQ(data3, data1);
  EXPECT_EQ(host_->capture_violations(), 0u);
  for (DevicePtr p : {data2, data3}) ASSERT_TRUE(alloc_->Free(p).ok());
  for (StreamHandle s : {kCapture, kSide, kThird, kFourth}) {
    host_->SetCaptured(s, false);
  }
  alloc_->EndAllocateToPool(id);
  alloc_->ReleasePool(id);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

TEST_F(GraphPoolTest, TwoGraphsShareOnePoolAndTheLastReleaseReturnsIt) {
  const MempoolId id{0, 1};
  alloc_->CreateOrIncrefPool(id);  // graph 1
  alloc_->CreateOrIncrefPool(id);  // graph 2
  BeginCapture(id);
  DevicePtr g1 = Malloc(10 * kMiB, kCapture);
  ASSERT_TRUE(alloc_->Free(g1).ok());
  EndCapture(id);
  BeginCapture(id);
  // The second graph reuses the first one's freed pool memory: no map.
  const uint64_t maps = Count(VmmCall::kMap);
  DevicePtr g2 = Malloc(10 * kMiB, kCapture);
  EXPECT_EQ(g2, g1);
  EXPECT_EQ(Count(VmmCall::kMap), maps);
  ASSERT_TRUE(alloc_->Free(g2).ok());
  EndCapture(id);
  const uint64_t reserved = alloc_->stats().reserved_bytes.current;
  const uint64_t pool_bytes = alloc_->PoolReservedBytes(id);
  ASSERT_GE(pool_bytes, 10 * kMiB);
  EXPECT_EQ(alloc_->ReleasePool(id), 0u);  // graph 1 reset: still shared
  EXPECT_EQ(alloc_->PoolReservedBytes(id), pool_bytes);
  const uint64_t returned = alloc_->ReleasePool(id);  // graph 2 reset
  EXPECT_GE(returned, pool_bytes);
  EXPECT_EQ(alloc_->stats().reserved_bytes.current, reserved - returned);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

TEST_F(GraphPoolTest, ReplaysInALoopLeakNothingAndLiveBlocksFollowRelease) {
  const MempoolId id{3, 0};
  alloc_->CreateOrIncrefPool(id);
  BeginCapture(id);
  DevicePtr out = Malloc(5 * kMiB, kCapture);  // a graph output, kept
  DevicePtr tmp = Malloc(7 * kMiB, kCapture);
  ASSERT_TRUE(alloc_->Free(tmp).ok());
  EndCapture(id);
  const uint64_t maps = Count(VmmCall::kMap);
  for (int i = 0; i < 50; ++i) {  // replays touch no allocator state;
    DevicePtr step = Malloc(3 * kMiB, kOther);  // the eager code around
    ASSERT_TRUE(alloc_->Free(step).ok());
  }
  const uint64_t after_loop = Count(VmmCall::kMap);
  for (int i = 0; i < 50; ++i) {
    DevicePtr step = Malloc(3 * kMiB, kOther);
    ASSERT_TRUE(alloc_->Free(step).ok());
  }
  EXPECT_EQ(Count(VmmCall::kMap), after_loop);
  EXPECT_LE(after_loop - maps, 2u);
  alloc_->ReleasePool(id);
  EXPECT_TRUE(alloc_->PoolLivePointers(id).empty());  // pool forgotten
  // The output outlived the graph; freed now, it joins default memory and
  // a default malloc of its size reuses it.
  ASSERT_TRUE(alloc_->Free(out).ok());
  DevicePtr again = Malloc(5 * kMiB, kCapture);
  EXPECT_EQ(again, out);
  ASSERT_TRUE(alloc_->Free(again).ok());
  const AllocatorStats s = alloc_->stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.num_mallocs, s.num_frees);
  EXPECT_EQ(host_->capture_violations(), 0u);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

// torch.cuda.empty_cache() between replays of a live graph (PyTorch's
// test_graph_memory_stats_and_use_result_after_destroy_graph): the memory
// the graph's intermediates were freed into is replayed into, so emptying
// the cache leaves it mapped and the pool's, however much is asked for.
// Found on the H200 as an illegal address at the next replay: the rest
// that whole-chunk steals left was taken from any pool.
TEST_F(GraphPoolTest, EmptyCacheLeavesALivePoolsFreeMemoryMapped) {
  const MempoolId id{4, 0};
  alloc_->CreateOrIncrefPool(id);
  BeginCapture(id);
  std::vector<DevicePtr> tmps;
  for (size_t s : {7 * kMiB, 3 * kMiB + 512, size_t{900} * 1024}) {
    tmps.push_back(Malloc(s, kCapture));
  }
  DevicePtr out = Malloc(5 * kMiB, kCapture);
  for (DevicePtr p : tmps) ASSERT_TRUE(alloc_->Free(p).ok());
  EndCapture(id);
  // Default memory beside it, free too: that part may go.
  DevicePtr eager = Malloc(11 * kMiB, kOther);
  ASSERT_TRUE(alloc_->Free(eager).ok());
  const uint64_t pool_bytes = alloc_->PoolReservedBytes(id);
  alloc_->EmptyCache();
  EXPECT_EQ(alloc_->PoolReservedBytes(id), pool_bytes);
  // A replay writes the intermediates again: still mapped, still free in
  // the pool at the same addresses.
  for (DevicePtr p : tmps) {
    std::memset(reinterpret_cast<void*>(p), 0x5a, 512 * 1024);
  }
  auto again = alloc_->MallocAt(id, tmps[0], 7 * kMiB);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(alloc_->Free(*again).ok());
  ASSERT_TRUE(alloc_->Free(out).ok());
  EXPECT_GE(alloc_->ReleasePool(id), pool_bytes);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

// Each segment of a snapshot serves one pool, as PyTorch's do: a pool's
// blocks mapped beside default ones (one mapped range of gmlake's) are
// their own segment, named by the pool (MemPool.snapshot and CUDA graph
// trees' checks read segment_pool_id; on the H200 a graph's blocks were
// reported inside default segments, as pool (0, 0)).
TEST_F(GraphPoolTest, EverySnapshotSegmentServesOnePool) {
  const MempoolId id{6, 0};
  alloc_->CreateOrIncrefPool(id);
  std::vector<DevicePtr> defaults, in_pool;
  for (int round = 0; round < 4; ++round) {
    defaults.push_back(Malloc(3 * kMiB + 4096, kOther));
    alloc_->BeginAllocateToPool(id, [](StreamHandle s) { return s == kOther; });
    in_pool.push_back(Malloc(2 * kMiB + 8192, kOther));
    alloc_->EndAllocateToPool(id);
  }
  // Freed default blocks are stitched into the next ones, so ranges mix.
  ASSERT_TRUE(alloc_->Free(defaults[1]).ok());
  ASSERT_TRUE(alloc_->Free(defaults[2]).ok());
  defaults.erase(defaults.begin() + 1, defaults.begin() + 3);
  defaults.push_back(Malloc(6 * kMiB, kOther));
  const auto segments = nlohmann::json::parse(alloc_->SegmentsJson());
  int pool_blocks = 0, default_blocks = 0;
  for (const auto& seg : segments) {
    const bool pool = seg["segment_pool_id"] == nlohmann::json::array({6, 0});
    for (const auto& b : seg["blocks"]) {
      const DevicePtr addr = b["address"].get<DevicePtr>();
      if (std::count(in_pool.begin(), in_pool.end(), addr)) {
        EXPECT_TRUE(pool) << seg.dump();
        ++pool_blocks;
      }
      if (std::count(defaults.begin(), defaults.end(), addr)) {
        EXPECT_FALSE(pool) << seg.dump();
        ++default_blocks;
      }
    }
  }
  EXPECT_EQ(pool_blocks, 4);
  EXPECT_EQ(default_blocks, 3);
  for (DevicePtr p : defaults) ASSERT_TRUE(alloc_->Free(p).ok());
  for (DevicePtr p : in_pool) ASSERT_TRUE(alloc_->Free(p).ok());
  EXPECT_GT(alloc_->ReleasePool(id), 0u);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

// A torch.cuda.MemPool keeps its memory while it lives, even with nothing
// live in it: empty_cache inside use_mem_pool gives nothing of it back
// (PyTorch's test_mempool_emptycache_multithread: one segment left).
TEST_F(GraphPoolTest, EmptyCacheLeavesAnIdlePoolsMemory) {
  const MempoolId id{5, 0};
  alloc_->CreateOrIncrefPool(id);
  alloc_->BeginAllocateToPool(id, [](StreamHandle s) { return s == kOther; });
  for (size_t s : {size_t{16}, 3 * kMiB}) {
    ASSERT_TRUE(alloc_->Free(Malloc(s, kOther)).ok());
  }
  const uint64_t pool_bytes = alloc_->PoolReservedBytes(id);
  EXPECT_GT(pool_bytes, 0u);
  alloc_->EmptyCache();
  EXPECT_EQ(alloc_->PoolReservedBytes(id), pool_bytes);
  alloc_->EndAllocateToPool(id);
  EXPECT_GE(alloc_->ReleasePool(id), pool_bytes);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
}

// torch.cuda.MemPool(use_on_oom=True) (PyTorch's test_mempool_limited_memory,
// with gmlake's own memory): when default memory has nothing left, a free
// block of such a pool serves; a pool not so marked lends nothing.
TEST_F(GraphPoolTest, UseOnOomPoolsLendTheirFreeBlocksOnALastResort) {
  const MempoolId keep{0, 1}, lend{0, 2};
  alloc_->CreateOrIncrefPool(keep);
  alloc_->CreateOrIncrefPool(lend);
  ASSERT_TRUE(alloc_->SetPoolUseOnOom(lend, true).ok());
  ASSERT_TRUE(lake_->SetCapacity(0, 80 * kMiB).ok());
  DevicePtr a = 0, b = 0;
  for (auto [id, p] : {std::pair{keep, &a}, std::pair{lend, &b}}) {
    alloc_->BeginAllocateToPool(id, nullptr);
    *p = Malloc(40 * kMiB, kOther);
    alloc_->EndAllocateToPool(id);
  }
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  EXPECT_TRUE(
      absl::IsResourceExhausted(alloc_->Malloc(40 * kMiB, kOther).status()));
  ASSERT_TRUE(alloc_->Free(a).ok());
  ASSERT_TRUE(alloc_->Free(b).ok());
  absl::StatusOr<DevicePtr> c = alloc_->Malloc(30 * kMiB, kOther);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, b);
  // Another stream's request is not lent what kOther's work may still use.
  EXPECT_TRUE(
      absl::IsResourceExhausted(alloc_->Malloc(6 * kMiB, kSide).status()));
  EXPECT_TRUE(
      absl::IsResourceExhausted(alloc_->Malloc(30 * kMiB, kOther).status()));
  ASSERT_TRUE(alloc_->Free(*c).ok());
  // Freed, it is the lending pool's again.
  EXPECT_EQ(alloc_->PoolReservedBytes(lend), 40 * kMiB);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
  alloc_->ReleasePool(keep);
  alloc_->ReleasePool(lend);
}

// A CUDA graph tree rewinds its pool to a checkpoint: the blocks live then
// are allocated again at the same addresses, from the pool's free memory,
// the bytes around each staying free; ranges not free are refused.
TEST_F(GraphPoolTest, MallocAtRestoresACheckpointsBlocksInPlace) {
  const MempoolId id{3, 0};
  alloc_->CreateOrIncrefPool(id);
  BeginCapture(id);
  DevicePtr a = Malloc(3 * kMiB, kCapture);
  DevicePtr b = Malloc(kMiB, kCapture);
  DevicePtr c = Malloc(2 * kMiB, kSide);
  EndCapture(id);
  const auto checkpoint = alloc_->PoolLiveBlocks(id);
  ASSERT_EQ(checkpoint.size(), 3u);
  for (DevicePtr p : {a, b, c}) ASSERT_TRUE(alloc_->Free(p).ok());
  ASSERT_TRUE(alloc_->PoolLiveBlocks(id).empty());
  const AllocatorStats before = alloc_->stats();
  // Last first: each range is cut out of the middle of a free block.
  for (auto it = checkpoint.rbegin(); it != checkpoint.rend(); ++it) {
    auto p = alloc_->MallocAt(id, it->first, it->second);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(*p, it->first);
  }
  auto live = alloc_->PoolLiveBlocks(id);
  std::sort(live.begin(), live.end());
  auto expected = checkpoint;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(live, expected);
  const AllocatorStats after = alloc_->stats();
  EXPECT_EQ(after.allocated_bytes.current - before.allocated_bytes.current,
            static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(after.reserved_bytes.current, before.reserved_bytes.current);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
  // Taken already, half taken, off the grain, another pool: refused.
  EXPECT_TRUE(
      absl::IsFailedPrecondition(alloc_->MallocAt(id, b, kMiB).status()));
  EXPECT_TRUE(
      absl::IsFailedPrecondition(alloc_->MallocAt(id, b - 512, 1024).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(alloc_->MallocAt(id, a + 100, 512).status()));
  EXPECT_TRUE(absl::IsNotFound(alloc_->MallocAt({9, 9}, a, 512).status()));
  // Default memory is not the pool's to give.
  DevicePtr other = Malloc(kMiB, kOther);
  ASSERT_TRUE(alloc_->Free(other).ok());
  EXPECT_TRUE(
      absl::IsFailedPrecondition(alloc_->MallocAt(id, other, kMiB).status()));
  // The restored blocks free as any other, and the pool releases whole.
  for (const auto& [p, size] : checkpoint) ASSERT_TRUE(alloc_->Free(p).ok());
  EXPECT_GT(alloc_->ReleasePool(id), 0u);
  EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
  EXPECT_EQ(host_->capture_violations(), 0u);
}

}  // namespace
}  // namespace gmlake
