// Copyright 2026 The GMLake Authors.

#include "client/chunk_sizing.h"

#include <cstdint>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::ElementsAre;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

ChunkSizing Sizing(uint64_t base = 4 * kMiB, uint64_t large = kGiB) {
  return {2 * kMiB, base, large, 16};
}

TEST(ChunkSizingTest, SmallShortfallsInChunksOfBaseAndOneLastPiece) {
  EXPECT_THAT(PlanChunks(10 * kMiB, Sizing()),
              ElementsAre(ChunkRun{4 * kMiB, 2}, ChunkRun{2 * kMiB, 1}));
  EXPECT_THAT(PlanChunks(2 * kMiB, Sizing()),
              ElementsAre(ChunkRun{2 * kMiB, 1}));
  // Up to 2 x 16 x base, still base: nothing coarser than today.
  EXPECT_THAT(PlanChunks(124 * kMiB, Sizing()),
              ElementsAre(ChunkRun{4 * kMiB, 31}));
  EXPECT_TRUE(PlanChunks(0, Sizing()).empty());
}

TEST(ChunkSizingTest, LargeShortfallsInFewLargeChunks) {
  // 40 GiB: 1 GiB chunks (the cap), 40 of them.
  EXPECT_THAT(PlanChunks(40 * kGiB, Sizing()), ElementsAre(ChunkRun{kGiB, 40}));
  // 1 GiB: at least 16 chunks, so 64 MiB.
  EXPECT_THAT(PlanChunks(kGiB, Sizing()), ElementsAre(ChunkRun{64 * kMiB, 16}));
  // 10 GiB: 512 MiB x 20.
  EXPECT_THAT(PlanChunks(10 * kGiB, Sizing()),
              ElementsAre(ChunkRun{512 * kMiB, 20}));
  // 128 MiB: 8 MiB x 16.
  EXPECT_THAT(PlanChunks(128 * kMiB, Sizing()),
              ElementsAre(ChunkRun{8 * kMiB, 16}));
  // What does not divide: the large ones, then base, then the last piece.
  EXPECT_THAT(PlanChunks(kGiB + 6 * kMiB, Sizing()),
              ElementsAre(ChunkRun{64 * kMiB, 16}, ChunkRun{4 * kMiB, 1},
                          ChunkRun{2 * kMiB, 1}));
}

TEST(ChunkSizingTest, NoLargeChunkMeansBaseOnly) {
  EXPECT_THAT(PlanChunks(40 * kGiB, Sizing(4 * kMiB, 0)),
              ElementsAre(ChunkRun{4 * kMiB, 10240}));
  EXPECT_THAT(PlanChunks(40 * kGiB, Sizing(4 * kMiB, 4 * kMiB)),
              ElementsAre(ChunkRun{4 * kMiB, 10240}));
  // A base of 0 or below the unit: the unit.
  EXPECT_THAT(PlanChunks(6 * kMiB, Sizing(0, 0)),
              ElementsAre(ChunkRun{2 * kMiB, 3}));
  EXPECT_THAT(PlanChunks(6 * kMiB, Sizing(kMiB, 0)),
              ElementsAre(ChunkRun{2 * kMiB, 3}));
}

TEST(ChunkSizingTest, EverySizeIsAUnitMultipleAndTheyAddUp) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t units = rng() % (uint64_t{1} << (rng() % 40)) + 1;
    const uint64_t bytes = units * 2 * kMiB;
    const ChunkSizing s = Sizing((rng() % 8 + 1) * 2 * kMiB,
                                 (uint64_t{1} << (rng() % 12)) * 2 * kMiB);
    uint64_t sum = 0, last = UINT64_MAX;
    for (const ChunkRun& r : PlanChunks(bytes, s)) {
      ASSERT_EQ(r.size % (2 * kMiB), 0u) << bytes;
      ASSERT_GT(r.count, 0u);
      ASSERT_LT(r.size, last);  // largest first, each size once
      last = r.size;
      sum += r.size * r.count;
    }
    ASSERT_EQ(sum, bytes);
  }
  // Near the top of uint64: no overflow.
  const uint64_t huge = (UINT64_MAX / (2 * kMiB)) * (2 * kMiB);
  uint64_t sum = 0;
  for (const ChunkRun& r : PlanChunks(huge, Sizing())) sum += r.size * r.count;
  EXPECT_EQ(sum, huge);
}

