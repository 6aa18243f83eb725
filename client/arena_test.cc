// Copyright 2026 The GMLake Authors.
//
// The arena's mechanism on the host backend: address space reserved whole
// pages, runs of chunks mapped with one access call and all or nothing, and
// the per-page books of what is mapped where.

#include "client/arena.h"

#include <map>
#include <memory>
#include <vector>

#include "common/host_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

constexpr size_t kPage = size_t{2} << 20;

class ArenaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostBackend::Options o;
    o.capacity_bytes = 64 * kPage;
    absl::StatusOr<std::unique_ptr<HostBackend>> b = HostBackend::Create(o);
    ASSERT_TRUE(b.ok()) << b.status();
    host_ = std::move(*b);
  }
  SizedChunk MustCreate(size_t pages) {
    absl::StatusOr<ChunkHandle> c = host_->CreateChunk(0, pages * kPage);
    EXPECT_TRUE(c.ok()) << c.status();
    return {c.ok() ? *c : 0, pages * kPage};
  }
  uint64_t Calls(VmmCall call) { return host_->call_stats().Count(call); }

  std::unique_ptr<HostBackend> host_;
};

TEST_F(ArenaTest, ReservesWholePagesAndStartsUnmapped) {
  absl::StatusOr<std::unique_ptr<Arena>> a =
      Arena::Create(host_.get(), 10 * kPage + 12345, kPage, false, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  Arena& arena = **a;
  EXPECT_EQ(arena.num_pages, 10u);
  EXPECT_EQ(arena.range.size(), 10 * kPage);
  EXPECT_EQ(arena.base() % kPage, 0u);
  EXPECT_EQ(arena.chunk.size(), 10u);
  for (size_t p = 0; p < arena.num_pages; ++p) {
    EXPECT_EQ(arena.chunk[p], 0u);
    EXPECT_EQ(arena.seg[p], nullptr);
  }
  EXPECT_EQ(arena.PageAddr(3), arena.base() + 3 * kPage);
  EXPECT_EQ(arena.PageOf(arena.base() + 3 * kPage + 17), 3u);
  EXPECT_TRUE(arena.Contains(arena.base()));
  EXPECT_TRUE(arena.Contains(arena.base() + 10 * kPage - 1));
  EXPECT_FALSE(arena.Contains(arena.base() + 10 * kPage));
  EXPECT_FALSE(arena.Contains(arena.base() - 1));
}

TEST_F(ArenaTest, InFlightCoversExactlyItsRuns) {
  absl::StatusOr<std::unique_ptr<Arena>> a =
      Arena::Create(host_.get(), 16 * kPage, kPage, true, 0);
  ASSERT_TRUE(a.ok());
  Arena& arena = **a;
  arena.in_flight[2] = 3;  // pages 2, 3, 4
  arena.in_flight[9] = 1;  // page 9
  std::vector<size_t> flying;
  for (size_t p = 0; p < arena.num_pages; ++p) {
    if (arena.InFlight(p)) flying.push_back(p);
  }
  EXPECT_EQ(flying, (std::vector<size_t>{2, 3, 4, 9}));
}

TEST_F(ArenaTest, TooLargeAnArenaSaysWhichOptionToLower) {
  absl::StatusOr<std::unique_ptr<Arena>> a =
      Arena::Create(host_.get(), size_t{1} << 62, kPage, false, 0);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("address space for an arena"));
  EXPECT_THAT(a.status().message(), HasSubstr("large_arena/small_arena"));
}

