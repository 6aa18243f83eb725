// Copyright 2026 The GMLake Authors.
//
// Pools another allocator serves (torch.cuda.MemPool(allocator=...)) through
// the DeviceAllocator on the host backend, with host memory as the other
// allocator: PyTorch's test_mempool_with_allocator and
// test_mempool_limited_memory_with_allocator, step by step.

#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "client/device_allocator.h"
#include "client/embedded_lake.h"
#include "client/options.h"
#include "common/host_backend.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gmlake {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr StreamHandle kStream = 7;

// Real memory, as a MemPool's allocator gives it (PyTorch's tests use a
// cudaMalloc wrapper that counts its calls).
class CountingMemory : public ExternalMemory {
 public:
  DevicePtr Allocate(size_t bytes, StreamHandle stream) override {
    ++allocs;
    if (refuse) return 0;
    void* p = std::aligned_alloc(2 * kMiB, bytes);
    std::memset(p, 0xab, bytes);  // touched: real pages
    live.insert(p);
    return reinterpret_cast<DevicePtr>(p);
  }
  void Free(DevicePtr ptr, size_t /*bytes*/, StreamHandle /*stream*/) override {
    ++frees;
    void* p = reinterpret_cast<void*>(ptr);
    EXPECT_EQ(live.erase(p), 1u) << "freed what it did not give";
    std::free(p);
  }
  ~CountingMemory() override {
    for (void* p : live) std::free(p);
  }
  int allocs = 0;
  int frees = 0;
  bool refuse = false;
  std::set<void*> live;
};

class ExternalPoolAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostBackend::Options bo;
    bo.capacity_bytes = size_t{1} << 30;
    auto backend = HostBackend::Create(bo);
    ASSERT_TRUE(backend.ok()) << backend.status();
    lake_ = std::make_unique<EmbeddedLake>(*std::move(backend), 0);
    auto options = ParseConf("");
    ASSERT_TRUE(options.ok()) << options.status();
    alloc_ = std::make_unique<DeviceAllocator>(0, lake_.get(), *options);
    memory_ = std::make_shared<CountingMemory>();
  }
  void TearDown() override {
    EXPECT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
    alloc_.reset();
    lake_.reset();
  }
  // As torch.cuda.use_mem_pool: every request of this thread goes to `id`.
  absl::StatusOr<DevicePtr> MallocIn(MempoolId id, size_t size) {
    alloc_->CreateOrIncrefPool(id);
    alloc_->BeginAllocateToPool(id, nullptr);
    absl::StatusOr<DevicePtr> p = alloc_->Malloc(size, kStream);
    alloc_->EndAllocateToPool(id);
    alloc_->ReleasePool(id);
    return p;
  }
  // The snapshot's segments of pool `id` (MemPool.snapshot()).
  size_t SegmentsOf(MempoolId id) {
    size_t n = 0;
    for (const auto& s : nlohmann::json::parse(alloc_->SegmentsJson())) {
      if (s["segment_pool_id"][0] == id.first &&
          s["segment_pool_id"][1] == id.second) {
        ++n;
      }
    }
    return n;
  }
  int64_t Reserved() { return alloc_->stats().reserved_bytes.current; }

  std::unique_ptr<EmbeddedLake> lake_;
  std::unique_ptr<DeviceAllocator> alloc_;
  std::shared_ptr<CountingMemory> memory_;
};