// A process that holds much grows in coarser chunks: the base doubles
// while it stays within 1/held_divisor of what is held and within held_max.
TEST(ChunkSizingTest, ForHeldCoarsensTheBaseWithWhatIsHeld) {
  ChunkSizing s = Sizing();
  s.held_divisor = 2048;
  s.held_max = 16 * kMiB;
  EXPECT_EQ(ForHeld(s, 0).base, 4 * kMiB);
  EXPECT_EQ(ForHeld(s, 16 * kGiB - 2 * kMiB).base, 4 * kMiB);
  EXPECT_EQ(ForHeld(s, 16 * kGiB).base, 8 * kMiB);     // 16 GiB / 2048
  EXPECT_EQ(ForHeld(s, 32 * kGiB).base, 16 * kMiB);    // 32 GiB / 2048
  EXPECT_EQ(ForHeld(s, 1024 * kGiB).base, 16 * kMiB);  // held_max
  // The rest of the sizing is kept, and so PlanChunks cuts as before with
  // the coarser base: 100 MiB held at 32 GiB is 6 x 16 MiB and 4 MiB.
  EXPECT_EQ(ForHeld(s, 32 * kGiB).min_split, s.min_split);
  EXPECT_THAT(PlanChunks(100 * kMiB, ForHeld(s, 32 * kGiB)),
              ElementsAre(ChunkRun{16 * kMiB, 6}, ChunkRun{4 * kMiB, 1}));
  // What is left below the coarse base is cut in the base it had, not
  // into one odd piece: 30 MiB is 16, 3 x 4 and 2, and a shortfall of a
  // few pages is cut as if nothing were held.
  EXPECT_EQ(ForHeld(s, 32 * kGiB).rest_chunk, 4 * kMiB);
  EXPECT_THAT(PlanChunks(30 * kMiB, ForHeld(s, 32 * kGiB)),
              ElementsAre(ChunkRun{16 * kMiB, 1}, ChunkRun{4 * kMiB, 3},
                          ChunkRun{2 * kMiB, 1}));
  EXPECT_EQ(PlanChunks(10 * kMiB, ForHeld(s, 32 * kGiB)),
            PlanChunks(10 * kMiB, s));
  // A large shortfall still gets its large chunks, from the coarser base.
  EXPECT_THAT(PlanChunks(kGiB, ForHeld(s, 32 * kGiB)),
              ElementsAre(ChunkRun{64 * kMiB, 16}));
  // Off, or never past large_chunk, or below the base it was given.
  ChunkSizing off = s;
  off.held_divisor = 0;
  EXPECT_EQ(ForHeld(off, 1024 * kGiB).base, 4 * kMiB);
  EXPECT_EQ(ForHeld(off, 1024 * kGiB).rest_chunk, 0u);
  off = s;
  off.held_max = 0;
  EXPECT_EQ(ForHeld(off, 1024 * kGiB).base, 4 * kMiB);
  ChunkSizing capped = s;
  capped.large_chunk = 8 * kMiB;
  EXPECT_EQ(ForHeld(capped, 1024 * kGiB).base, 8 * kMiB);
  ChunkSizing big = s;
  big.base = 32 * kMiB;
  EXPECT_EQ(ForHeld(big, 1024 * kGiB).base, 32 * kMiB);
  // Whole units: a base of 0 starts from the unit.
  ChunkSizing unit = s;
  unit.base = 0;
  EXPECT_EQ(ForHeld(unit, 8 * kGiB).base, 4 * kMiB);
  EXPECT_EQ(ForHeld(unit, 0).base, 0u);
}

struct Kept {
  int name = 0;
  uint64_t size = 0;
};

std::vector<int> Names(const std::vector<Kept>& chunks) {
  std::vector<int> out;
  for (const Kept& c : chunks) out.push_back(c.name);
  return out;
}

TEST(ChunkSizingTest, KeptChunksLargestThatFitFirst) {
  std::vector<Kept> idle = {{1, 4 * kMiB},
                            {2, 64 * kMiB},
                            {3, 2 * kMiB},
                            {4, 16 * kMiB},
                            {5, 4 * kMiB}};
  std::vector<Kept> taken;
  // 22 MiB: 16 fits, then 4, then 2 (64 does not fit at all).
  EXPECT_EQ(TakeKeptChunks(&idle, 22 * kMiB, 0, &taken), 22 * kMiB);
  EXPECT_THAT(Names(taken), ElementsAre(4, 5, 3));
  EXPECT_THAT(Names(idle), ElementsAre(1, 2));  // by size, left over
  // Only chunks of one size.
  taken.clear();
  EXPECT_EQ(TakeKeptChunks(&idle, 100 * kMiB, 4 * kMiB, &taken), 4 * kMiB);
  EXPECT_THAT(Names(taken), ElementsAre(1));
  EXPECT_THAT(Names(idle), ElementsAre(2));
  taken.clear();
  EXPECT_EQ(TakeKeptChunks(&idle, 0, 0, &taken), 0u);
  EXPECT_TRUE(taken.empty());
}

