// Copyright 2026 The GMLake Authors.
//
// The chunk state machine alone: no backend, no lock, no daemon. Handles are
// plain numbers here; descriptors are real where they are duplicated.

#include "daemon/chunk_books.h"

#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

constexpr size_t kChunk = 2 << 20;

ChunkBooks Books(uint64_t capacity, ScrubPolicy scrub = ScrubPolicy::kCrossUid,
                 int devices = 1) {
  return ChunkBooks(
      std::vector<ChunkBooksDevice>(devices, {kChunk, capacity * kChunk}),
      scrub);
}

std::vector<ChunkBooks::MadeChunk> Made(size_t n, ChunkHandle first = 100) {
  std::vector<ChunkBooks::MadeChunk> out(n);
  for (size_t i = 0; i < n; ++i) out[i].handle = first + i;
  return out;
}

// created = free + reserved + scrubbing + leased, always.
void ExpectBalanced(const ChunkBooks& b, int device = 0) {
  const ChunkBooks::Counts c = b.counts(device);
  EXPECT_EQ(c.created.chunks, c.free.chunks + c.reserved.chunks +
                                  c.scrubbing.chunks + c.leased.chunks);
  EXPECT_EQ(c.created.bytes, c.free.bytes + c.reserved.bytes +
                                 c.scrubbing.bytes + c.leased.bytes);
  EXPECT_LE(c.created.bytes + c.creating_bytes, b.capacity_bytes(device));
}

// Leases `n` chunks to `session` of `uid` all the way (reserve, make what is
// missing, grant).
std::vector<uint64_t> LeaseAll(ChunkBooks* b, uint64_t lease, uint64_t session,
                               int64_t uid, uint64_t n) {
  ChunkBooks::Reservation r = b->Reserve(lease, session, uid, 0, n, kChunk);
  b->AddMade(&r, Made(r.to_create));
  absl::StatusOr<std::vector<uint64_t>> ids = b->Grant(r);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<uint64_t>{};
}

TEST(ChunkBooksTest, ReserveMakeGrantFree) {
  ChunkBooks b = Books(8);
  EXPECT_EQ(b.room(0), 8 * kChunk);
  b.AddFree(0, 1, kChunk, UniqueFd());
  b.AddFree(0, 2, kChunk, UniqueFd());
  ChunkBooks::Reservation r = b.Reserve(7, 1, 1000, 0, 5, kChunk);
  EXPECT_EQ(r.clean.size(), 2u);  // the fresh ones
  EXPECT_TRUE(r.dirty.empty());
  EXPECT_EQ(r.to_create, 3u);
  EXPECT_EQ(b.counts(0).creating_bytes, 3 * kChunk);
  EXPECT_EQ(b.room(0), 3 * kChunk);
  // In flight: charged to the session and the uid, shown as reserved.
  EXPECT_EQ(b.holding(1).in_flight_bytes, 5 * kChunk);
  EXPECT_EQ(b.holding(1).leased_bytes, 0u);
  EXPECT_EQ(b.uid_bytes(1000), 5 * kChunk);
  EXPECT_EQ(b.counts(0).reserved.chunks, 2u);
  b.AddMade(&r, Made(3));
  EXPECT_EQ(b.counts(0).creating_bytes, 0 * kChunk);
  EXPECT_EQ(b.counts(0).created.chunks, 5u);
  ExpectBalanced(b);
  absl::StatusOr<std::vector<uint64_t>> ids = b.Grant(r);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 5u);
  ChunkBooks::Holding h = b.holding(1);
  EXPECT_EQ(h.leased_bytes, 5 * kChunk);
  EXPECT_EQ(h.in_flight_bytes, 0u);
  EXPECT_EQ(h.leased_chunks, 5u);
  EXPECT_EQ(h.leased_by_device[0].chunks, 5u);
  EXPECT_EQ(b.counts(0).leased.chunks, 5u);
  EXPECT_EQ(b.holders(0), 1u);
  EXPECT_TRUE(b.CheckLeasedTo(1, *ids).ok());
  EXPECT_EQ(b.Free(1, (*ids)[0]), kChunk);
  EXPECT_EQ(b.Free(1, (*ids)[0]), 0u);  // once
  EXPECT_EQ(b.FreeAll(1), 4 * kChunk);
  EXPECT_EQ(b.counts(0).free.chunks, 5u);
  EXPECT_EQ(b.uid_bytes(1000), 0u);
  EXPECT_EQ(b.holders(0), 0u);
  ExpectBalanced(b);
}