TEST_F(ExternalPoolAllocatorTest, SmallTensorsPackIntoTwoMiBSegments) {
  const MempoolId id{0, 1};
  ASSERT_TRUE(alloc_->CreateOrIncrefExternalPool(id, memory_).ok());
  EXPECT_EQ(alloc_->PoolUseCount(id), 1);
  absl::StatusOr<DevicePtr> a = MallocIn(id, kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(memory_->allocs, 1);
  EXPECT_EQ(SegmentsOf(id), 1u);
  absl::StatusOr<DevicePtr> b = MallocIn(id, kMiB);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(SegmentsOf(id), 1u);  // packed beside the first
  EXPECT_EQ(*b, *a + kMiB);
  absl::StatusOr<DevicePtr> c = MallocIn(id, kMiB);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(SegmentsOf(id), 2u);
  EXPECT_EQ(memory_->allocs, 2);
  // The memory is the program's to use: it is the other allocator's.
  std::memset(reinterpret_cast<void*>(*c), 1, kMiB);
  EXPECT_EQ(Reserved(), static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(alloc_->stats().allocated_bytes.current,
            static_cast<int64_t>(3 * kMiB));
  EXPECT_EQ(alloc_->PoolLivePointers(id).size(), 3u);
  EXPECT_EQ(alloc_->PoolReservedBytes(id), 4 * kMiB);
  ASSERT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
  for (DevicePtr p : {*a, *b, *c}) ASSERT_TRUE(alloc_->Free(p).ok());
  EXPECT_EQ(memory_->frees, 0);  // cached while the pool lives
  EXPECT_EQ(alloc_->ReleasePool(id), 4 * kMiB);
  EXPECT_EQ(memory_->frees, 2);
  EXPECT_EQ(Reserved(), 0);
  EXPECT_EQ(alloc_->PoolUseCount(id), 0);
}

// PyTorch's test_mempool_limited_memory_with_allocator: 80 MiB left; a
// pool that lends on a last resort and one that does not, 40 MiB each.
TEST_F(ExternalPoolAllocatorTest,
       CapacityCountsThemAndUseOnOomLendsFreeBlocks) {
  const MempoolId keep{0, 1}, lend{0, 2};
  ASSERT_TRUE(alloc_->CreateOrIncrefExternalPool(keep, memory_).ok());
  ASSERT_TRUE(alloc_->CreateOrIncrefExternalPool(lend, memory_).ok());
  ASSERT_TRUE(alloc_->SetPoolUseOnOom(lend, true).ok());
  ASSERT_TRUE(lake_->SetCapacity(0, 80 * kMiB).ok());
  absl::StatusOr<DevicePtr> a = MallocIn(keep, 40 * kMiB);
  absl::StatusOr<DevicePtr> b = MallocIn(lend, 40 * kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  // Default memory has no room left: the segments count against it.
  absl::StatusOr<DevicePtr> over = alloc_->Malloc(40 * kMiB, kStream);
  EXPECT_TRUE(absl::IsResourceExhausted(over.status())) << over.status();
  // Nor may the pools grow past it.
  absl::StatusOr<DevicePtr> more = MallocIn(lend, 4 * kMiB);
  EXPECT_TRUE(absl::IsResourceExhausted(more.status())) << more.status();
  EXPECT_NE(more.status().message().find("MemPools' own allocators"),
            std::string::npos)
      << more.status();
  ASSERT_TRUE(alloc_->Free(*a).ok());
  ASSERT_TRUE(alloc_->Free(*b).ok());
  // The lending pool's free 40 MiB serve a default request.
  absl::StatusOr<DevicePtr> c = alloc_->Malloc(30 * kMiB, kStream);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, *b);
  // What is left of it (10 MiB) does not fit another; the other pool's free
  // 40 MiB are not lent.
  absl::StatusOr<DevicePtr> d = alloc_->Malloc(30 * kMiB, kStream);
  EXPECT_TRUE(absl::IsResourceExhausted(d.status())) << d.status();
  ASSERT_TRUE(alloc_->Free(*c).ok());  // back to the lending pool
  absl::StatusOr<DevicePtr> e = MallocIn(lend, 20 * kMiB);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*e, *c);
  ASSERT_TRUE(alloc_->Free(*e).ok());
  EXPECT_EQ(memory_->allocs, 2);
  alloc_->ReleasePool(keep);
  alloc_->ReleasePool(lend);
  EXPECT_EQ(memory_->frees, 2);
  EXPECT_TRUE(memory_->live.empty());
}

TEST_F(ExternalPoolAllocatorTest, BlocksOfAReleasedPoolGoBackWhenFreed) {
  const MempoolId id{0, 3};
  ASSERT_TRUE(alloc_->CreateOrIncrefExternalPool(id, memory_).ok());
  absl::StatusOr<DevicePtr> a = MallocIn(id, 512);
  ASSERT_TRUE(a.ok()) << a.status();
  // The MemPool goes (test_tensor_delete_after_allocator_delete) while
  // its tensor lives: nothing is given back under it.
  alloc_->ReleasePool(id);
  EXPECT_EQ(memory_->frees, 0);
  EXPECT_EQ(SegmentsOf(id), 1u);  // still shown as the pool's
  ASSERT_TRUE(alloc_->CheckInvariants().ok()) << alloc_->CheckInvariants();
  ASSERT_TRUE(alloc_->Free(*a).ok());
  EXPECT_EQ(memory_->frees, 1);
  EXPECT_EQ(Reserved(), 0);
  EXPECT_TRUE(absl::IsNotFound(alloc_->Free(*a)));  // twice
}

// MemPool(allocator, no_split=True): each tensor a segment of the other
// allocator's, of its size rounded to 2 MiB (what NCCL registers as a
// window), not one 20 MiB segment split between them.
TEST_F(ExternalPoolAllocatorTest, NoSplitAsksASegmentPerTensor) {
  const MempoolId id{0, 8};
  ASSERT_TRUE(alloc_->CreateOrIncrefExternalPool(id, memory_).ok());
  ASSERT_TRUE(alloc_->SetPoolNoSplit(id).ok());
  absl::StatusOr<DevicePtr> a = MallocIn(id, 4 * kMiB);
  absl::StatusOr<DevicePtr> b = MallocIn(id, 4 * kMiB);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(memory_->allocs, 2);
  EXPECT_EQ(SegmentsOf(id), 2u);
  EXPECT_EQ(alloc_->PoolReservedBytes(id), 8 * kMiB);
  ASSERT_TRUE(alloc_->Free(*b).ok());
  absl::StatusOr<DevicePtr> c = MallocIn(id, 3 * kMiB + 4096);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, *b);  // the freed segment, whole
  EXPECT_EQ(memory_->allocs, 2);
  for (DevicePtr p : {*a, *c}) ASSERT_TRUE(alloc_->Free(p).ok());
  EXPECT_EQ(alloc_->ReleasePool(id), 8 * kMiB);
  EXPECT_EQ(memory_->frees, 2);
}