TEST(ChunkSizingTest, KeptChunksOfThePlannedSizes) {
  const ChunkSizing sizing{2 * kMiB, 4 * kMiB, 0, 64};
  // Three 2 MiB chunks leased ahead for 2 MiB shortfalls, one 4 MiB and a
  // large one.
  std::vector<Kept> idle = {{1, 2 * kMiB},
                            {2, 2 * kMiB},
                            {3, 2 * kMiB},
                            {4, 4 * kMiB},
                            {5, 16 * kMiB}};
  std::vector<Kept> taken;
  // 10 MiB is planned as 4 + 4 + 2: the 4 and one 2; the 2s do not stand
  // in for the second 4, which is left to lease.
  EXPECT_EQ(TakePlannedChunks(&idle, 10 * kMiB, sizing, &taken), 6 * kMiB);
  EXPECT_THAT(Names(taken), ElementsAre(4, 3));
  EXPECT_THAT(Names(idle), ElementsAre(1, 2, 5));  // by size
  // A chunk larger than the base serves whatever it fits, as before.
  taken.clear();
  EXPECT_EQ(TakePlannedChunks(&idle, 20 * kMiB, sizing, &taken), 16 * kMiB);
  EXPECT_THAT(Names(taken), ElementsAre(5));
  EXPECT_THAT(Names(idle), ElementsAre(1, 2));
  // The planned pieces of the unit: both 2s.
  taken.clear();
  EXPECT_EQ(TakePlannedChunks(&idle, 2 * kMiB, sizing, &taken), 2 * kMiB);
  EXPECT_EQ(TakePlannedChunks(&idle, 2 * kMiB, sizing, &taken), 2 * kMiB);
  EXPECT_THAT(Names(taken), ElementsAre(2, 1));
  EXPECT_TRUE(idle.empty());
}

TEST(LeaseAheadBytesTest, DoublesWithTheStreakWithinTheCapAndTheRoom) {
  constexpr uint64_t kMiB = 1 << 20;
  const LeaseAhead ahead{256 * kMiB, 64};
  // The first shortfall leases as much again; then the streak doubles it.
  EXPECT_EQ(LeaseAheadBytes(ahead, 2 * kMiB, 2 * kMiB, 0, 0, ~0ull), 2 * kMiB);
  EXPECT_EQ(
      LeaseAheadBytes(ahead, 2 * kMiB, 2 * kMiB, 4 * kMiB, 4 * kMiB, ~0ull),
      6 * kMiB);
  // The cap: max_bytes, or 1/64 of what is held.
  EXPECT_EQ(LeaseAheadBytes(ahead, 2 * kMiB, 2 * kMiB, 1024 * kMiB, 1024 * kMiB,
                            ~0ull),
            256 * kMiB);
  EXPECT_EQ(LeaseAheadBytes(ahead, 2 * kMiB, 2 * kMiB, 65536 * kMiB,
                            65536 * kMiB, ~0ull),
            1024 * kMiB);
  // The room left, in whole units.
  EXPECT_EQ(LeaseAheadBytes(ahead, 2 * kMiB, 2 * kMiB, 64 * kMiB, 64 * kMiB,
                            5 * kMiB),
            4 * kMiB);
  // Off.
  EXPECT_EQ(LeaseAheadBytes(LeaseAhead{0, 64}, 2 * kMiB, 2 * kMiB, 64 * kMiB,
                            64 * kMiB, ~0ull),
            0u);
}

TEST(LeaseAheadPauseTest, AsMuchAsWasRefusedAtLeastAUnit) {
  constexpr uint64_t kMiB = 1 << 20;
  EXPECT_EQ(LeaseAheadPause(432 * kMiB, 2 * kMiB), 432 * kMiB);
  EXPECT_EQ(LeaseAheadPause(0, 2 * kMiB), 2 * kMiB);
}

}  // namespace
}  // namespace gmlake