// The §1 attacks, on the books alone: nothing but the lease moves the
// chunks of a lease in flight.
TEST(ChunkBooksTest, ALeaseInFlightOwnsItsChunks) {
  ChunkBooks b = Books(6);
  for (int i = 0; i < 6; ++i) b.AddFree(0, i + 1, kChunk, UniqueFd());
  // 3 chunks last held by uid 2001: zeroed for uid 2000.
  std::vector<uint64_t> warm = LeaseAll(&b, 1, 10, 2001, 3);
  b.FreeAll(10);
  ChunkBooks::Reservation r = b.Reserve(2, 20, 2000, 0, 6, kChunk);
  EXPECT_EQ(r.clean.size(), 3u);
  EXPECT_EQ(r.dirty.size(), 3u);
  EXPECT_THAT(r.dirty, UnorderedElementsAreArray(warm));
  EXPECT_EQ(r.dirty_handles.size(), 3u);
  // Its session's end, Return and trim take nothing.
  EXPECT_EQ(b.FreeAll(20), 0u);
  for (uint64_t id = 1; id <= 6; ++id) {
    EXPECT_EQ(b.Free(20, id), 0u);
    EXPECT_EQ(b.Free(0, id), 0u);
    absl::Status s = b.CheckLeasedTo(20, {id});
    EXPECT_THAT(s.message(), HasSubstr("still being served")) << id;
    EXPECT_FALSE(b.DupFds(20, {id}).ok());
  }
  EXPECT_TRUE(b.TakeFreeForTrim(0, 0).empty());
  EXPECT_EQ(b.counts(0).free.chunks, 0u);
  ExpectBalanced(b);
  // Still charged after its session's end, until it is put back.
  EXPECT_EQ(b.uid_bytes(2000), 6 * kChunk);
  b.PutBack(r, /*zeroed=*/true);
  EXPECT_EQ(b.counts(0).free.chunks, 6u);
  EXPECT_EQ(b.uid_bytes(2000), 0u);
  EXPECT_EQ(b.holding(20).in_flight_bytes, 0u);
  // The zeroed ones are fresh now: another uid takes all six clean.
  ChunkBooks::Reservation next = b.Reserve(3, 30, 3000, 0, 6, kChunk);
  EXPECT_EQ(next.clean.size(), 6u);
  b.PutBack(next, false);
  ExpectBalanced(b);
}

TEST(ChunkBooksTest, GrantIsAllOrNothing) {
  ChunkBooks b = Books(4);
  ChunkBooks::Reservation r = b.Reserve(1, 1, 1000, 0, 4, kChunk);
  EXPECT_EQ(r.to_create, 4u);
  b.AddMade(&r, Made(2));  // two could not be made
  EXPECT_EQ(b.counts(0).creating_bytes, 0 * kChunk);
  EXPECT_EQ(b.room(0), 2 * kChunk);
  absl::StatusOr<std::vector<uint64_t>> g = b.Grant(r);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b.counts(0).leased.chunks, 0u);
  EXPECT_EQ(b.counts(0).reserved.chunks, 2u);
  b.PutBack(r, false);
  EXPECT_EQ(b.counts(0).free.chunks, 2u);
  EXPECT_EQ(b.uid_bytes(1000), 0u);
  ExpectBalanced(b);
}

