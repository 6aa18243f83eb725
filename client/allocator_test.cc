// Copyright 2026 The GMLake Authors.
//
// The allocator on the host backend: real memory, real mappings.

#include "client/allocator.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/embedded_lake.h"
#include "common/host_backend.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/time_scale.h"

namespace gmlake {
namespace {

constexpr size_t kMiB = 1 << 20;
constexpr size_t kChunk = 2 * kMiB;

// One segment of b, c and d (one page); a request of c + 1 pages takes c's
// chunks, so c's pages go dormant right after b; b is freed; then a
// request `more` pages larger than b. With the defaults b grows in place
// past the dormant pages: `more` unmaps and maps. With `narrow` (a reach too
// short for the request) a new view maps it all.
struct GrowPastDormant {
  size_t b, c, more;
  const char* narrow;  // GMLAKE_CONF under which b is too short to grow
};

class AllocatorTest : public ::testing::Test {
 protected:
  // A lake of 2 MiB chunks (or, with `sized_by_conf`, of the chunk sizes
  // `conf` sets, as OpenChunkSource makes it).
  void Make(uint64_t lake_capacity, std::string conf = "",
            bool sized_by_conf = false) {
    allocator_.reset();
    lake_.reset();
    auto options = ParseConf(conf);
    ASSERT_TRUE(options.ok()) << options.status();
    HostBackend::Options bo;
    bo.capacity_bytes = size_t{8} << 30;
    auto backend = HostBackend::Create(bo);
    ASSERT_TRUE(backend.ok()) << backend.status();
    host_ = backend->get();
    lake_ = sized_by_conf
                ? std::make_unique<EmbeddedLake>(
                      *std::move(backend), options->chunk_size,
                      ChunkSizing{0, options->max_chunk, options->large_chunk})
                : std::make_unique<EmbeddedLake>(*std::move(backend), 0);
    ASSERT_TRUE(lake_->SetCapacity(0, lake_capacity).ok());
    allocator_ = std::make_unique<Allocator>(lake_.get(), *options);
  }
  void SetUp() override { Make(0); }

  void ExpectGrowthPastDormant(const GrowPastDormant& g);
  // Four threads allocate, check and free at once under a capacity that
  // makes them stitch, with `conf`.
  void StitchFromThreads(const std::string& conf);

  DevicePtr MustMalloc(size_t size, StreamHandle stream = 0) {
    auto p = allocator_->Malloc(size, 0, stream);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : 0;
  }
  uint64_t MapCalls() { return host_->call_stats().Count(VmmCall::kMap); }

