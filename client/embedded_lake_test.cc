// Copyright 2026 The GMLake Authors.
//
// The embedded lake on the host backend: chunks made on demand up to the
// capacity, kept when returned and reused before new ones are made, all or
// nothing on failure, and released by Trim and at the end.

#include "client/embedded_lake.h"

#include <memory>
#include <vector>

#include "common/host_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kChunk = uint64_t{2} << 20;

class EmbeddedLakeTest : public ::testing::Test {
 protected:
  // A host backend of `backend_bytes` per device, `devices` devices.
  void Make(uint64_t backend_bytes, uint64_t max_chunk = 0, int devices = 1) {
    MakeSized(backend_bytes, ChunkSizing{0, max_chunk}, devices);
  }
  void MakeSized(uint64_t backend_bytes, const ChunkSizing& growth,
                 int devices = 1) {
    lake_.reset();
    HostBackend::Options o;
    o.devices = devices;
    o.capacity_bytes = backend_bytes;
    absl::StatusOr<std::unique_ptr<HostBackend>> b = HostBackend::Create(o);
    ASSERT_TRUE(b.ok()) << b.status();
    host_ = std::move(*b);
    lake_ = std::make_unique<EmbeddedLake>(host_.get(), 0, growth);
  }
  // Chunks that coarsen with what the device has held (ForHeld) at a
  // divisor of 8, up to 8 MiB.
  static ChunkSizing Coarsening() {
    ChunkSizing growth;
    growth.base = kChunk;
    growth.held_divisor = 8;
    growth.held_max = 4 * kChunk;
    return growth;
  }
  void SetUp() override { Make(64 * kChunk, 8 * kChunk); }
  void TearDown() override { lake_.reset(); }

  uint64_t Creates() { return host_->call_stats().Count(VmmCall::kCreate); }
  static uint64_t Sum(const std::vector<SizedChunk>& chunks) {
    uint64_t sum = 0;
    for (const SizedChunk& c : chunks) sum += c.size;
    return sum;
  }

  std::unique_ptr<HostBackend> host_;
  std::unique_ptr<EmbeddedLake> lake_;
};

TEST_F(EmbeddedLakeTest, MakesChunksOfAtMostMaxChunkForTheWholeRequest) {
  absl::StatusOr<std::vector<SizedChunk>> got =
      lake_->AcquireBytes(0, 20 * kChunk);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Sum(*got), 20 * kChunk);
  ASSERT_EQ(got->size(), 3u);  // 8 + 8 + 4 granules
  for (const SizedChunk& c : *got) EXPECT_LE(c.size, 8 * kChunk);
  EXPECT_EQ(Creates(), 3u);
  EXPECT_EQ(lake_->held_bytes(0), 20 * kChunk);
  EXPECT_EQ(host_->used_bytes(0), 20 * kChunk);
  lake_->ReturnSized(0, *got);
  EXPECT_EQ(lake_->held_bytes(0), 0u);
  EXPECT_EQ(host_->used_bytes(0), 20 * kChunk);  // kept, not released
}

// A lake whose device holds much grows it in coarser chunks (ForHeld):
// 16 x 2 MiB held at a divisor of 8 lets 4 MiB chunks serve the next
// request, and so on up to held_chunk_max.
TEST_F(EmbeddedLakeTest, ADeviceHoldingMuchGrowsInCoarserChunks) {
  MakeSized(128 * kChunk, Coarsening());
  EmbeddedLake& lake = *lake_;
  absl::StatusOr<std::vector<SizedChunk>> first =
      lake.AcquireBytes(0, 16 * kChunk);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), 16u);  // nothing held yet: the base
  absl::StatusOr<std::vector<SizedChunk>> second =
      lake.AcquireBytes(0, 16 * kChunk);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->size(), 8u);  // 32 MiB held / 8: 4 MiB chunks
  for (const SizedChunk& c : *second) EXPECT_EQ(c.size, 2 * kChunk);
  absl::StatusOr<std::vector<SizedChunk>> third =
      lake.AcquireBytes(0, 32 * kChunk);
  ASSERT_TRUE(third.ok()) << third.status();
  ASSERT_EQ(third->size(), 8u);  // 64 MiB / 8: 8 MiB chunks
  for (const SizedChunk& c : *third) EXPECT_EQ(c.size, 4 * kChunk);
  absl::StatusOr<std::vector<SizedChunk>> fourth =
      lake.AcquireBytes(0, 16 * kChunk);
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  ASSERT_EQ(fourth->size(), 4u);  // 128 MiB / 8 is 16 MiB: held_max, 8
  for (const SizedChunk& c : *fourth) EXPECT_EQ(c.size, 4 * kChunk);
  EXPECT_EQ(host_->call_stats().Count(VmmCall::kCreate), 36u);
  EXPECT_EQ(lake.held_bytes(0), 80 * kChunk);
  lake.ReturnSized(0, *fourth);
  lake.ReturnSized(0, *first);
  lake.ReturnSized(0, *second);
  lake.ReturnSized(0, *third);
}