TEST(ChunkBooksTest, FreshThenOwnThenOthersAndWhatNeedsZeroing) {
  for (ScrubPolicy policy :
       {ScrubPolicy::kCrossUid, ScrubPolicy::kAlways, ScrubPolicy::kNever}) {
    SCOPED_TRACE(ScrubPolicyName(policy));
    ChunkBooks b = Books(6, policy);
    std::vector<uint64_t> mine = LeaseAll(&b, 1, 1, 1000, 2);
    std::vector<uint64_t> theirs = LeaseAll(&b, 2, 2, 2000, 2);
    b.FreeAll(1);
    b.FreeAll(2);
    b.AddFree(0, 50, kChunk, UniqueFd());  // one fresh
    ChunkBooks::Reservation r = b.Reserve(3, 3, 1000, 0, 5, kChunk);
    EXPECT_EQ(r.to_create, 0u);
    // Fresh first, then its own uid's, then the others'.
    switch (policy) {
      case ScrubPolicy::kCrossUid:
        EXPECT_EQ(r.clean.size(), 3u);
        EXPECT_THAT(r.dirty, UnorderedElementsAreArray(theirs));
        break;
      case ScrubPolicy::kAlways:
        EXPECT_EQ(r.clean.size(), 1u);  // only the fresh one
        EXPECT_EQ(r.dirty.size(), 4u);
        break;
      case ScrubPolicy::kNever:
        EXPECT_EQ(r.clean.size(), 5u);
        break;
    }
    b.PutBack(r, false);
    ExpectBalanced(b);
  }
}

TEST(ChunkBooksTest, ReturnsAreCheckedWithClearReasons) {
  ChunkBooks b = Books(8);
  std::vector<uint64_t> a = LeaseAll(&b, 1, 1, 1000, 2);
  std::vector<uint64_t> other = LeaseAll(&b, 2, 2, 1000, 1);
  b.AddFree(0, 9, kChunk, UniqueFd());
  EXPECT_TRUE(b.CheckLeasedTo(1, a).ok());
  EXPECT_THAT(b.CheckLeasedTo(1, {a[0], a[0]}).message(),
              HasSubstr("listed twice"));
  EXPECT_THAT(b.CheckLeasedTo(1, {a[0], other[0]}).message(),
              HasSubstr("another session's"));
  EXPECT_THAT(b.CheckLeasedTo(1, {424242}).message(),
              HasSubstr("does not exist"));
  b.Free(1, a[1]);
  EXPECT_THAT(b.CheckLeasedTo(1, {a[1]}).message(), HasSubstr("free"));
}