  HostBackend* host_ = nullptr;
  std::unique_ptr<EmbeddedLake> lake_;
  std::unique_ptr<Allocator> allocator_;
};

TEST_F(AllocatorTest, MemoryIsUsableAndFreedBlocksAreReusedWithoutDriverCalls) {
  DevicePtr a = MustMalloc(5 * kMiB + 3);
  ASSERT_NE(a, 0u);
  std::memset(reinterpret_cast<void*>(a), 0xab, 5 * kMiB + 3);
  ASSERT_TRUE(allocator_->Free(a).ok());
  const uint64_t maps = MapCalls();
  DevicePtr b = MustMalloc(5 * kMiB);
  EXPECT_EQ(b, a);
  EXPECT_EQ(MapCalls(), maps);
  ASSERT_TRUE(allocator_->Free(b).ok());
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
}

TEST_F(AllocatorTest, SplitsAt512BytesSoA2Point1MiBTensorWastesNothing) {
  DevicePtr a = MustMalloc(2100 * 1024);
  DevicePtr b = MustMalloc(1900 * 1024);
  // The second lives in the first's chunk tail: 2 chunks hold both.
  EXPECT_EQ(b, a + 2100 * 1024);
  AllocatorStats s = allocator_->stats(0);
  EXPECT_EQ(s.reserved_bytes.current, int64_t{2 * kChunk});
  EXPECT_EQ(s.requested_bytes.current, 4000 * 1024);
  ASSERT_TRUE(allocator_->Free(a).ok());
  ASSERT_TRUE(allocator_->Free(b).ok());
}

TEST_F(AllocatorTest, StitchesFreeChunksThatAreNotAdjacent) {
  Make(8 * kChunk);
  // Fill the capacity with 8 one-chunk blocks, free every other one.
  std::vector<DevicePtr> p;
  for (int i = 0; i < 8; ++i) p.push_back(MustMalloc(kChunk));
  for (int i = 0; i < 8; ++i) {
    std::memset(reinterpret_cast<void*>(p[i]), i, kChunk);
  }
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  // 4 free chunks, none adjacent: an 8 MiB request fits only stitched.
  DevicePtr big = MustMalloc(4 * kChunk);
  ASSERT_NE(big, 0u);
  std::memset(reinterpret_cast<void*>(big), 0x5a, 4 * kChunk);
  AllocatorStats s = allocator_->stats(0);
  EXPECT_EQ(s.stitches, 1);
  EXPECT_EQ(s.chunks_stolen, 4);
  EXPECT_EQ(s.reserved_bytes.current, int64_t{8 * kChunk});
  // The live blocks were not touched.
  for (int i = 1; i < 8; i += 2) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(p[i]);
    EXPECT_EQ(bytes[0], i);
    EXPECT_EQ(bytes[kChunk - 1], i);
  }
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  // Now it is really full: a clear out-of-memory error, not a crash.
  auto more = allocator_->Malloc(kChunk, 0, 0);
  ASSERT_FALSE(more.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(more.status()));
  const std::string msg(more.status().message());
  EXPECT_NE(msg.find("tried to allocate 2.00 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("16.00 MiB reserved"), std::string::npos) << msg;
  EXPECT_NE(msg.find("capacity"), std::string::npos) << msg;
  EXPECT_EQ(allocator_->stats(0).num_ooms, 1);
}

TEST_F(AllocatorTest, WithoutStitchingTheSameRequestRunsOutOfMemory) {
  Make(8 * kChunk, "stitch:false");
  std::vector<DevicePtr> p;
  for (int i = 0; i < 8; ++i) p.push_back(MustMalloc(kChunk));
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  EXPECT_FALSE(allocator_->Malloc(4 * kChunk, 0, 0).ok());
}

// Sizes whose 512-byte rounding or page count would wrap are refused, never
// served with aliased memory (issue 10: malloc(SIZE_MAX) returned the
// address the next malloc(4096) returned too).
TEST_F(AllocatorTest, SizesNearSizeMaxAreRefusedNotWrapped) {
  const DevicePtr small = MustMalloc(4096);
  for (size_t size :
       {SIZE_MAX, SIZE_MAX - 510, SIZE_MAX - 511, SIZE_MAX - 1023,
        SIZE_MAX - kChunk + 2, SIZE_MAX / 2 + 1, (size_t{512} << 30) + 1}) {
    absl::StatusOr<DevicePtr> p = allocator_->Malloc(size, 0, 0);
    ASSERT_FALSE(p.ok()) << size << " gave 0x" << std::hex << *p;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(p.status().message().find("large_arena"), std::string::npos)
        << p.status();
  }
  const DevicePtr next = MustMalloc(4096);
  EXPECT_NE(next, small);
  ASSERT_TRUE(allocator_->Free(next).ok());
  ASSERT_TRUE(allocator_->Free(small).ok());
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
}

// A request no arena can hold fails before any address space is reserved
// (issue 10: each failed malloc(2 TiB) left a 1 TiB arena and its ~12 MiB of
// page tables behind, until no arena could be reserved at all).
TEST_F(AllocatorTest, FailedHugeRequestsLeaveNoArenaBehind) {
  Make(0, "large_arena:1TiB");
  const uint64_t reserves = host_->call_stats().Count(VmmCall::kReserve);
  for (int i = 0; i < 128; ++i) {
    absl::StatusOr<DevicePtr> p = allocator_->Malloc(size_t{2} << 40, 0, 0);
    ASSERT_FALSE(p.ok());
    ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted)
        << p.status();
    ASSERT_EQ(host_->call_stats().Count(VmmCall::kReserve), reserves)
        << "request " << i << " reserved address space";
  }
  // Requests the arenas can hold but the lake cannot serve reuse one arena.
  Make(64 * kMiB);
  for (int i = 0; i < 128; ++i) {
    ASSERT_FALSE(allocator_->Malloc(size_t{100} << 30, 0, 0).ok());
  }
  EXPECT_LE(host_->call_stats().Count(VmmCall::kReserve), 1u);
  // And everything still works.
  const DevicePtr a = MustMalloc(4096);
  const DevicePtr b = MustMalloc(40 * kMiB);
  std::memset(reinterpret_cast<void*>(b), 1, 40 * kMiB);
  ASSERT_TRUE(allocator_->Free(a).ok());
  ASSERT_TRUE(allocator_->Free(b).ok());
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
}

TEST_F(AllocatorTest, FreeOfUnknownPointerIsAnErrorNotACrash) {
  DevicePtr a = MustMalloc(1000);
  ASSERT_TRUE(allocator_->Free(a).ok());
  absl::Status twice = allocator_->Free(a);
  EXPECT_TRUE(absl::IsNotFound(twice));
  EXPECT_NE(twice.message().find("freed twice"), std::string::npos);
  EXPECT_TRUE(absl::IsNotFound(allocator_->Free(12345)));
  EXPECT_TRUE(allocator_->Free(0).ok());
  EXPECT_FALSE(allocator_->Malloc(10, 3, 0).ok());  // no device 3
}

// A free that names its device asks that device's allocator only.
TEST(AllocatorDevicesTest, FreeOnADeviceAsksOnlyThatDevice) {
  HostBackend::Options bo;
  bo.devices = 2;
  bo.capacity_bytes = size_t{64} << 20;
  auto backend = HostBackend::Create(bo);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EmbeddedLake lake(*std::move(backend), 0);
  absl::StatusOr<AllocatorOptions> options = ParseConf("");
  ASSERT_TRUE(options.ok());
  Allocator allocator(&lake, *options);
  ASSERT_EQ(allocator.device_count(), 2);
  absl::StatusOr<DevicePtr> p = allocator.Malloc(kMiB, 1, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::Status wrong = allocator.Free(*p, 0);
  EXPECT_TRUE(absl::IsNotFound(wrong)) << wrong;
  EXPECT_NE(wrong.message().find("device 0"), std::string::npos) << wrong;
  EXPECT_EQ(allocator.stats(1).allocated_bytes.current, int64_t{kMiB});
  EXPECT_EQ(allocator.Free(*p, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(allocator.Free(*p, 1).ok());
  EXPECT_EQ(allocator.stats(1).allocated_bytes.current, 0);
  EXPECT_TRUE(allocator.Free(0, 0).ok());
}

TEST_F(AllocatorTest, OtherStreamsReuseOnlyAfterTheirWorkFinished) {
  host_->HoldQueuedWork();  // stream 2's work runs until we say
  DevicePtr a = MustMalloc(4 * kMiB, /*stream=*/1);
  ASSERT_TRUE(allocator_->RecordStream(a, 2).ok());
  ASSERT_TRUE(allocator_->Free(a).ok());
  // Still in use by stream 2's queued work: not handed out again yet.
  DevicePtr b = MustMalloc(4 * kMiB, 1);
  EXPECT_NE(b, a);
  EXPECT_EQ(allocator_->stats(0).active_bytes.current, int64_t{8 * kMiB});
  host_->FinishQueuedWork();
  DevicePtr c = MustMalloc(4 * kMiB, 1);
  EXPECT_EQ(c, a);
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
}

TEST_F(AllocatorTest, EmptyCacheGivesFreeChunksBackToTheLake) {
  DevicePtr a = MustMalloc(64 * kMiB);
  DevicePtr b = MustMalloc(3 * kMiB);
  ASSERT_TRUE(allocator_->Free(a).ok());
  EXPECT_EQ(allocator_->EmptyCache(), 64 * kMiB);
  EXPECT_EQ(allocator_->stats(0).reserved_bytes.current, int64_t{4 * kMiB});
  EXPECT_EQ(lake_->held_bytes(0), 4 * kMiB);
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  ASSERT_TRUE(allocator_->Free(b).ok());
}

// And the lake gives them back to the driver, as PyTorch's empty_cache
// does with cudaFree: torch.cuda.device_memory_used() (NVML) and other
// programs on the GPU see the memory free (PyTorch's test_device_memory_used
// saw nothing come back: the embedded lake kept every chunk for reuse).
TEST_F(AllocatorTest, EmptyCacheGivesTheDevicesMemoryBack) {
  DevicePtr a = MustMalloc(64 * kMiB);
  DevicePtr b = MustMalloc(3 * kMiB);
  EXPECT_EQ(host_->used_bytes(0), 68 * kMiB);
  ASSERT_TRUE(allocator_->Free(a).ok());
  allocator_->EmptyCache();
  EXPECT_EQ(host_->used_bytes(0), 4 * kMiB);
  ASSERT_TRUE(allocator_->Free(b).ok());
  allocator_->EmptyCache();
  EXPECT_EQ(host_->used_bytes(0), 0u);
}

TEST_F(AllocatorTest, SetCapacityBelowWhatIsHeldReturnsTheCache) {
  DevicePtr a = MustMalloc(32 * kMiB);
  ASSERT_TRUE(allocator_->Free(a).ok());
  ASSERT_TRUE(allocator_->SetCapacity(0, 8 * kMiB).ok());
  EXPECT_LE(allocator_->stats(0).reserved_bytes.current, int64_t{8 * kMiB});
  EXPECT_FALSE(allocator_->Malloc(16 * kMiB, 0, 0).ok());
  EXPECT_TRUE(allocator_->Malloc(8 * kMiB, 0, 0).ok());
}

TEST_F(AllocatorTest, SnapshotHasPyTorchsShape) {
  DevicePtr a = MustMalloc(3 * kMiB);
  DevicePtr s = MustMalloc(4096);
  const std::string snap = allocator_->SnapshotJson();
  EXPECT_EQ(snap.rfind("{\"segments\":[", 0), 0u) << snap;
  EXPECT_NE(snap.find("\"segment_type\":\"large\""), std::string::npos);
  EXPECT_NE(snap.find("\"segment_type\":\"small\""), std::string::npos);
  EXPECT_NE(snap.find("\"state\":\"active_allocated\""), std::string::npos);
  EXPECT_NE(snap.find("\"requested_size\":4096"), std::string::npos);
  EXPECT_NE(snap.find("\"device_traces\":[[]]"), std::string::npos);
  const std::string stats = allocator_->stats().ToJson();
  EXPECT_NE(stats.find("\"allocated_bytes.all.current\":3149824"),
            std::string::npos)
      << stats;
  EXPECT_NE(stats.find("\"gmlake.driver_calls.map\":"), std::string::npos);
  // The time in driver calls, for benchmarks (microseconds: PyTorch's
  // memory_stats values are integers). Mapping took some.
  const std::string key = "\"gmlake.driver_us\":";
  const size_t us = stats.find(key);
  ASSERT_NE(us, std::string::npos) << stats;
  EXPECT_GT(std::stoll(stats.substr(us + key.size())), 0) << stats;
  ASSERT_TRUE(allocator_->Free(a).ok());
  ASSERT_TRUE(allocator_->Free(s).ok());
}

TEST_F(AllocatorTest, StatsSplitByPoolWithPyTorchsTotals) {
  DevicePtr small = MustMalloc(4096);
  DevicePtr large = MustMalloc(3 * kMiB);
  AllocatorStats s = allocator_->stats(0);
  EXPECT_EQ(s.allocated_bytes.small.current, 4096);
  EXPECT_EQ(s.allocated_bytes.large.current, int64_t{3 * kMiB});
  EXPECT_EQ(s.allocated_bytes.current, int64_t{3 * kMiB + 4096});
  EXPECT_EQ(s.allocation.small.current, 1);
  EXPECT_EQ(s.allocation.large.current, 1);
  // The small block's chunk is mapped in the small arena; the large one's
  // two chunks in the large arena.
  EXPECT_EQ(s.reserved_bytes.small.current, int64_t{kChunk});
  EXPECT_EQ(s.reserved_bytes.large.current, int64_t{2 * kChunk});
  EXPECT_EQ(s.segment.small.current, 1);
  EXPECT_EQ(s.segment.large.current, 1);
  // The free tails of both segments.
  EXPECT_EQ(s.inactive_split.current, 2);
  ASSERT_TRUE(allocator_->Free(small).ok());
  ASSERT_TRUE(allocator_->Free(large).ok());
  s = allocator_->stats(0);
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.allocated_bytes.allocated, int64_t{3 * kMiB + 4096});
  EXPECT_EQ(s.allocated_bytes.freed, int64_t{3 * kMiB + 4096});
  EXPECT_EQ(s.allocated_bytes.small.freed, 4096);
  EXPECT_EQ(s.allocated_bytes.peak, int64_t{3 * kMiB + 4096});
  EXPECT_EQ(s.inactive_split.current, 2);  // each segment one free block
  allocator_->ResetAccumulated(0);
  s = allocator_->stats(0);
  EXPECT_EQ(s.allocated_bytes.allocated, 0);
  EXPECT_EQ(s.allocated_bytes.small.freed, 0);
  EXPECT_EQ(s.allocated_bytes.peak, int64_t{3 * kMiB + 4096});
  allocator_->ResetPeaks(0);
  EXPECT_EQ(allocator_->stats(0).allocated_bytes.peak, 0);
  const std::string json = s.ToJson();
  for (const char* key :
       {"\"allocated_bytes.small_pool.freed\":0",
        "\"oversize_segments.peak\":0", "\"max_split_size\":-1",
        "\"inactive_split.large_pool.current\":1",
        "\"reserved_bytes.small_pool.current\":2097152",
        "\"num_sync_all_streams\":", "\"num_device_alloc\":"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
}

TEST_F(AllocatorTest, MemoryFractionIsACapacityOfTheDevicesMemory) {
  // The host backend's device has 8 GiB (Make).
  auto uncapped = allocator_->MemoryFraction(0);
  ASSERT_TRUE(uncapped.ok()) << uncapped.status();
  EXPECT_EQ(*uncapped, 1.0);
  ASSERT_TRUE(allocator_->SetMemoryFraction(0, 0.25).ok());
  EXPECT_EQ(lake_->capacity_bytes(0), uint64_t{2} << 30);
  EXPECT_EQ(*allocator_->MemoryFraction(0), 0.25);
  EXPECT_FALSE(allocator_->Malloc(uint64_t{3} << 30, 0, 0).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(allocator_->SetMemoryFraction(0, 1.5)));
  EXPECT_TRUE(absl::IsInvalidArgument(allocator_->SetMemoryFraction(0, -0.1)));
  EXPECT_FALSE(allocator_->SetMemoryFraction(4, 0.5).ok());
  // The fraction set is the fraction read, exactly, as PyTorch's
  // get_per_process_memory_fraction gives it back (its tests print it).
  ASSERT_TRUE(allocator_->SetMemoryFraction(0, 0.3721).ok());
  EXPECT_EQ(*allocator_->MemoryFraction(0), 0.3721);
  // 0 is PyTorch's too: no new memory at all, what is cached still serves.
  const DevicePtr kept = MustMalloc(kChunk);
  ASSERT_TRUE(allocator_->Free(kept).ok());
  ASSERT_TRUE(allocator_->SetMemoryFraction(0, 0.0).ok());
  EXPECT_EQ(*allocator_->MemoryFraction(0), 0.0);
  EXPECT_FALSE(allocator_->Malloc(4 * kChunk, 0, 0).ok());
  ASSERT_TRUE(allocator_->SetMemoryFraction(0, 1.0).ok());
  EXPECT_EQ(*allocator_->MemoryFraction(0), 1.0);
  // A capacity set in bytes is read back as its fraction again.
  ASSERT_TRUE(allocator_->SetCapacity(0, uint64_t{1} << 30).ok());
  EXPECT_EQ(*allocator_->MemoryFraction(0), 0.125);
}

// What memory_viz replays: every event in order, segments mapped before the
// blocks in them are handed out, unmapped only when free, frees completed.
TEST_F(AllocatorTest, HistoryRecordsAllocsFreesMappingsAndOoms) {
  Make(8 * kChunk);
  allocator_->RecordHistory(1000, StackKind::kAll, HistoryContext::kAll,
                            /*clear=*/true);
  std::vector<DevicePtr> p;
  for (int i = 0; i < 8; ++i) p.push_back(MustMalloc(kChunk, /*stream=*/7));
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  DevicePtr big = MustMalloc(4 * kChunk, 7);  // stitched
  EXPECT_FALSE(allocator_->Malloc(kChunk, 0, 7).ok());

  const nlohmann::json snap = nlohmann::json::parse(allocator_->SnapshotJson());
  const nlohmann::json& trace = snap["device_traces"][0];
  std::map<std::string, int> count;
  uint64_t mapped = 0, unmapped = 0;
  int64_t last_time = 0;
  for (const auto& e : trace) {
    const std::string action = e["action"];
    ++count[action];
    EXPECT_EQ(e["stream"], 7u);
    EXPECT_GE(e["time_us"].get<int64_t>(), last_time);
    last_time = e["time_us"];
    EXPECT_FALSE(e["frames"].empty()) << e;
    if (action == "segment_map") mapped += e["size"].get<uint64_t>();
    if (action == "segment_unmap") unmapped += e["size"].get<uint64_t>();
    if (action == "oom") {
      EXPECT_EQ(e["size"], kChunk);
    }
  }
  EXPECT_EQ(count["alloc"], 9);
  EXPECT_EQ(count["free_requested"], 4);
  EXPECT_EQ(count["free_completed"], 4);
  EXPECT_EQ(count["oom"], 1);
  EXPECT_EQ(unmapped, 4 * kChunk);  // the stitch moved four chunks
  EXPECT_EQ(mapped - unmapped, 8 * kChunk);
  EXPECT_EQ(trace.front()["action"], "segment_map");
  ASSERT_TRUE(allocator_->Free(big).ok());

  // A ring of the last entries; off again costs nothing and records nothing.
  allocator_->RecordHistory(3, StackKind::kNone, HistoryContext::kAll,
                            /*clear=*/false);
  const nlohmann::json last =
      nlohmann::json::parse(allocator_->SnapshotJson())["device_traces"][0];
  ASSERT_EQ(last.size(), 3u);
  EXPECT_EQ(last.back()["action"], "free_completed");
  EXPECT_EQ(last.back()["addr"], big);
  allocator_->RecordHistory(0, StackKind::kNone, HistoryContext::kAll,
                            /*clear=*/true);
  MustMalloc(kChunk, 7);
  EXPECT_TRUE(
      nlohmann::json::parse(allocator_->SnapshotJson())["device_traces"][0]
          .empty());
}

// PyTorch's enabled="state": no history, and each live block keeps the
// stack of the malloc that handed it out (blocks[].frames), until freed or
// recording stops.
TEST_F(AllocatorTest, LiveBlocksKeepTheirStacksWithoutAHistory) {
  Make(8 * kChunk);
  allocator_->RecordHistory(0, StackKind::kAll, HistoryContext::kState,
                            /*clear=*/true);
  DevicePtr kept = MustMalloc(3 * 4096, 7);
  allocator_->RecordHistory(0, StackKind::kNone, HistoryContext::kNone,
                            /*clear=*/true);
  DevicePtr later = MustMalloc(5 * 4096, 7);
  const nlohmann::json snap = nlohmann::json::parse(allocator_->SnapshotJson());
  EXPECT_TRUE(snap["device_traces"][0].empty());
  int seen = 0;
  for (const auto& seg : snap["segments"]) {
    for (const auto& b : seg["blocks"]) {
      if (b["address"] == kept) {
        ++seen;
        EXPECT_FALSE(b["frames"].empty()) << b;
      }
      if (b["address"] == later) {
        ++seen;
        EXPECT_TRUE(b["frames"].empty()) << b;
      }
      if (b["state"] == "inactive") {
        EXPECT_TRUE(b["frames"].empty()) << b;
      }
    }
  }
  EXPECT_EQ(seen, 2);
  ASSERT_TRUE(allocator_->Free(kept).ok());
  ASSERT_TRUE(allocator_->Free(later).ok());
}

// PyTorch's context argument: which events carry their stack ("alloc": the
// allocations and what they map, "all": the frees too, "state": none in the
// history); and _set_memory_metadata's string on every event recorded while
// it is set.
TEST_F(AllocatorTest, HistoryContextPicksWhichEventsCarryStacks) {
  Make(8 * kChunk);
  struct Case {
    HistoryContext context;
    bool alloc_frames, free_frames;
  };
  for (const Case& c : {Case{HistoryContext::kAlloc, true, false},
                        Case{HistoryContext::kAll, true, true},
                        Case{HistoryContext::kState, false, false}}) {
    allocator_->RecordHistory(1000, StackKind::kAll, c.context,
                              /*clear=*/true);
    allocator_->SetHistoryMetadata("step 7");
    DevicePtr p = MustMalloc(kChunk, 7);
    allocator_->SetHistoryMetadata("");
    ASSERT_TRUE(allocator_->Free(p).ok());
    const nlohmann::json trace =
        nlohmann::json::parse(allocator_->SnapshotJson())["device_traces"][0];
    int allocs = 0, frees = 0;
    for (const auto& e : trace) {
      const std::string action = e["action"];
      if (action == "alloc" || action == "segment_map") {
        ++allocs;
        EXPECT_EQ(!e["frames"].empty(), c.alloc_frames) << e;
        EXPECT_EQ(e["user_metadata"], "step 7") << e;
      }
      if (action == "free_requested" || action == "free_completed") {
        ++frees;
        EXPECT_EQ(!e["frames"].empty(), c.free_frames) << e;
        EXPECT_EQ(e["user_metadata"], "") << e;
      }
    }
    EXPECT_GE(allocs, 1);
    EXPECT_EQ(frees, 2);
  }
  allocator_->RecordHistory(0, StackKind::kNone, HistoryContext::kNone,
                            /*clear=*/true);
}

// Random mallocs and frees on several streams, under a capacity that forces
// stitching: after every step no two live blocks overlap, the books
// balance, and every live allocation still holds the bytes written to it.
// Random traffic on three streams under a capacity of 96 pages, every
// block's data and the books checked at every step.
void RandomTraffic(Allocator* allocator_) {
  std::mt19937_64 rng(20261130);
  struct Live {
    size_t size;
    uint8_t tag;
  };
  std::map<DevicePtr, Live> live;
  uint64_t live_bytes = 0;
  int ooms = 0;
  for (int step = 0; step < 4000; ++step) {
    const bool alloc = live.empty() || rng() % 100 < 55;
    if (alloc) {
      size_t size;
      switch (rng() % 4) {
        case 0:
          size = 1 + rng() % 4096;
          break;  // small
        case 1:
          size = 1 + rng() % kMiB;
          break;  // small
        case 2:
          size = kMiB + rng() % (6 * kMiB);
          break;  // a few chunks
        default:
          size = rng() % (24 * kMiB) + 1;
          break;  // many chunks
      }
      const StreamHandle stream = rng() % 3;
      auto p = allocator_->Malloc(size, 0, stream);
      if (!p.ok()) {
        ASSERT_TRUE(absl::IsResourceExhausted(p.status())) << p.status();
        ++ooms;
        continue;
      }
      // No overlap with any live block.
      auto next = live.lower_bound(*p);
      if (next != live.end()) {
        ASSERT_LE(*p + size, next->first);
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second.size, *p);
      }
      const uint8_t tag = static_cast<uint8_t>(rng());
      std::memset(reinterpret_cast<void*>(*p), tag, size);
      live[*p] = {size, tag};
      live_bytes += size;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      const auto* bytes = reinterpret_cast<const uint8_t*>(it->first);
      for (size_t off : {size_t{0}, it->second.size / 2, it->second.size - 1}) {
        ASSERT_EQ(bytes[off], it->second.tag) << "step " << step;
      }
      ASSERT_TRUE(allocator_->Free(it->first).ok());
      live_bytes -= it->second.size;
      live.erase(it);
    }
    ASSERT_TRUE(allocator_->CheckInvariants().ok())
        << "step " << step << ": " << allocator_->CheckInvariants();
    ASSERT_EQ(allocator_->stats(0).requested_bytes.current,
              static_cast<int64_t>(live_bytes));
  }
  // Every block checked in full at the end.
  for (const auto& [ptr, l] : live) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(ptr);
    for (size_t i = 0; i < l.size; i += 4093) ASSERT_EQ(bytes[i], l.tag);
    ASSERT_TRUE(allocator_->Free(ptr).ok());
  }
  AllocatorStats s = allocator_->stats(0);
  EXPECT_GT(s.stitches, 0);  // the capacity made it stitch
  // Stitched chunks were taken back where they had been mapped before, and
  // every tag above stayed intact: no chunk was live at two addresses.
  EXPECT_GT(s.reactivations, 0);
  EXPECT_LE(s.reserved_bytes.peak, int64_t{96 * kChunk});
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  ::testing::Test::RecordProperty("ooms", ooms);
  ::testing::Test::RecordProperty("reactivations", s.reactivations);
  ::testing::Test::RecordProperty("covers", s.covers);
}

TEST_F(AllocatorTest, PropertyRandomTrafficKeepsDataAndBooksIntact) {
  Make(96 * kChunk);
  RandomTraffic(allocator_.get());
}

// The same with chunks of two pages, covering every rest that a larger
// free chunk can: mappings grown by a cover's extra pages before or after
// them keep the data and the books.
TEST_F(AllocatorTest, PropertyRandomTrafficWithCoversKeepsDataAndBooks) {
  Make(96 * kChunk, "max_chunk:4MiB,cover_after:0", /*sized_by_conf=*/true);
  RandomTraffic(allocator_.get());
  EXPECT_GT(allocator_->stats(0).covers, 0);
}

// The same with dormant pages unmapped on the allocator's thread, the bound
// low enough that it runs every few slow paths, beside the traffic.
TEST_F(AllocatorTest, PropertyRandomTrafficWithUnmapThreadKeepsDataAndBooks) {
  Make(96 * kChunk, "unmap_thread:1,max_dormant:8MiB");
  RandomTraffic(allocator_.get());
}

}  // namespace
}  // namespace gmlake

namespace gmlake {
namespace {

// Several threads allocate, write, check and free at once on their own
// streams and a shared one, under a capacity that forces stitching, with
// events that take a while (so slow paths run with the lock down while
// others allocate). Every thread's data stays intact, no two live blocks
// overlap, and the books balance afterwards.
// A malloc that takes another stream's free block records an event on
// that stream with the lock down (HandOver). Other threads meanwhile make
// pools for new streams, which can move the allocator's list of pools: the
// slow path must not read that list while its lock is down. Found as a
// SIGSEGV in TakeFromOtherStream (1 of 425 runs of the suite beside a
// build, ThreadsStitchingAtOnceKeepDataAndBooks); here the gate holds the
// slow path in that window while 64 new streams arrive, which
// ThreadSanitizer reports as a use after free without the fix.
TEST_F(AllocatorTest, NewStreamsWhileASlowPathHandsABlockOver) {
  Make(256 * kChunk);
  auto first = allocator_->Malloc(8 * kMiB, 0, /*stream=*/1);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(allocator_->Free(*first).ok());
  // Relaxed atomics, not a mutex: the gate must not order the two threads
  // for ThreadSanitizer, as nothing orders them outside this test.
  std::atomic<bool> entered{false}, release{false};
  host_->SetRecordEventGate([&](StreamHandle s) {
    if (s != 1 || entered.exchange(true, std::memory_order_relaxed)) return;
    while (!release.load(std::memory_order_relaxed)) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  absl::StatusOr<DevicePtr> taken;
  std::thread slow([&] { taken = allocator_->Malloc(8 * kMiB, 0, 2); });
  const absl::Time deadline = absl::Now() + testing::Scaled(absl::Seconds(20));
  while (!entered.load(std::memory_order_relaxed) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(entered.load(std::memory_order_relaxed));
  // Pools for 64 new streams, each request larger than any other stream's
  // free block (so none records an event): the list of pools grows and
  // moves.
  std::vector<DevicePtr> held;
  for (StreamHandle s = 100; s < 164; ++s) {
    auto p = allocator_->Malloc(3 * kMiB, 0, s);
    ASSERT_TRUE(p.ok()) << p.status();
    held.push_back(*p);
  }
  release.store(true, std::memory_order_relaxed);
  slow.join();
  // The gate reads this test's locals: off before they go (the allocator
  // records on stream 1 again when it is destroyed, after the test body).
  host_->SetRecordEventGate(nullptr);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, *first);  // stream 1's block, handed over
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  ASSERT_TRUE(allocator_->Free(*taken).ok());
  for (DevicePtr p : held) ASSERT_TRUE(allocator_->Free(p).ok());
}

// Threads that find no room at once reserve one arena between them, not
// one each: an arena is 512 GiB of address space, and under
// ThreadSanitizer (whose heap holds few such ranges) all reservations but
// the first failed, so 8 threads starting together ran out of memory with
// the lake all free. The gate holds every reservation until all 8
// threads could have made theirs.
TEST_F(AllocatorTest, ThreadsFindingNoRoomAtOnceReserveOneArena) {
  Make(96 * kMiB);
  constexpr int kThreads = 8;
  constexpr size_t kLargeArena = size_t{512} << 30;  // the default
  // Relaxed atomics, not a mutex: the gate must not order the threads.
  std::atomic<int> entered{0};
  std::atomic<bool> release{false};
  host_->SetReserveGate([&](size_t size) {
    if (size != kLargeArena) return;
    entered.fetch_add(1, std::memory_order_relaxed);
    while (!release.load(std::memory_order_relaxed)) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  const uint64_t reserves = host_->call_stats().Count(VmmCall::kReserve);
  std::vector<absl::StatusOr<DevicePtr>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(
        [&, t] { got[t] = allocator_->Malloc(4 * kMiB, 0, /*stream=*/1 + t); });
  }
  const absl::Time deadline =
      absl::Now() + testing::Scaled(absl::Milliseconds(500));
  while (entered.load(std::memory_order_relaxed) < kThreads &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  release.store(true, std::memory_order_relaxed);
  for (auto& t : threads) t.join();
  host_->SetReserveGate(nullptr);
  EXPECT_EQ(entered.load(), 1);
  EXPECT_EQ(host_->call_stats().Count(VmmCall::kReserve) - reserves, 1u);
  for (auto& p : got) {
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(allocator_->Free(*p).ok());
  }
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
}

void AllocatorTest::StitchFromThreads(const std::string& conf) {
  Make(160 * kChunk, conf);
  host_->set_event_delay(absl::Microseconds(200));
  Mutex mu;
  std::map<DevicePtr, size_t> all_live;  // guarded by mu
  std::atomic<int> failures{0};
  std::atomic<bool> stop{false};
  auto worker = [&](int id) {
    std::mt19937_64 rng(id);
    std::vector<std::tuple<DevicePtr, size_t, uint8_t>> mine;
    for (int step = 0; step < 1500; ++step) {
      if (mine.empty() || rng() % 100 < 55) {
        const size_t size =
            rng() % 3 == 0 ? 1 + rng() % kMiB : kMiB + rng() % (10 * kMiB);
        const StreamHandle stream = rng() % 2 ? 10 + id : 1;
        auto p = allocator_->Malloc(size, 0, stream);
        if (!p.ok()) {
          if (!absl::IsResourceExhausted(p.status())) ++failures;
          continue;
        }
        {
          MutexLock lock(&mu);
          auto next = all_live.lower_bound(*p);
          if (next != all_live.end() && *p + size > next->first) ++failures;
          if (next != all_live.begin() &&
              std::prev(next)->first + std::prev(next)->second > *p) {
            ++failures;
          }
          all_live[*p] = size;
        }
        const uint8_t tag = static_cast<uint8_t>(rng());
        std::memset(reinterpret_cast<void*>(*p), tag, size);
        mine.emplace_back(*p, size, tag);
      } else {
        const size_t i = rng() % mine.size();
        auto [ptr, size, tag] = mine[i];
        const auto* bytes = reinterpret_cast<const uint8_t*>(ptr);
        if (bytes[0] != tag || bytes[size / 2] != tag ||
            bytes[size - 1] != tag) {
          ++failures;
        }
        {
          MutexLock lock(&mu);
          all_live.erase(ptr);
        }
        if (!allocator_->Free(ptr).ok()) ++failures;
        mine[i] = mine.back();
        mine.pop_back();
      }
    }
    for (auto& [ptr, size, tag] : mine) {
      {
        MutexLock lock(&mu);
        all_live.erase(ptr);
      }
      if (!allocator_->Free(ptr).ok()) ++failures;
    }
  };
  // Reads the books while the others work: they must hold at every moment
  // the lock is free.
  std::thread checker([&] {
    while (!stop.load()) {
      if (!allocator_->CheckInvariants().ok()) ++failures;
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  stop = true;
  checker.join();
  EXPECT_EQ(failures.load(), 0);
  AllocatorStats s = allocator_->stats(0);
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_GT(s.stitches, 0);
  EXPECT_LE(s.reserved_bytes.peak, int64_t{160 * kChunk});
  absl::Status books = allocator_->CheckInvariants();
  EXPECT_TRUE(books.ok()) << books;
}

TEST_F(AllocatorTest, ThreadsStitchingAtOnceKeepDataAndBooks) {
  StitchFromThreads("");
}

// The same with dormant pages unmapped on the allocator's thread as well,
// the bound low enough that it runs beside every thread's slow paths.
TEST_F(AllocatorTest, ThreadsStitchingBesideTheUnmapThreadKeepDataAndBooks) {
  StitchFromThreads("unmap_thread:1,max_dormant:8MiB");
}

}  // namespace
}  // namespace gmlake

namespace gmlake {
namespace {

// The slow path waits for streams with the allocator's lock down: another
// thread's malloc from cached memory goes through meanwhile instead of
// waiting behind the driver. Here the slow path finds the lake full and
// waits for the streams (the memory freed with record_stream is held back
// for stream 2's work, which runs until the test lets it finish).
TEST_F(AllocatorTest, FastPathDoesNotWaitBehindASlowPathsDriverCalls) {
  Make(4 * kChunk);
  // The small pool's chunk, partly live; the freed block is what the fast
  // path will reuse.
  DevicePtr warm = MustMalloc(4096, /*stream=*/7);
  DevicePtr keep = MustMalloc(4096, /*stream=*/7);
  ASSERT_TRUE(allocator_->Free(warm).ok());
  DevicePtr a = MustMalloc(3 * kChunk, /*stream=*/1);  // the lake is full
  host_->HoldQueuedWork();
  ASSERT_TRUE(allocator_->RecordStream(a, 2).ok());
  ASSERT_TRUE(allocator_->Free(a).ok());  // held back for stream 2
  std::thread slow([&] {
    auto big = allocator_->Malloc(3 * kChunk, 0, /*stream=*/5);
    EXPECT_TRUE(big.ok()) << big.status();
  });
  // Until the slow path is blocked on the streams (only a hang takes long).
  const absl::Time patience = absl::Now() + absl::Seconds(60);
  while (host_->event_waiters() == 0 && absl::Now() < patience) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const bool slow_waits = host_->event_waiters() == 1;
  // A malloc from the cache now must not wait for the slow path: it would
  // wait until the test gives up, as the streams finish only after it.
  DevicePtr fast = 0;
  Notification served;
  std::thread fast_thread([&] {
    fast = MustMalloc(4096, 7);
    served.Notify();
  });
  const bool waited = !served.WaitForNotificationWithTimeout(absl::Seconds(60));
  const int waiters = host_->event_waiters();
  host_->FinishQueuedWork();
  fast_thread.join();
  slow.join();
  EXPECT_TRUE(slow_waits) << "the slow path never waited for the streams";
  EXPECT_FALSE(waited) << "the fast path waited behind the slow path";
  EXPECT_EQ(waiters, 1) << "the slow path stopped waiting before the end";
  EXPECT_EQ(fast, warm);  // served from the cache: the fast path
  EXPECT_GE(allocator_->stats(0).host_waits, 1);
  ASSERT_TRUE(allocator_->Free(keep).ok());
}

// A stitch maps the chunks it takes a second time, where they are needed,
// and leaves them mapped where they were freed, for the kernels still
// queued there; those old pages are unmapped once the stream has finished
// with them. So a program on one stream never waits for the GPU in malloc.
TEST_F(AllocatorTest, StitchingOnOneStreamNeverWaitsForTheGpu) {
  Make(8 * kChunk, "max_chunk:2MiB");
  std::vector<DevicePtr> p;
  for (int i = 0; i < 8; ++i) p.push_back(MustMalloc(kChunk, /*stream=*/3));
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  // The stream's queued work finishes only 300 ms from any event's record.
  host_->set_event_delay(absl::Milliseconds(300));
  const VmmCallSnapshot before = host_->call_stats();
  DevicePtr big = MustMalloc(4 * kChunk, 3);
  ASSERT_NE(big, 0u);
  const VmmCallSnapshot d = host_->call_stats() - before;
  AllocatorStats s = allocator_->stats(0);
  EXPECT_EQ(s.stitches, 1);
  EXPECT_EQ(s.host_waits, 0);
  EXPECT_EQ(d.Count(VmmCall::kEventSync), 0u);
  EXPECT_EQ(d.Count(VmmCall::kUnmap), 0u) << "moved, not aliased";
  EXPECT_EQ(s.dormant_chunks, 4);
  // The freed blocks' pages still reach the same memory: an alias.
  std::memset(reinterpret_cast<void*>(big), 0x5a, 4 * kChunk);
  for (int i = 0; i < 8; i += 2) {
    EXPECT_EQ(reinterpret_cast<const uint8_t*>(p[i])[kChunk / 2], 0x5a) << i;
  }
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  ASSERT_TRUE(allocator_->Free(big).ok());
  for (int i = 1; i < 8; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  // Giving memory back waits for the stream and unmaps the old pages first.
  EXPECT_EQ(allocator_->EmptyCache(), 8 * kChunk);
  s = allocator_->stats(0);
  EXPECT_EQ(s.dormant_chunks, 0);
  EXPECT_EQ((host_->call_stats() - before).Count(VmmCall::kUnmap), 8u + 4u);
  EXPECT_EQ(lake_->held_bytes(0), 0u);
}

// Dormant pages beyond the bound are unmapped only once every stream the
// device has seen is past them: a fence of events, queried, never waited
// for. Memory used on a second stream without record_stream (FSDP2's
// gradients read by the optimizer) is safe from an unmap under a kernel.
TEST_F(AllocatorTest, DormantPagesAreUnmappedOnlyPastEveryStream) {
  Make(32 * kChunk, "max_chunk:2MiB,grow_slack:0,max_dormant:2MiB");
  std::vector<DevicePtr> p;
  for (int i = 0; i < 8; ++i) p.push_back(MustMalloc(kChunk, /*stream=*/1));
  // Stream 2 exists too (it could be using stream 1's memory).
  const DevicePtr on_two = MustMalloc(4096, /*stream=*/2);
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  host_->set_event_delay(absl::Milliseconds(300));
  std::vector<DevicePtr> more{on_two};
  more.push_back(MustMalloc(4 * kChunk, 1));  // 4 chunks go dormant
  EXPECT_EQ(allocator_->stats(0).dormant_chunks, 4);
  const VmmCallSnapshot before = host_->call_stats();
  // Over the bound (one chunk): the next slow path records the fence on
  // both streams, the one after finds it not passed yet. Nothing is
  // unmapped, and nobody waits.
  more.push_back(MustMalloc(3 * kChunk, 1));
  more.push_back(MustMalloc(3 * kChunk, 1));
  VmmCallSnapshot d = host_->call_stats() - before;
  EXPECT_EQ(d.Count(VmmCall::kUnmap), 0u);
  EXPECT_EQ(d.Count(VmmCall::kEventSync), 0u);
  EXPECT_EQ(d.Count(VmmCall::kEventRecord), 2u) << "one event per stream";
  EXPECT_EQ(allocator_->stats(0).dormant_chunks, 4);
  // Once both streams are past the fence, the next slow path unmaps them.
  absl::SleepFor(absl::Milliseconds(350));
  more.push_back(MustMalloc(3 * kChunk, 1));
  d = host_->call_stats() - before;
  EXPECT_EQ(d.Count(VmmCall::kUnmap), 4u);
  EXPECT_EQ(d.Count(VmmCall::kEventSync), 0u);
  EXPECT_EQ(allocator_->stats(0).dormant_chunks, 0);
  EXPECT_EQ(allocator_->stats(0).host_waits, 0);
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  for (DevicePtr m : more) ASSERT_TRUE(allocator_->Free(m).ok());
}

// With unmap_thread, the same unmaps happen on the allocator's thread: the
// malloc that finds dormant pages over the bound only asks for them.
TEST_F(AllocatorTest, UnmapThreadUnmapsDormantPagesOffTheMallocThread) {
  Make(32 * kChunk,
       "max_chunk:2MiB,grow_slack:0,max_dormant:2MiB,"
       "unmap_thread:1");
  std::vector<DevicePtr> p;
  for (int i = 0; i < 8; ++i) p.push_back(MustMalloc(kChunk, /*stream=*/1));
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  std::vector<DevicePtr> more{MustMalloc(4 * kChunk, 1)};  // 4 go dormant
  ASSERT_EQ(allocator_->stats(0).dormant_chunks, 4);
  const VmmCallSnapshot before = host_->call_stats();
  auto calls = [&](VmmCall call) {
    return (host_->call_stats() - before).Count(call);
  };
  // The thread works beside the test: wait for it, within a bound.
  auto eventually = [](const std::function<bool()>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!done() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  };
  // Over the bound: the thread records the fence, then, asked again by the
  // next slow path, finds it passed and unmaps.
  more.push_back(MustMalloc(3 * kChunk, 1));
  eventually([&] { return calls(VmmCall::kEventRecord) >= 1; });
  EXPECT_EQ(calls(VmmCall::kEventRecord), 1u);
  more.push_back(MustMalloc(3 * kChunk, 1));
  eventually([&] { return allocator_->stats(0).dormant_chunks == 0; });
  EXPECT_EQ(calls(VmmCall::kUnmap), 4u);
  EXPECT_EQ(allocator_->stats(0).dormant_chunks, 0);
  EXPECT_EQ(calls(VmmCall::kEventSync), 0u);
  EXPECT_EQ(allocator_->stats(0).host_waits, 0);
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  for (DevicePtr m : more) ASSERT_TRUE(allocator_->Free(m).ok());
  for (int i = 1; i < 8; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  allocator_->EmptyCache();
  EXPECT_EQ(lake_->held_bytes(0), 0u);
}

void AllocatorTest::ExpectGrowthPastDormant(const GrowPastDormant& g) {
  for (const char* reach : {"", g.narrow}) {
    SCOPED_TRACE(reach);
    Make(2 * (g.b + g.c + g.more) * kChunk,
         absl::StrCat("max_chunk:2MiB,grow_slack:0,", reach));
    const DevicePtr b = MustMalloc(g.b * kChunk);
    const DevicePtr c = MustMalloc(g.c * kChunk);
    const DevicePtr d = MustMalloc(kChunk);
    ASSERT_EQ(c, b + g.b * kChunk);
    ASSERT_EQ(d, c + g.c * kChunk);
    // A request c cannot hold takes c's chunks: its pages go dormant, and
    // b's segment now ends where they begin.
    ASSERT_TRUE(allocator_->Free(c).ok());
    const DevicePtr e = MustMalloc((g.c + 1) * kChunk);
    ASSERT_EQ(allocator_->stats(0).dormant_chunks, static_cast<int64_t>(g.c));
    ASSERT_TRUE(allocator_->Free(b).ok());
    const VmmCallSnapshot before = host_->call_stats();
    const DevicePtr grown = MustMalloc((g.b + g.more) * kChunk);
    const VmmCallSnapshot calls = host_->call_stats() - before;
    if (std::string(reach).empty()) {
      EXPECT_EQ(grown, b) << "grown in place";
      EXPECT_EQ(calls.Count(VmmCall::kMap), g.more);
      EXPECT_EQ(calls.Count(VmmCall::kUnmap), g.more);
      EXPECT_EQ(allocator_->stats(0).dormant_chunks,
                static_cast<int64_t>(g.c - g.more));
    } else {
      EXPECT_NE(grown, b) << "a new view";
      EXPECT_EQ(calls.Count(VmmCall::kMap), g.b + g.more);
    }
    EXPECT_EQ(calls.Count(VmmCall::kEventSync), 0u);
    EXPECT_EQ(allocator_->stats(0).host_waits, 0);
    EXPECT_TRUE(allocator_->CheckInvariants().ok());
    for (DevicePtr p : {grown, d, e}) ASSERT_TRUE(allocator_->Free(p).ok());
  }
}

// A tensor that grows a little (a KV cache, a token a step) is served by
// growing the free block it was in, when the old pages of chunks a stitch
// took stand right after it: they are unmapped (the streams are past them)
// and one page is mapped, not a fresh view of every page.
TEST_F(AllocatorTest, AFreeBlockGrowsInPlacePastDormantPages) {
  ExpectGrowthPastDormant({20, 4, 1, "grow_reach:0"});
}

// Further than a page: a large free block short by a quarter of the
// request still grows in place past the dormant pages in its way (the
// default grow_reach reaches 40% of a request of 64 MiB or more), mapping
// the quarter, not a fresh view of it all (84 MiB: 10 pages, not 42). The
// recorded 320-token decode makes 19% fewer driver calls so
// (docs/design.md, "How far a block grows in place").
TEST_F(AllocatorTest, AFreeBlockShortByAQuarterGrowsInPlace) {
  ExpectGrowthPastDormant({32, 12, 10, "grow_reach:0.0625"});
}

// Memory last used on another stream is handed over on the device: the
// requesting stream waits for the other's work, the host does not.
TEST_F(AllocatorTest, StitchingAcrossStreamsWaitsOnTheDeviceNotTheHost) {
  Make(8 * kChunk);
  std::vector<DevicePtr> p;
  for (int i = 0; i < 8; ++i) p.push_back(MustMalloc(kChunk, /*stream=*/1));
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  host_->set_event_delay(absl::Milliseconds(300));
  const VmmCallSnapshot before = host_->call_stats();
  DevicePtr big = MustMalloc(4 * kChunk, /*stream=*/2);
  ASSERT_NE(big, 0u);
  const VmmCallSnapshot d = host_->call_stats() - before;
  EXPECT_EQ(allocator_->stats(0).host_waits, 0);
  EXPECT_EQ(d.Count(VmmCall::kEventSync), 0u);
  EXPECT_EQ(d.Count(VmmCall::kStreamWait), 1u);
  // A whole free block of stream 1, reused on stream 2: the same.
  ASSERT_TRUE(allocator_->Free(p[1]).ok());
  DevicePtr again = MustMalloc(kChunk, 2);
  EXPECT_EQ(again, p[1]);
  EXPECT_EQ(allocator_->stats(0).host_waits, 0);
  EXPECT_EQ((host_->call_stats() - before).Count(VmmCall::kStreamWait), 2u);
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
}

// Issue 10, stranded memory: a chunk shared by free blocks of two streams
// is neither stitched nor returned while they stay apart.
TEST_F(AllocatorTest, EmptyCacheReturnsChunksSharedByTwoStreams) {
  DevicePtr p = MustMalloc(5 * kMiB / 2, /*stream=*/1);
  DevicePtr q = MustMalloc(5 * kMiB / 4, /*stream=*/2);
  EXPECT_EQ(q, p + 5 * kMiB / 2) << "q takes p's free tail";
  ASSERT_TRUE(allocator_->Free(p).ok());
  ASSERT_TRUE(allocator_->Free(q).ok());
  EXPECT_EQ(allocator_->EmptyCache(), 2 * kChunk);
  EXPECT_EQ(allocator_->stats(0).reserved_bytes.current, 0);
  EXPECT_EQ(lake_->held_bytes(0), 0u);
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
}

TEST_F(AllocatorTest, ChunksSharedByTwoStreamsServeALargeRequest) {
  Make(64 * kMiB);
  std::vector<DevicePtr> p;
  for (int i = 0; i < 16; ++i) {
    p.push_back(MustMalloc(5 * kMiB / 2, /*stream=*/1));
    p.push_back(MustMalloc(5 * kMiB / 4, /*stream=*/2));
  }
  EXPECT_EQ(allocator_->stats(0).reserved_bytes.current, int64_t{64 * kMiB});
  for (DevicePtr x : p) ASSERT_TRUE(allocator_->Free(x).ok());
  auto big = allocator_->Malloc(48 * kMiB, 0, 1);
  ASSERT_TRUE(big.ok()) << big.status();
  std::memset(reinterpret_cast<void*>(*big), 1, 48 * kMiB);
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  ASSERT_TRUE(allocator_->Free(*big).ok());
}

// Issue 10, spurious out-of-memory: threads on their own streams, live
// memory at most half the capacity, never run out.
TEST_F(AllocatorTest, ThreadsOnTheirOwnStreamsDoNotRunOutWithHalfFree) {
  Make(96 * kMiB);
  // Each stream's work takes a while: stitches and hand-overs are in flight
  // longer, as on a busy GPU.
  host_->set_event_delay(absl::Milliseconds(2));
  constexpr int kThreads = 8;
  std::atomic<int> ooms{0};
  Mutex first_oom_mu;
  absl::Status first_oom;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::uniform_int_distribution<size_t> size(kMiB / 2, 3 * kMiB);
      std::vector<DevicePtr> live;
      for (int i = 0; i < 300; ++i) {
        if (live.size() == 2) {
          ASSERT_TRUE(allocator_->Free(live[i % 2]).ok());
          live.erase(live.begin() + i % 2);
        }
        auto p = allocator_->Malloc(size(rng), 0, /*stream=*/10 + t);
        if (!p.ok()) {
          if (ooms++ == 0) {
            MutexLock lock(&first_oom_mu);
            first_oom = p.status();
          }
          continue;
        }
        live.push_back(*p);
      }
      for (DevicePtr p : live) ASSERT_TRUE(allocator_->Free(p).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ooms.load(), 0) << first_oom;
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  allocator_->EmptyCache();
  EXPECT_EQ(allocator_->stats(0).reserved_bytes.current, 0);
}
}  // namespace
}  // namespace gmlake
namespace gmlake {
namespace {

// Memory freed while another stream still used it (record_stream) comes
// back to its own stream once that work is done, even when the lake is
// full: the retry after waiting looks among the blocks that came back.
TEST_F(AllocatorTest, HeldBackMemoryServesItsOwnStreamWhenTheLakeIsFull) {
  Make(4 * kChunk);
  DevicePtr keep = MustMalloc(4096, /*stream=*/7);
  DevicePtr a = MustMalloc(3 * kChunk, /*stream=*/1);  // the lake is full
  // Stream 2's work finishes a moment after the free, not at once.
  host_->set_event_delay(absl::Milliseconds(50));
  ASSERT_TRUE(allocator_->RecordStream(a, 2).ok());
  ASSERT_TRUE(allocator_->Free(a).ok());
  for (size_t size : {3 * kChunk, kChunk}) {
    absl::StatusOr<DevicePtr> again = allocator_->Malloc(size, 0, 1);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, a);
    ASSERT_TRUE(allocator_->RecordStream(*again, 2).ok());
    ASSERT_TRUE(allocator_->Free(*again).ok());
  }
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  ASSERT_TRUE(allocator_->Free(keep).ok());
}

}  // namespace
}  // namespace gmlake

namespace gmlake {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

// Issue 17: a request must use whatever the process caches before it fails,
// whatever arena, chunk size or stream holds it. Here the free cache is in
// 4 MiB chunks of the large arena of stream 1, the request a small one
// (one 2 MiB page of the small arena) on stream 2.
TEST_F(AllocatorTest, ASmallRequestOnAnotherStreamUsesTheLargeArenasCache) {
  Make(6 * kGiB, "capacity:6GiB", /*sized_by_conf=*/true);
  std::vector<DevicePtr> p;
  for (int i = 0; i < 64; ++i) p.push_back(MustMalloc(96 * kMiB, /*stream=*/1));
  for (int i = 0; i < 64; ++i) {
    if (i % 4 != 0) {
      ASSERT_TRUE(allocator_->Free(p[i]).ok());
    }
  }
  AllocatorStats s = allocator_->stats(0);
  ASSERT_EQ(s.allocated_bytes.current, int64_t{16 * 96 * kMiB});
  ASSERT_EQ(s.reserved_bytes.current, int64_t{6 * kGiB});
  absl::StatusOr<DevicePtr> small = allocator_->Malloc(961 * 1024, 0, 2);
  ASSERT_TRUE(small.ok()) << small.status();
  std::memset(reinterpret_cast<void*>(*small), 7, 961 * 1024);
  s = allocator_->stats(0);
  EXPECT_LE(s.reserved_bytes.current, int64_t{6 * kGiB});
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.host_waits, 0);
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  // And the other way: a large request takes what the small arena caches.
  ASSERT_TRUE(allocator_->Free(*small).ok());
  for (int i = 0; i < 64; i += 4) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  std::vector<DevicePtr> smalls;
  for (int i = 0; i < 3 * 1024; ++i) {
    smalls.push_back(MustMalloc(961 * 1024, /*stream=*/2));
  }
  for (DevicePtr x : smalls) ASSERT_TRUE(allocator_->Free(x).ok());
  absl::StatusOr<DevicePtr> big = allocator_->Malloc(5 * kGiB, 0, 1);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(allocator_->stats(0).host_waits, 0);
  EXPECT_TRUE(allocator_->CheckInvariants().ok());
  ASSERT_TRUE(allocator_->Free(*big).ok());
}

// A reclaim of `asked` bytes (as the lake asks) returns at least that, or
// everything free but the `shared` bytes free in chunks that also hold live
// blocks, and the books balance after.
void ExpectReclaimGivesAtLeast(Allocator* allocator, EmbeddedLake* lake,
                               uint64_t asked, uint64_t shared = 0) {
  const AllocatorStats before = allocator->stats(0);
  const uint64_t held = lake->held_bytes(0);
  const uint64_t free_bytes =
      static_cast<uint64_t>(before.reserved_bytes.current -
                            before.allocated_bytes.current) -
      shared;
  const uint64_t got = allocator->Reclaim(0, asked);
  EXPECT_GE(got, std::min(asked, free_bytes))
      << "asked " << asked << ", " << free_bytes << " free";
  const AllocatorStats after = allocator->stats(0);
  EXPECT_EQ(after.reserved_bytes.current,
            before.reserved_bytes.current - static_cast<int64_t>(got));
  EXPECT_EQ(lake->held_bytes(0), held - got);
  EXPECT_EQ(after.reclaim_asked_bytes - before.reclaim_asked_bytes,
            static_cast<int64_t>(asked));
  EXPECT_EQ(after.reclaim_returned_bytes - before.reclaim_returned_bytes,
            static_cast<int64_t>(got));
  EXPECT_EQ(after.allocated_bytes.current, before.allocated_bytes.current);
  EXPECT_TRUE(allocator->CheckInvariants().ok());
}

// Free cache in large chunks of different sizes (the lake cuts a large
// shortfall into 64 MiB chunks, a small one into 4 MiB chunks): a reclaim
// smaller than any of them still returns one.
// A physical chunk cannot be split: a small-pool page among free chunks of
// two pages maps one of them whole (its second page a free tail) rather
// than making a new chunk (client/chunk_cover.h).
TEST_F(AllocatorTest, ASmallRequestAmongLargerFreeChunksMapsOneWhole) {
  Make(0, "max_chunk:4MiB", /*sized_by_conf=*/true);
  ASSERT_TRUE(allocator_->Free(MustMalloc(8 * kMiB)).ok());  // two chunks
  DevicePtr a = MustMalloc(kMiB / 2);
  DevicePtr b = MustMalloc(kMiB);  // the tail's bytes: no slow path
  const AllocatorStats s = allocator_->stats(0);
  EXPECT_EQ(s.reserved_bytes.current, int64_t{8 * kMiB});
  EXPECT_EQ(s.chunks_acquired, 2);
  EXPECT_EQ(s.reserved_bytes.small.current, int64_t{4 * kMiB});
  ASSERT_TRUE(allocator_->Free(a).ok());
  ASSERT_TRUE(allocator_->Free(b).ok());
  EXPECT_EQ(allocator_->EmptyCache(), 8 * kMiB);
}

// A request of an odd number of pages among free chunks of two: the first
// rest comes from the lake (one odd page is no pattern yet); once the rests
// it made pass 0.2% of the allocated peak, a larger free chunk covers the
// rest, mapped whole, and its extra page serves the next request.
TEST_F(AllocatorTest, OddPageRestsAreCoveredOnceMemoryIsStranded) {
  constexpr size_t kBig = 4 * kMiB;  // chunks of two pages
  Make(0, "max_chunk:4MiB", /*sized_by_conf=*/true);
  std::vector<DevicePtr> p;
  for (int i = 0; i < 16; ++i) p.push_back(MustMalloc(kBig));
  for (int i = 0; i < 16; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  const DevicePtr first = MustMalloc(3 * kChunk);
  EXPECT_EQ(allocator_->stats(0).reserved_bytes.current,
            int64_t{16 * kBig + kChunk})
      << "the lake made the first odd page";
  const int64_t acquired = allocator_->stats(0).chunks_acquired;
  const DevicePtr second = MustMalloc(3 * kChunk);
  const DevicePtr tail = MustMalloc(kChunk);
  const AllocatorStats s = allocator_->stats(0);
  EXPECT_EQ(s.reserved_bytes.current, int64_t{16 * kBig + kChunk});
  EXPECT_EQ(s.chunks_acquired, acquired) << "covered by free chunks";
  EXPECT_EQ(tail, second + 3 * kChunk) << "the cover's extra page";
  for (DevicePtr q : {first, second, tail}) {
    ASSERT_TRUE(allocator_->Free(q).ok());
  }
  for (int i = 1; i < 16; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  EXPECT_EQ(allocator_->EmptyCache(), 16 * kBig + kChunk);
}

TEST_F(AllocatorTest, ReclaimReturnsWhatIsAskedFromChunksOfAnySize) {
  Make(0, "large_chunk:64MiB", /*sized_by_conf=*/true);
  DevicePtr big = MustMalloc(1024 * kMiB, /*stream=*/1);  // 64 MiB chunks
  DevicePtr mid = MustMalloc(12 * kMiB, /*stream=*/1);    // 4 MiB chunks
  DevicePtr keep = MustMalloc(kMiB / 2, /*stream=*/2);    // small arena
  DevicePtr tiny = MustMalloc(kMiB / 2, /*stream=*/3);    // small arena
  ASSERT_TRUE(allocator_->Free(big).ok());
  ASSERT_TRUE(allocator_->Free(mid).ok());
  ASSERT_TRUE(allocator_->Free(tiny).ok());
  // keep's chunk is partly free: that part cannot leave.
  const uint64_t shared = kChunk - kMiB / 2;
  for (uint64_t asked : {uint64_t{kMiB}, uint64_t{kChunk}, uint64_t{6 * kMiB},
                         uint64_t{65 * kMiB}, uint64_t{200 * kMiB}}) {
    ExpectReclaimGivesAtLeast(allocator_.get(), lake_.get(), asked, shared);
  }
  // More than is free: everything free.
  ExpectReclaimGivesAtLeast(allocator_.get(), lake_.get(), 4 * kGiB, shared);
  const AllocatorStats s = allocator_->stats(0);
  EXPECT_EQ(s.reserved_bytes.current, int64_t{kChunk});
  EXPECT_EQ(s.reclaim_waits, 0) << "the streams were idle: events queried";
  EXPECT_GT(s.chunks_returned, 3) << "big, mid and tiny's chunks";
  ASSERT_TRUE(allocator_->Free(keep).ok());
}

// A real lake that records each batch of chunks given back to it.
class ReturnRecorder : public ChunkSource {
 public:
  explicit ReturnRecorder(EmbeddedLake* lake) : lake_(lake) {}
  absl::string_view name() const override { return lake_->name(); }
  std::string Describe() const override { return lake_->Describe(); }
  VmmBackend* backend() override { return lake_->backend(); }
  size_t chunk_size(int device) const override {
    return lake_->chunk_size(device);
  }
  absl::StatusOr<std::vector<SizedChunk>> AcquireBytes(
      int device, uint64_t bytes) override {
    return lake_->AcquireBytes(device, bytes);
  }
  void ReturnSized(int device, absl::Span<const SizedChunk> chunks) override {
    uint64_t bytes = 0;
    for (const SizedChunk& c : chunks) bytes += c.size;
    batches.push_back(bytes);
    lake_->ReturnSized(device, chunks);
  }
  uint64_t capacity_bytes(int device) const override {
    return lake_->capacity_bytes(device);
  }
  absl::Status SetCapacity(int device, uint64_t bytes) override {
    return lake_->SetCapacity(device, bytes);
  }
  void SetReclaimHandler(ReclaimHandler handler) override {
    lake_->SetReclaimHandler(std::move(handler));
  }
  std::vector<uint64_t> batches;

 private:
  EmbeddedLake* lake_;
};

// Pressure asks an idle process for the whole need of a busy one (GiBs);
// every chunk costs an unmap and a release (~40 us on an H100: 0.1-0.2 s
// for the 2,000-3,200 chunks of a turn switch), and the busy process's
// lease waits for the room. Given back in pieces, each piece reaches the
// lake before the next is unmapped, and the lease goes on with the first.
TEST_F(AllocatorTest, AReclaimGivesBackInPieces) {
  ReturnRecorder recorder(lake_.get());
  Allocator allocator(&recorder, AllocatorOptions{});
  std::vector<DevicePtr> p;
  for (int i = 0; i < 24; ++i) {
    absl::StatusOr<DevicePtr> a = allocator.Malloc(32 * kChunk, 0, 0);
    ASSERT_TRUE(a.ok()) << a.status();
    p.push_back(*a);
  }
  for (DevicePtr a : p) ASSERT_TRUE(allocator.Free(a).ok());
  EXPECT_EQ(allocator.Reclaim(0, 768 * kChunk), 768 * kChunk);
  ASSERT_GE(recorder.batches.size(), 3u);
  for (uint64_t b : recorder.batches) EXPECT_LE(b, uint64_t{512} << 20);
  EXPECT_EQ(lake_->held_bytes(0), 0u);
}

// gmlake.slow_path_us is the time mallocs spent where no free block fit:
// it holds the wait for the lake's chunks, and a malloc a free block serves
// adds nothing to it.
TEST_F(AllocatorTest, SlowPathTimeHoldsTheWaitForChunks) {
  DevicePtr a = MustMalloc(32 * kChunk);
  const AllocatorStats grown = allocator_->stats(0);
  EXPECT_GT(grown.slow_path_us, 0);
  EXPECT_GE(grown.slow_path_us, grown.acquire_us);
  ASSERT_TRUE(allocator_->Free(a).ok());
  DevicePtr b = MustMalloc(32 * kChunk);
  EXPECT_EQ(allocator_->stats(0).slow_path_us, grown.slow_path_us);
  EXPECT_NE(grown.ToJson().find("\"gmlake.slow_path_us\":"), std::string::npos);
  ASSERT_TRUE(allocator_->Free(b).ok());
}

// The grow-or-stitch policy measures against the most the process has had
// allocated, which torch.cuda.reset_peak_memory_stats() must not change: a
// script that resets the peak each step (for its logs) or a process that
// gave its cache back and regrows would otherwise stitch every growth from
// the blocks its last step freed, paying a map and an access call per
// chunk where a growth within the earlier peak maps new chunks once.
TEST_F(AllocatorTest, ResettingThePeakLeavesTheGrowthPolicyAlone) {
  for (bool reset : {false, true}) {
    SCOPED_TRACE(reset ? "peak reset" : "peak kept");
    Make(0, "max_chunk:2MiB");
    std::vector<DevicePtr> first;
    for (int i = 0; i < 8; ++i) first.push_back(MustMalloc(8 * kChunk));
    for (DevicePtr p : first) ASSERT_TRUE(allocator_->Free(p).ok());
    ASSERT_EQ(allocator_->EmptyCache(), 64 * kChunk);
    // x | a | b | c, then a freed: 8 free chunks between live blocks.
    DevicePtr x = MustMalloc(8 * kChunk);
    DevicePtr a = MustMalloc(8 * kChunk);
    DevicePtr b = MustMalloc(8 * kChunk);
    DevicePtr c = MustMalloc(8 * kChunk);
    ASSERT_TRUE(allocator_->Free(a).ok());
    if (reset) allocator_->ResetPeaks(0);
    // 12 chunks: no free block fits, and new chunks stay well within the
    // peak of 64 chunks: grown, not stitched from a's chunks.
    DevicePtr d = MustMalloc(12 * kChunk);
    EXPECT_EQ(allocator_->stats(0).stitches, 0);
    EXPECT_EQ(allocator_->stats(0).reserved_bytes.current,
              int64_t{44 * kChunk});
    for (DevicePtr p : {x, b, c, d}) ASSERT_TRUE(allocator_->Free(p).ok());
    EXPECT_TRUE(allocator_->CheckInvariants().ok());
  }
}

// Free cache inside stitched blocks and dormant mappings: a stitch leaves
// the old pages of its chunks mapped (dormant), and frees the stitched
// block; a reclaim unmaps both views and returns the chunks.
TEST_F(AllocatorTest, ReclaimReturnsChunksInsideStitchedAndDormantViews) {
  constexpr size_t kBig = 4 * kMiB;  // chunks of two pages
  Make(16 * kBig, "max_chunk:4MiB,grow_slack:0", /*sized_by_conf=*/true);
  std::vector<DevicePtr> p;
  for (int i = 0; i < 16; ++i) p.push_back(MustMalloc(kBig, /*stream=*/1));
  for (int i = 0; i < 16; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  DevicePtr stitched = MustMalloc(8 * kBig, 1);
  ASSERT_EQ(allocator_->stats(0).dormant_chunks, 8);
  ASSERT_TRUE(allocator_->Free(stitched).ok());
  ASSERT_TRUE(allocator_->Free(p[1]).ok());
  ASSERT_TRUE(allocator_->Free(p[3]).ok());
  // The stitched block is free, its chunks dormant at their old pages.
  ExpectReclaimGivesAtLeast(allocator_.get(), lake_.get(), kMiB);
  ExpectReclaimGivesAtLeast(allocator_.get(), lake_.get(), 3 * kChunk);
  ExpectReclaimGivesAtLeast(allocator_.get(), lake_.get(), 16 * kBig);
  EXPECT_EQ(allocator_->stats(0).reserved_bytes.current, int64_t{6 * kBig});
  EXPECT_EQ(allocator_->stats(0).dormant_chunks, 0);
  for (int i = 5; i < 16; i += 2) ASSERT_TRUE(allocator_->Free(p[i]).ok());
  EXPECT_EQ(allocator_->EmptyCache(), 6 * kBig);
  EXPECT_EQ(lake_->held_bytes(0), 0u);
}

// A reclaim answers while the streams are busy and the thread that
// allocates is away: it waits for the GPU (counted), never for the caller.
TEST_F(AllocatorTest, ReclaimAnswersWhileTheStreamsAreBusy) {
  Make(0, "max_chunk:2MiB");
  DevicePtr a = MustMalloc(8 * kChunk, /*stream=*/1);
  DevicePtr b = MustMalloc(kChunk, /*stream=*/1);
  ASSERT_TRUE(allocator_->Free(a).ok());
  host_->set_event_delay(absl::Milliseconds(20));
  ExpectReclaimGivesAtLeast(allocator_.get(), lake_.get(), 3 * kChunk);
  EXPECT_GT(allocator_->stats(0).reclaim_waits, 0);
  EXPECT_EQ(allocator_->stats(0).host_waits, 0);
  ASSERT_TRUE(allocator_->Free(b).ok());
}

}  // namespace
}  // namespace gmlake