TEST_F(ArenaTest, MapChunksMapsARunWithOneAccessCall) {
  absl::StatusOr<std::unique_ptr<Arena>> a =
      Arena::Create(host_.get(), 8 * kPage, kPage, false, 0);
  ASSERT_TRUE(a.ok());
  const std::vector<SizedChunk> chunks = {MustCreate(1), MustCreate(2),
                                          MustCreate(1)};
  EXPECT_EQ(PagesOf(chunks, kPage), 4u);
  const DevicePtr at = (*a)->PageAddr(2);
  const int devices[] = {0};
  const uint64_t maps = Calls(VmmCall::kMap);
  const uint64_t access = Calls(VmmCall::kSetAccess);
  ASSERT_TRUE(MapChunks(host_.get(), at, chunks, devices).ok());
  EXPECT_EQ(Calls(VmmCall::kMap), maps + 3);
  EXPECT_EQ(Calls(VmmCall::kSetAccess), access + 1);
  // One writable run across the seams.
  ASSERT_TRUE(host_->Fill(at, 0x5a, 4 * kPage).ok());
  uint8_t seam[2] = {};
  ASSERT_TRUE(host_->CopyToHost(seam, at + kPage - 1, 2).ok());
  EXPECT_EQ(seam[0], 0x5a);
  EXPECT_EQ(seam[1], 0x5a);
  ASSERT_TRUE(UnmapChunks(host_.get(), at, chunks).ok());
  EXPECT_EQ(Calls(VmmCall::kUnmap), 3u);
  EXPECT_EQ(host_->Fill(at, 1, 1).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ArenaTest, MapChunksIsAllOrNothing) {
  absl::StatusOr<std::unique_ptr<Arena>> a =
      Arena::Create(host_.get(), 8 * kPage, kPage, false, 0);
  ASSERT_TRUE(a.ok());
  SizedChunk bad = MustCreate(1);
  bad.size = 2 * kPage;  // not the chunk's size: the driver refuses it
  const std::vector<SizedChunk> chunks = {MustCreate(1), MustCreate(1), bad};
  const int devices[] = {0};
  const DevicePtr at = (*a)->base();
  absl::Status s = MapChunks(host_.get(), at, chunks, devices);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // The two mapped before the failure were unmapped again: the whole run
  // maps afresh.
  EXPECT_EQ(Calls(VmmCall::kUnmap), 2u);
  const std::vector<SizedChunk> good = {chunks[0], chunks[1]};
  EXPECT_TRUE(MapChunks(host_.get(), at, good, devices).ok());
  EXPECT_TRUE(UnmapChunks(host_.get(), at, good).ok());
}

TEST_F(ArenaTest, UnmapChunksGoesOnPastAnErrorAndReportsTheFirst) {
  absl::StatusOr<std::unique_ptr<Arena>> a =
      Arena::Create(host_.get(), 8 * kPage, kPage, false, 0);
  ASSERT_TRUE(a.ok());
  const std::vector<SizedChunk> chunks = {MustCreate(1), MustCreate(1),
                                          MustCreate(1)};
  const int devices[] = {0};
  const DevicePtr at = (*a)->base();
  ASSERT_TRUE(MapChunks(host_.get(), at, chunks, devices).ok());
  ASSERT_TRUE(host_->Unmap(at + kPage, kPage).ok());  // the middle one
  absl::Status s = UnmapChunks(host_.get(), at, chunks);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  // The last one was unmapped despite the error before it.
  EXPECT_TRUE(host_->Map(at + 2 * kPage, kPage, chunks[2].handle).ok());
  EXPECT_TRUE(host_->Unmap(at + 2 * kPage, kPage).ok());
}

TEST_F(ArenaTest, BooksRecordAndForgetWholeChunks) {
  absl::StatusOr<std::unique_ptr<Arena>> a =
      Arena::Create(host_.get(), 8 * kPage, kPage, false, 0);
  ASSERT_TRUE(a.ok());
  Arena& arena = **a;
  const std::vector<SizedChunk> chunks = {{11, kPage}, {12, 3 * kPage}};
  RecordMapped(&arena, 2, chunks);
  EXPECT_EQ(arena.chunk[1], 0u);
  EXPECT_EQ(arena.chunk[2], 11u);
  EXPECT_EQ(arena.chunk_pages[2], 1u);
  for (size_t p = 3; p < 6; ++p) {
    EXPECT_EQ(arena.chunk[p], 12u);
    EXPECT_EQ(arena.chunk_start[p], 3u);
  }
  EXPECT_EQ(arena.chunk_pages[3], 3u);
  EXPECT_EQ(arena.chunk[6], 0u);
  Segment segment;
  for (size_t p = 2; p < 6; ++p) arena.seg[p] = &segment;

  std::vector<SizedChunk> forgot = ForgetMapped(&arena, 3, 6);
  ASSERT_EQ(forgot.size(), 1u);
  EXPECT_EQ(forgot[0].handle, 12u);
  EXPECT_EQ(forgot[0].size, 3 * kPage);
  for (size_t p = 3; p < 6; ++p) {
    EXPECT_EQ(arena.chunk[p], 0u);
    EXPECT_EQ(arena.seg[p], nullptr);
  }
  EXPECT_EQ(arena.chunk_pages[3], 0u);
  EXPECT_EQ(arena.chunk[2], 11u);  // the neighbour is untouched
  EXPECT_EQ(arena.seg[2], &segment);
}

// Dormant chunks: mapped where no segment is, kept in runs that join and
// split as chunks go dormant and come back.
TEST_F(ArenaTest, DormantRunsJoinAndSplit) {
  absl::StatusOr<std::unique_ptr<Arena>> a =
      Arena::Create(host_.get(), 16 * kPage, kPage, false, 0);
  ASSERT_TRUE(a.ok());
  Arena& arena = **a;
  EXPECT_FALSE(arena.Taken(4));
  RecordDormant(&arena, 4, {{21, 2 * kPage}}, /*gen=*/7);
  RecordDormant(&arena, 8, {{23, kPage}}, 8);
  EXPECT_EQ(arena.dormant_runs, (std::map<size_t, size_t>{{4, 6}, {8, 9}}));
  EXPECT_TRUE(arena.Taken(5));
  EXPECT_EQ(arena.dormant_gen[4], 7u);
  // The gap between them: the runs join into one.
  RecordDormant(&arena, 6, {{22, 2 * kPage}}, 9);
  EXPECT_EQ(arena.dormant_runs, (std::map<size_t, size_t>{{4, 9}}));
  // Taking the middle chunk back splits the run.
  std::vector<SizedChunk> back = ForgetDormant(&arena, 6, 8);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].handle, 22u);
  EXPECT_EQ(back[0].size, 2 * kPage);
  EXPECT_EQ(arena.dormant_runs, (std::map<size_t, size_t>{{4, 6}, {8, 9}}));
  EXPECT_FALSE(arena.Taken(6));
  EXPECT_EQ(arena.dormant_gen[6], 0u);
  back = ForgetDormant(&arena, 4, 6);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].handle, 21u);
  back = ForgetDormant(&arena, 8, 9);
  EXPECT_TRUE(arena.dormant_runs.empty());
  for (size_t p = 0; p < arena.num_pages; ++p) EXPECT_EQ(arena.dormant[p], 0u);
}

}  // namespace
}  // namespace gmlake