TEST(ChunkBooksTest, DescriptorsOnlyForTheHolder) {
  ChunkBooks b = Books(2);
  UniqueFd memfd(::memfd_create("chunk_books_test", MFD_CLOEXEC));
  ASSERT_TRUE(memfd.valid());
  b.AddFree(0, 1, kChunk, std::move(memfd));
  std::vector<uint64_t> ids = LeaseAll(&b, 1, 1, 1000, 1);
  absl::StatusOr<std::vector<UniqueFd>> fds = b.DupFds(1, ids);
  ASSERT_TRUE(fds.ok()) << fds.status();
  ASSERT_EQ(fds->size(), 1u);
  EXPECT_TRUE((*fds)[0].valid());
  EXPECT_EQ(b.DupFds(2, ids).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ChunkBooksTest, QuotaFiguresPerSessionAndUid) {
  ChunkBooks b = Books(16, ScrubPolicy::kCrossUid, 2);
  LeaseAll(&b, 1, 1, 1000, 3);
  ChunkBooks::Reservation r = b.Reserve(2, 2, 1000, 1, 2, kChunk);
  LeaseAll(&b, 3, 3, 2000, 1);
  EXPECT_EQ(b.uid_bytes(1000), 5 * kChunk);
  EXPECT_EQ(b.uid_bytes(2000), kChunk);
  EXPECT_EQ(b.holders(0), 2u);
  EXPECT_EQ(b.holders(1), 0u);  // in flight is not held yet
  b.AddMade(&r, Made(2));
  ASSERT_TRUE(b.Grant(r).ok());
  EXPECT_EQ(b.holders(1), 1u);
  EXPECT_EQ(b.holding(2).leased_by_device[1].chunks, 2u);
  EXPECT_EQ(b.uid_bytes(1000), 5 * kChunk);
  b.FreeAll(1);
  EXPECT_EQ(b.uid_bytes(1000), 2 * kChunk);
}

TEST(ChunkBooksTest, TrimTakesFreeChunksThatHeldDataFirst) {
  ChunkBooks b = Books(8);
  for (int i = 0; i < 3; ++i) b.AddFree(0, i + 1, kChunk, UniqueFd());
  std::vector<uint64_t> used = LeaseAll(&b, 1, 1, 1000, 5);  // 3 + 2 new
  b.Free(1, used[0]);
  b.Free(1, used[1]);
  std::vector<ChunkBooks::Released> gone = b.TakeFreeForTrim(0, kChunk);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_TRUE(gone[0].held_data);
  gone = b.TakeFreeForTrim(0, 0);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(b.counts(0).created.chunks, 3u);
  EXPECT_EQ(b.counts(0).leased.chunks, 3u);
  EXPECT_EQ(b.room(0), 5 * kChunk);
  ExpectBalanced(b);
  std::vector<ChunkBooks::Released> all = b.TakeAll();
  EXPECT_EQ(all.size(), 3u);
  EXPECT_EQ(b.counts(0).created.chunks, 0u);
  EXPECT_EQ(b.uid_bytes(1000), 0u);
}

// A chunk whose descriptor is being exported without the lock (pinned)
// stays in the books even if its holder returns it meanwhile: no trim or
// release takes its handle from under the export.
TEST(ChunkBooksTest, PinnedChunksStayUntilUnpinned) {
  ChunkBooks b = Books(4);
  std::vector<uint64_t> ids = LeaseAll(&b, 1, 1, 1000, 2);
  absl::StatusOr<std::vector<ChunkHandle>> handles = b.Pin(1, ids);
  ASSERT_TRUE(handles.ok()) << handles.status();
  EXPECT_EQ(handles->size(), 2u);
  EXPECT_EQ(b.Pin(2, ids).status().code(),
            absl::StatusCode::kFailedPrecondition);
  b.FreeAll(1);  // returned mid-export
  EXPECT_THAT(b.CheckDeliverable(1, ids).message(),
              HasSubstr("no longer leased to session 1"));
  EXPECT_TRUE(b.TakeFreeForTrim(0, 0).empty());
  EXPECT_TRUE(b.Holdings(0, 0).free.empty());
  EXPECT_TRUE(b.TakeFree(0, ids).empty());
  EXPECT_EQ(b.counts(0).free.chunks, 2u);
  b.Unpin(ids);
  const DeviceHoldings h = b.Holdings(0, kChunk);
  EXPECT_EQ(h.created_bytes, 2 * kChunk);
  EXPECT_EQ(h.floor_bytes, kChunk);
  ASSERT_EQ(h.free.size(), 2u);
  EXPECT_NE(h.free[0].free_since, absl::Time());
  std::vector<ChunkBooks::Released> gone = b.TakeFree(0, {ids[0], ids[0]});
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].id, ids[0]);
  EXPECT_EQ(b.counts(0).created.chunks, 1u);
  EXPECT_EQ(b.TakeFreeForTrim(0, 0).size(), 1u);
  ExpectBalanced(b);
}

