// Copyright 2026 The GMLake Authors.

#include "daemon/adopt_policy.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kChunk = 2 << 20;

uint64_t NoneHeld(const ChunkIdentity&) { return 0; }

AdoptionRoom Room(uint64_t room_chunks) {
  AdoptionRoom r;
  r.room_bytes = room_chunks * kChunk;
  r.uid = 2000;
  return r;
}

TEST(AdoptPolicyTest, AClaimWithoutDescriptorsIsRefused) {
  absl::Status s = CheckAdoptionClaim({0, 0, 3}, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("must carry the chunks' descriptors"));
}

TEST(AdoptPolicyTest, OneIdPerDescriptorOnADeviceThatExists) {
  EXPECT_THAT(CheckAdoptionClaim({0, 2, 1}, 1).message(),
              HasSubstr("one id per descriptor"));
  EXPECT_THAT(CheckAdoptionClaim({1, 2, 2}, 1).message(),
              HasSubstr("device 1, which gmlaked does not serve"));
  EXPECT_THAT(CheckAdoptionClaim({-1, 2, 2}, 1).message(),
              HasSubstr("does not serve"));
  EXPECT_TRUE(CheckAdoptionClaim({1, 2, 2}, 2).ok());
}

TEST(AdoptPolicyTest, ChunkSizesAreMultiplesOfTheUnitWithinTheCapacity) {
  constexpr uint64_t kCapacity = 64 * kChunk;
  absl::StatusOr<std::vector<uint64_t>> none =
      AdoptedChunkSizes(0, 3, {}, kChunk, kCapacity);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, (std::vector<uint64_t>{kChunk, kChunk, kChunk}));
  const std::vector<uint64_t> given = {kChunk, 8 * kChunk};
  absl::StatusOr<std::vector<uint64_t>> sized =
      AdoptedChunkSizes(0, 2, given, kChunk, kCapacity);
  ASSERT_TRUE(sized.ok()) << sized.status();
  EXPECT_EQ(*sized, given);

  const std::vector<uint64_t> one = {kChunk};
  EXPECT_THAT(
      AdoptedChunkSizes(0, 2, one, kChunk, kCapacity).status().message(),
      HasSubstr("2 descriptors and 1 chunk sizes"));
  for (uint64_t bad : {uint64_t{0}, kChunk + 4096, 2 * kCapacity}) {
    const std::vector<uint64_t> sizes = {kChunk, bad};
    absl::Status s = AdoptedChunkSizes(1, 2, sizes, kChunk, kCapacity).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("chunk 1 of the adopt request claims"))
        << bad;
    EXPECT_THAT(s.message(), HasSubstr("device 1 are multiples of 2.00 MiB"))
        << bad;
  }
}

TEST(AdoptPolicyTest, ChunksWithinRoomAndQuotasAreAdopted) {
  EXPECT_TRUE(
      CheckAdoptionFits(0, {{1, 10}, {1, 11}}, 2 * kChunk, Room(2), NoneHeld)
          .ok());
  // Unknown identities (the CUDA driver's descriptors) are not compared.
  EXPECT_TRUE(
      CheckAdoptionFits(0, {{}, {}}, 2 * kChunk, Room(2), NoneHeld).ok());
}

TEST(AdoptPolicyTest, OneMemoryIsCountedOnce) {
  absl::Status twice = CheckAdoptionFits(0, {{1, 10}, {1, 11}, {1, 10}},
                                         3 * kChunk, Room(8), NoneHeld);
  EXPECT_EQ(twice.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(twice.message(), HasSubstr("descriptors 0 and 2"));
  auto held = [](const ChunkIdentity& id) -> uint64_t {
    return id.ino == 11 ? 42 : 0;
  };
  absl::Status already =
      CheckAdoptionFits(0, {{1, 10}, {1, 11}}, 2 * kChunk, Room(8), held);
  EXPECT_EQ(already.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(already.message(),
              HasSubstr("descriptor 1 of the adopt request is chunk 42, which "
                        "gmlaked holds already"));
}

TEST(AdoptPolicyTest, NoMoreThanTheCapacityLeft) {
  absl::Status s =
      CheckAdoptionFits(0, {{}, {}, {}}, 3 * kChunk, Room(2), NoneHeld);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("4.00 MiB of room left (--capacity)"));
}

TEST(AdoptPolicyTest, ChunksOfSeveralSizesCountByTheirBytes) {
  // Two chunks, but 5 units of room needed: one of 4 and one of 1.
  absl::Status s =
      CheckAdoptionFits(0, {{}, {}}, 5 * kChunk, Room(4), NoneHeld);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(
      CheckAdoptionFits(0, {{}, {}}, 5 * kChunk, Room(5), NoneHeld).ok());
}

TEST(AdoptPolicyTest, QuotasCountAdoptedChunks) {
  AdoptionRoom r = Room(8);
  r.session_quota = 3 * kChunk;
  r.session_bytes = 2 * kChunk;
  EXPECT_THAT(CheckAdoptionFits(0, {{}, {}}, 2 * kChunk, r, NoneHeld).message(),
              HasSubstr("(--session_quota)"));
  EXPECT_TRUE(CheckAdoptionFits(0, {{}}, kChunk, r, NoneHeld).ok());
  r = Room(8);
  r.uid_quota = 4 * kChunk;
  r.uid_bytes = 3 * kChunk;
  absl::Status s = CheckAdoptionFits(0, {{}, {}}, 2 * kChunk, r, NoneHeld);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("uid 2000"));
  EXPECT_THAT(s.message(), HasSubstr("(--uid_quota)"));
}

}  // namespace
}  // namespace gmlake