// A process that gave its cache back (to another process under pressure,
// or empty_cache) grows back to what it held: in the chunks of the most it
// held, not of what it holds now.
TEST_F(EmbeddedLakeTest, ADeviceThatHeldMuchRegrowsInCoarserChunks) {
  MakeSized(128 * kChunk, Coarsening());
  EmbeddedLake& lake = *lake_;
  absl::StatusOr<std::vector<SizedChunk>> first =
      lake.AcquireBytes(0, 64 * kChunk);
  ASSERT_TRUE(first.ok()) << first.status();
  lake.ReturnSized(0, *first);
  lake.Trim();  // all of it back to the driver: nothing held or kept
  ASSERT_EQ(lake.held_bytes(0), 0u);
  absl::StatusOr<std::vector<SizedChunk>> again =
      lake.AcquireBytes(0, 16 * kChunk);
  ASSERT_TRUE(again.ok()) << again.status();
  // 128 MiB held at most / 8 is 16 MiB: held_max, 8 MiB chunks.
  ASSERT_EQ(again->size(), 4u);
  for (const SizedChunk& c : *again) EXPECT_EQ(c.size, 4 * kChunk);
  lake.ReturnSized(0, *again);
}

TEST_F(EmbeddedLakeTest, ReturnedChunksAreReusedBeforeNewOnesAreMade) {
  absl::StatusOr<std::vector<SizedChunk>> a =
      lake_->AcquireBytes(0, 8 * kChunk);
  absl::StatusOr<std::vector<SizedChunk>> b =
      lake_->AcquireBytes(0, 2 * kChunk);
  ASSERT_TRUE(a.ok() && b.ok());
  lake_->ReturnSized(0, *a);
  lake_->ReturnSized(0, *b);
  const uint64_t creates = Creates();
  // 10 granules: the kept 8 and 2, no new chunk.
  absl::StatusOr<std::vector<SizedChunk>> again =
      lake_->AcquireBytes(0, 10 * kChunk);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Creates(), creates);
  EXPECT_EQ(Sum(*again), 10 * kChunk);
  lake_->ReturnSized(0, *again);
  // 3 granules: the kept 8 is too large to take whole, the 2 fits, one new
  // granule is made for the rest.
  absl::StatusOr<std::vector<SizedChunk>> three =
      lake_->AcquireBytes(0, 3 * kChunk);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(Sum(*three), 3 * kChunk);
  EXPECT_EQ(Creates(), creates + 1);
  lake_->ReturnSized(0, *three);
}

TEST_F(EmbeddedLakeTest, CapacityRefusesWithWhatWasAskedAndHeld) {
  ASSERT_TRUE(lake_->SetCapacity(0, 4 * kChunk).ok());
  EXPECT_EQ(lake_->capacity_bytes(0), 4 * kChunk);
  absl::StatusOr<std::vector<SizedChunk>> got =
      lake_->AcquireBytes(0, 3 * kChunk);
  ASSERT_TRUE(got.ok());
  absl::StatusOr<std::vector<SizedChunk>> more =
      lake_->AcquireBytes(0, 2 * kChunk);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(more.status().message(), HasSubstr("capacity reached"));
  EXPECT_THAT(more.status().message(), HasSubstr("holding 6.00 MiB of 8.00"));
  EXPECT_EQ(lake_->held_bytes(0), 3 * kChunk);
  lake_->ReturnSized(0, *got);
  ASSERT_TRUE(lake_->SetCapacity(0, 0).ok());  // no limit again
  EXPECT_TRUE(lake_->AcquireBytes(0, 10 * kChunk).ok());
}