// After a restart: adopted chunks are leased to their session at once,
// count as created and against the uid, and when freed leave the books
// (for the caller to release) instead of becoming free for anyone else.
TEST(ChunkBooksTest, AdoptedChunksStayWithTheirSessionAndAreNeverPooled) {
  ChunkBooks b = Books(4);
  const uint64_t a = b.Adopt(1, 2000, 0, 11, kChunk, ChunkIdentity{7, 70});
  const uint64_t c = b.Adopt(1, 2000, 0, 12, kChunk, ChunkIdentity{7, 71});
  ExpectBalanced(b);
  EXPECT_EQ(b.counts(0).created.chunks, 2u);
  EXPECT_EQ(b.counts(0).leased.chunks, 2u);
  EXPECT_EQ(b.room(0), 2 * kChunk);
  EXPECT_EQ(b.holding(1).leased_chunks, 2u);
  EXPECT_EQ(b.uid_bytes(2000), 2 * kChunk);
  EXPECT_EQ(b.HeldAs(ChunkIdentity{7, 71}), c);
  EXPECT_EQ(b.HeldAs(ChunkIdentity{}), 0u);
  EXPECT_TRUE(b.CheckLeasedTo(1, {a, c}).ok());
  EXPECT_FALSE(b.CheckLeasedTo(2, {a}).ok());
  EXPECT_EQ(b.Free(2, a), 0u);  // not another session's to free
  EXPECT_EQ(b.Free(1, a), kChunk);
  ExpectBalanced(b);
  EXPECT_EQ(b.counts(0).free.chunks, 0u);  // dropped, not pooled
  EXPECT_EQ(b.counts(0).created.chunks, 1u);
  std::vector<ChunkBooks::Released> gone = b.TakeDropped();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].handle, 11u);
  EXPECT_FALSE(gone[0].held_data);  // never zeroed under its client
  EXPECT_EQ(b.HeldAs(ChunkIdentity{7, 70}), 0u);
  EXPECT_EQ(b.FreeAll(1), kChunk);
  EXPECT_EQ(b.TakeDropped().size(), 1u);
  EXPECT_TRUE(b.TakeDropped().empty());
  EXPECT_EQ(b.counts(0).created.chunks, 0u);
  EXPECT_EQ(b.uid_bytes(2000), 0u);
  // A lease afterwards gets only chunks the daemon made.
  ChunkBooks::Reservation r = b.Reserve(9, 2, 3000, 0, 2, kChunk);
  EXPECT_EQ(r.to_create, 2u);
}

TEST(ChunkBooksTest, MadeChunksAreKnownByTheirMemory) {
  ChunkBooks b = Books(4);
  const uint64_t id = b.AddFree(0, 1, kChunk, UniqueFd(), ChunkIdentity{3, 30});
  EXPECT_EQ(b.HeldAs(ChunkIdentity{3, 30}), id);
  EXPECT_EQ(b.TakeFreeForTrim(0, 0).size(), 1u);
  EXPECT_EQ(b.HeldAs(ChunkIdentity{3, 30}), 0u);
  b.Adopt(1, 5, 0, 2, kChunk, ChunkIdentity{3, 31});
  EXPECT_EQ(b.TakeAll().size(), 1u);
  EXPECT_EQ(b.HeldAs(ChunkIdentity{3, 31}), 0u);
}

