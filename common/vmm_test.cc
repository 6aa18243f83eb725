// Copyright 2026 The GMLake Authors.
//
// The VMM layer's own code, on the host backend: every call counted by kind
// (failed ones too), the snapshots' arithmetic, and the RAII owners that
// release, free and unmap what they hold.

#include "common/vmm.h"

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/host_backend.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

constexpr size_t kChunk = size_t{2} << 20;

std::unique_ptr<HostBackend> MakeHost() {
  HostBackend::Options o;
  o.capacity_bytes = 16 * kChunk;
  absl::StatusOr<std::unique_ptr<HostBackend>> b = HostBackend::Create(o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

TEST(VmmCallNameTest, EveryCallHasItsOwnName) {
  std::set<std::string> names;
  for (int c = 0; c < kNumVmmCalls; ++c) {
    const absl::string_view name = VmmCallName(static_cast<VmmCall>(c));
    EXPECT_FALSE(name.empty()) << c;
    names.insert(std::string(name));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kNumVmmCalls));
  EXPECT_EQ(VmmCallName(VmmCall::kSetAccess), "set_access");
  EXPECT_EQ(VmmCallName(VmmCall::kEventSync), "event_sync");
}

TEST(VmmCallStatsTest, SnapshotsAddUpAndSubtract) {
  VmmCallStats stats;
  stats.Add(VmmCall::kMap, 100);
  stats.Add(VmmCall::kMap, 50);
  stats.Add(VmmCall::kEventQuery, 7);
  const VmmCallSnapshot first = stats.Snapshot();
  EXPECT_EQ(first.Count(VmmCall::kMap), 2u);
  EXPECT_EQ(first.Nanos(VmmCall::kMap), 150u);
  EXPECT_EQ(first.MemoryCalls(), 2u);  // event calls change no memory
  EXPECT_EQ(first.TotalCalls(), 3u);
  EXPECT_EQ(first.TotalNanos(), 157u);
  stats.Add(VmmCall::kUnmap, 10);
  const VmmCallSnapshot since = stats.Snapshot() - first;
  EXPECT_EQ(since.TotalCalls(), 1u);
  EXPECT_EQ(since.Count(VmmCall::kUnmap), 1u);
  EXPECT_EQ(since.Count(VmmCall::kMap), 0u);
}

TEST(VmmCallStatsTest, CountsFromManyThreadsAreNotLost) {
  VmmCallStats stats;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) stats.Add(VmmCall::kCreate, 1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(stats.Snapshot().Count(VmmCall::kCreate), 40000u);
  EXPECT_EQ(stats.Snapshot().Nanos(VmmCall::kCreate), 40000u);
}

TEST(VmmBackendTest, EveryCallIsCountedByKindFailedOnesToo) {
  std::unique_ptr<HostBackend> host = MakeHost();
  ASSERT_NE(host, nullptr);
  const VmmCallSnapshot before = host->call_stats();
  absl::StatusOr<ChunkHandle> c = host->CreateChunk(0, kChunk);
  ASSERT_TRUE(c.ok());
  absl::StatusOr<DevicePtr> r = host->ReserveRange(kChunk);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(host->Map(*r, kChunk, *c).ok());
  EXPECT_FALSE(host->Map(*r, kChunk, *c).ok());  // already mapped: counted
  ASSERT_TRUE(host->SetAccess(*r, kChunk, {0}).ok());
  absl::StatusOr<UniqueFd> fd = host->ExportChunk(*c);
  ASSERT_TRUE(fd.ok());
  absl::StatusOr<ChunkHandle> imported =
      host->ImportChunk(fd->get(), 0, kChunk);
  ASSERT_TRUE(imported.ok());
  absl::StatusOr<EventHandle> e = host->CreateEvent(0);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(host->RecordEvent(*e, 0).ok());
  ASSERT_TRUE(host->QueryEvent(*e).ok());
  ASSERT_TRUE(host->SyncEvent(*e).ok());
  ASSERT_TRUE(host->DestroyEvent(*e).ok());
  ASSERT_TRUE(host->Unmap(*r, kChunk).ok());
  ASSERT_TRUE(host->FreeRange(*r, kChunk).ok());
  ASSERT_TRUE(host->ReleaseChunk(*imported).ok());
  ASSERT_TRUE(host->ReleaseChunk(*c).ok());
  const VmmCallSnapshot d = host->call_stats() - before;
  EXPECT_EQ(d.Count(VmmCall::kMap), 2u);
  for (VmmCall call :
       {VmmCall::kCreate, VmmCall::kExport, VmmCall::kImport, VmmCall::kReserve,
        VmmCall::kFree, VmmCall::kUnmap, VmmCall::kSetAccess,
        VmmCall::kEventCreate, VmmCall::kEventDestroy, VmmCall::kEventRecord,
        VmmCall::kEventQuery, VmmCall::kEventSync}) {
    EXPECT_EQ(d.Count(call), 1u) << VmmCallName(call);
  }
  EXPECT_EQ(d.Count(VmmCall::kRelease), 2u);
  EXPECT_EQ(d.MemoryCalls(), 11u);
  EXPECT_EQ(d.TotalCalls(), 16u);
}

TEST(VmmOwnersTest, ChunkReleasesItselfUnlessGivenUp) {
  std::unique_ptr<HostBackend> host = MakeHost();
  ASSERT_NE(host, nullptr);
  {
    absl::StatusOr<Chunk> c = Chunk::Create(host.get(), 0, kChunk);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(static_cast<bool>(*c));
    EXPECT_EQ(c->size(), kChunk);
    EXPECT_EQ(host->used_bytes(0), kChunk);
  }
  EXPECT_EQ(host->used_bytes(0), 0u);

  // Moving hands the chunk on; assigning over one releases the old one.
  absl::StatusOr<Chunk> a = Chunk::Create(host.get(), 0, kChunk);
  absl::StatusOr<Chunk> b = Chunk::Create(host.get(), 0, 2 * kChunk);
  ASSERT_TRUE(a.ok() && b.ok());
  Chunk kept = std::move(*a);
  EXPECT_FALSE(static_cast<bool>(*a));
  EXPECT_EQ(host->used_bytes(0), 3 * kChunk);
  kept = std::move(*b);
  EXPECT_EQ(host->used_bytes(0), 2 * kChunk);
  EXPECT_EQ(kept.size(), 2 * kChunk);

  // Given up: the handle outlives the owner until released by hand.
  const ChunkHandle h = kept.TakeHandle();
  EXPECT_FALSE(static_cast<bool>(kept));
  EXPECT_TRUE(kept.Reset().ok());
  EXPECT_EQ(host->used_bytes(0), 2 * kChunk);
  EXPECT_TRUE(host->ReleaseChunk(h).ok());
  EXPECT_EQ(host->used_bytes(0), 0u);

  EXPECT_EQ(Chunk::Create(host.get(), 0, 64 * kChunk).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(VmmOwnersTest, RangeFreesAndMappingUnmapsItself) {
  std::unique_ptr<HostBackend> host = MakeHost();
  ASSERT_NE(host, nullptr);
  absl::StatusOr<Chunk> c = Chunk::Create(host.get(), 0, kChunk);
  ASSERT_TRUE(c.ok());
  DevicePtr base = 0;
  {
    absl::StatusOr<VirtualRange> r = VirtualRange::Reserve(host.get(), kChunk);
    ASSERT_TRUE(r.ok()) << r.status();
    base = r->base();
    {
      const int devices[] = {0};
      absl::StatusOr<Mapping> m =
          Mapping::Map(host.get(), base, kChunk, c->handle(), devices);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_TRUE(host->Fill(base, 7, kChunk).ok());
      // A range with a mapping in it is not freed.
      EXPECT_FALSE(r->Reset().ok());
      *r = VirtualRange(host.get(), base, kChunk);  // still ours
    }
    // Unmapped: no access any more, and the range frees.
    EXPECT_FALSE(host->Fill(base, 7, 1).ok());
  }
  EXPECT_EQ(host->FreeRange(base, kChunk).code(), absl::StatusCode::kNotFound);
}

TEST(VmmOwnersTest, MappingWhoseAccessFailsIsUnmappedAgain) {
  std::unique_ptr<HostBackend> host = MakeHost();
  ASSERT_NE(host, nullptr);
  absl::StatusOr<Chunk> c = Chunk::Create(host.get(), 0, kChunk);
  absl::StatusOr<VirtualRange> r = VirtualRange::Reserve(host.get(), kChunk);
  ASSERT_TRUE(c.ok() && r.ok());
  const int no_such_device[] = {5};
  absl::StatusOr<Mapping> m =
      Mapping::Map(host.get(), r->base(), kChunk, c->handle(), no_such_device);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  // Nothing left mapped: the chunk maps there again.
  const int devices[] = {0};
  absl::StatusOr<Mapping> again =
      Mapping::Map(host.get(), r->base(), kChunk, c->handle(), devices);
  EXPECT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace gmlake