TEST_F(ExternalPoolAllocatorTest, AllocatorWithoutMemorySaysWhose) {
  const MempoolId id{0, 4};
  ASSERT_TRUE(alloc_->CreateOrIncrefExternalPool(id, memory_).ok());
  memory_->refuse = true;
  absl::StatusOr<DevicePtr> a = MallocIn(id, 4 * kMiB);
  ASSERT_TRUE(absl::IsResourceExhausted(a.status())) << a.status();
  EXPECT_NE(a.status().message().find("MemPool's allocator returned no"),
            std::string::npos)
      << a.status();
  EXPECT_EQ(alloc_->stats().num_ooms, 1);
  alloc_->ReleasePool(id);
}

TEST_F(ExternalPoolAllocatorTest, AGmlakePoolCannotBecomeAnExternalOne) {
  const MempoolId id{0, 5};
  alloc_->CreateOrIncrefPool(id);
  absl::Status s = alloc_->CreateOrIncrefExternalPool(id, memory_);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(alloc_->PoolUseCount(id), 1);
  EXPECT_TRUE(absl::IsNotFound(alloc_->SetPoolUseOnOom({0, 99}, true)));
  alloc_->ReleasePool(id);
}

TEST_F(ExternalPoolAllocatorTest, RecordStreamHoldsABlockUntilFreedAfter) {
  const MempoolId id{0, 6};
  ASSERT_TRUE(alloc_->CreateOrIncrefExternalPool(id, memory_).ok());
  absl::StatusOr<DevicePtr> a = MallocIn(id, 4 * kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(alloc_->RecordStream(*a, 8).ok());
  ASSERT_TRUE(alloc_->Free(*a).ok());
  absl::StatusOr<DevicePtr> b = MallocIn(id, 4 * kMiB);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, *a);  // reusable once stream 8's work was waited for
  ASSERT_TRUE(alloc_->Free(*b).ok());
  alloc_->ReleasePool(id);
  EXPECT_EQ(memory_->frees, 1);
}

}  // namespace
}  // namespace gmlake