// Chunks of several sizes: a lease reuses free chunks of its size only;
// where the room left does not cover what it must make, free chunks of
// other sizes leave the books for the caller to release first.
TEST(ChunkBooksTest, LeasesOfLargeChunksReuseTheirSizeAndRecycleOthers) {
  ChunkBooks b = Books(64);  // 128 MiB
  constexpr uint64_t kLarge = 16 * kChunk;
  for (int i = 0; i < 8; ++i) b.AddFree(0, i + 1, kChunk, UniqueFd());
  // Two large chunks: made in the room left, nothing recycled.
  std::vector<uint64_t> large;
  {
    ChunkBooks::Reservation r = b.Reserve(1, 1, 1000, 0, 2, kLarge);
    EXPECT_TRUE(r.clean.empty());  // the small free ones are not its size
    EXPECT_EQ(r.to_create, 2u);
    EXPECT_TRUE(r.recycled.empty());
    EXPECT_EQ(b.counts(0).creating_bytes, 2 * kLarge);
    b.AddMade(&r, Made(2, 200));
    absl::StatusOr<std::vector<uint64_t>> ids = b.Grant(r);
    ASSERT_TRUE(ids.ok()) << ids.status();
    large = *ids;
  }
  EXPECT_EQ(b.counts(0).leased.bytes, 2 * kLarge);
  EXPECT_EQ(b.holding(1).leased_by_device[0].bytes, 2 * kLarge);
  EXPECT_EQ(b.holding(1).leased_by_device[0].chunks, 2u);
  EXPECT_EQ(b.room(0), 64 * kChunk - 8 * kChunk - 2 * kLarge);
  ExpectBalanced(b);
  // Freed, a large chunk is found again by a lease of its size only.
  EXPECT_EQ(b.Free(1, large[0]), kLarge);
  EXPECT_EQ(b.free_bytes_of_size(0, kLarge), kLarge);
  EXPECT_EQ(b.free_bytes_of_size(0, kChunk), 8 * kChunk);
  ChunkBooks::Reservation same = b.Reserve(2, 2, 1000, 0, 1, kLarge);
  EXPECT_EQ(same.clean.size(), 1u);
  EXPECT_EQ(same.to_create, 0u);
  b.PutBack(same, false);
  // 3 large chunks: 1 free of the size, room for 1 (24 units left), and
  // the third from recycling the 8 small ones (and the room then is 32).
  uint64_t short_bytes = 0;
  EXPECT_TRUE(b.CanReserve(0, 3, kLarge, ChunkBooks::kAnyGrowth, &short_bytes));
  // Without growing, only the free large one and the recyclable 8 units.
  EXPECT_FALSE(b.CanReserve(0, 3, kLarge, 0, &short_bytes));
  EXPECT_EQ(short_bytes, 2 * kLarge - 8 * kChunk);
  EXPECT_FALSE(
      b.CanReserve(0, 4, kLarge, ChunkBooks::kAnyGrowth, &short_bytes));
  EXPECT_EQ(short_bytes, kLarge);
  ChunkBooks::Reservation r = b.Reserve(3, 3, 1000, 0, 3, kLarge);
  EXPECT_EQ(r.clean.size(), 1u);
  EXPECT_EQ(r.to_create, 2u);
  ASSERT_EQ(r.recycled.size(), 8u);
  for (const ChunkBooks::Released& c : r.recycled) {
    EXPECT_EQ(c.size, kChunk);
    EXPECT_FALSE(c.held_data);
  }
  EXPECT_EQ(b.counts(0).free.chunks, 0u);
  EXPECT_EQ(b.room(0), 0u);  // all of it set aside for the two to make
  ExpectBalanced(b);
  b.AddMade(&r, Made(2, 300));
  ASSERT_TRUE(b.Grant(r).ok());
  EXPECT_EQ(b.counts(0).created.bytes, 64 * kChunk);
  EXPECT_EQ(b.uid_bytes(1000), 4 * kLarge);
  ExpectBalanced(b);
  // Trim and the release policy see each chunk's bytes.
  EXPECT_EQ(b.FreeAll(3), 3 * kLarge);
  EXPECT_EQ(b.Holdings(0, 0).free.size(), 3u);
  EXPECT_EQ(b.Holdings(0, 0).free[0].bytes, kLarge);
  std::vector<ChunkBooks::Released> gone = b.TakeFreeForTrim(0, kLarge);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].size, kLarge);
  EXPECT_EQ(b.TakeFreeForTrim(0, kLarge - kChunk).size(), 0u);  // none fits
  ExpectBalanced(b);
}

// Recycling leaves chunks being exported (pinned) alone, and CanReserve
// does not count them.
TEST(ChunkBooksTest, RecyclingSkipsPinnedChunks) {
  ChunkBooks b = Books(4);
  std::vector<uint64_t> ids = LeaseAll(&b, 1, 1, 1000, 4);
  ASSERT_TRUE(b.Pin(1, {ids[0]}).ok());
  b.FreeAll(1);
  uint64_t short_bytes = 0;
  EXPECT_FALSE(
      b.CanReserve(0, 1, 4 * kChunk, ChunkBooks::kAnyGrowth, &short_bytes));
  EXPECT_EQ(short_bytes, kChunk);
  EXPECT_TRUE(
      b.CanReserve(0, 1, 3 * kChunk, ChunkBooks::kAnyGrowth, &short_bytes));
  ChunkBooks::Reservation r = b.Reserve(2, 2, 1000, 0, 1, 3 * kChunk);
  EXPECT_EQ(r.recycled.size(), 3u);
  for (const ChunkBooks::Released& c : r.recycled) EXPECT_NE(c.id, ids[0]);
  EXPECT_EQ(b.counts(0).free.chunks, 1u);
  ExpectBalanced(b);
}

}  // namespace
}  // namespace gmlake