TEST_F(EmbeddedLakeTest, BadArgumentsAreRefused) {
  EXPECT_EQ(lake_->AcquireBytes(1, kChunk).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lake_->AcquireBytes(-1, kChunk).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(lake_->AcquireBytes(0, kChunk + 1).status().message(),
              HasSubstr("not a multiple"));
  EXPECT_EQ(lake_->AcquireBytes(0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lake_->SetCapacity(2, kChunk).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Creates(), 0u);
}

// The backend runs out in the middle of a request: nothing is handed out,
// and the kept chunks it had taken stay kept.
TEST_F(EmbeddedLakeTest, BackendOutOfMemoryIsAllOrNothing) {
  Make(6 * kChunk, 2 * kChunk);
  absl::StatusOr<std::vector<SizedChunk>> kept =
      lake_->AcquireBytes(0, 2 * kChunk);
  absl::StatusOr<std::vector<SizedChunk>> held =
      lake_->AcquireBytes(0, 2 * kChunk);
  ASSERT_TRUE(kept.ok() && held.ok());
  lake_->ReturnSized(0, *kept);
  // 2 kept + 2 more fit the backend's 6, the last 2 do not.
  absl::StatusOr<std::vector<SizedChunk>> big =
      lake_->AcquireBytes(0, 6 * kChunk);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("embedded lake: "));
  EXPECT_THAT(big.status().message(), HasSubstr("asked 12.00 MiB"));
  EXPECT_EQ(lake_->held_bytes(0), 2 * kChunk);
  // The kept chunk (and the one made before the failure) are still there.
  const uint64_t creates = Creates();
  absl::StatusOr<std::vector<SizedChunk>> two =
      lake_->AcquireBytes(0, 2 * kChunk);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(Creates(), creates);
  lake_->ReturnSized(0, *two);
  lake_->ReturnSized(0, *held);
}

// Kept chunks of another size that fill the device are released for a
// request they cannot serve (the allocator gives back 4 MiB chunks to take
// a 2 MiB one for its small arena): the device is not full, only the kept.
TEST_F(EmbeddedLakeTest, KeptChunksOfAnotherSizeMakeRoomWhenTheDeviceIsFull) {
  Make(4 * kChunk, 2 * kChunk);
  absl::StatusOr<std::vector<SizedChunk>> all =
      lake_->AcquireBytes(0, 4 * kChunk);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);  // two chunks of 4 MiB fill the device
  lake_->ReturnSized(0, *all);
  absl::StatusOr<std::vector<SizedChunk>> one = lake_->AcquireBytes(0, kChunk);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(Sum(*one), kChunk);
  EXPECT_EQ(lake_->held_bytes(0), kChunk);
  lake_->ReturnSized(0, *one);
}

TEST_F(EmbeddedLakeTest, TrimAndTheEndReleaseKeptChunks) {
  absl::StatusOr<std::vector<SizedChunk>> a =
      lake_->AcquireBytes(0, 4 * kChunk);
  absl::StatusOr<std::vector<SizedChunk>> b =
      lake_->AcquireBytes(0, 2 * kChunk);
  ASSERT_TRUE(a.ok() && b.ok());
  lake_->ReturnSized(0, *a);
  EXPECT_EQ(lake_->Trim(), 4 * kChunk);
  EXPECT_EQ(host_->used_bytes(0), 2 * kChunk);  // b is still held
  EXPECT_EQ(lake_->Trim(), 0u);
  lake_->ReturnSized(0, *b);
  lake_.reset();  // kept chunks go back to the driver at the end
  EXPECT_EQ(host_->used_bytes(0), 0u);
}

TEST_F(EmbeddedLakeTest, DevicesKeepTheirOwnBooks) {
  Make(16 * kChunk, 0, /*devices=*/2);
  ASSERT_TRUE(lake_->SetCapacity(1, 2 * kChunk).ok());
  EXPECT_THAT(lake_->Describe(),
              HasSubstr("capacity device 0 unlimited, device 1 4.00 MiB"));
  absl::StatusOr<std::vector<SizedChunk>> on1 =
      lake_->AcquireBytes(1, 2 * kChunk);
  ASSERT_TRUE(on1.ok());
  EXPECT_FALSE(lake_->AcquireBytes(1, kChunk).ok());
  EXPECT_TRUE(lake_->AcquireBytes(0, 8 * kChunk).ok());
  EXPECT_EQ(lake_->held_bytes(1), 2 * kChunk);
  EXPECT_EQ(host_->used_bytes(1), 2 * kChunk);
  lake_->ReturnSized(1, *on1);
}

}  // namespace
}  // namespace gmlake
