// Copyright 2026 The GMLake Authors.
//
// VmmBooks alone: what it checks before a side effect runs, that a failed
// effect leaves the books as they were, capacity, events (delays and held
// work), and the chunk descriptor helpers on real memfds. The backends over
// it are tested through tests/vmm_conformance.cc.

#include "common/vmm_books.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

constexpr size_t kG = size_t{2} << 20;  // the granularity of the books here

EmulatedBackendOptions Options(size_t capacity = 8 * kG, int devices = 1) {
  EmulatedBackendOptions o;
  o.devices = devices;
  o.capacity_bytes = capacity;
  o.granularity = kG;
  return o;
}

// Effects that succeed without touching memory, as the accounting backend's.
absl::StatusOr<UniqueFd> NoFd() { return UniqueFd(); }
absl::Status Ok() { return absl::OkStatus(); }
absl::Status Broken() { return absl::InternalError("effect failed"); }

// Hands out fresh aligned addresses, as an address-space reservation would.
class FakeAddressSpace {
 public:
  absl::StatusOr<DevicePtr> Reserve(size_t size, size_t alignment) {
    next_ = (next_ + alignment - 1) / alignment * alignment;
    const DevicePtr at = next_;
    next_ += size;
    return at;
  }

 private:
  DevicePtr next_ = DevicePtr{1} << 40;
};

class VmmBooksTest : public ::testing::Test {
 protected:
  ChunkHandle MustCreate(size_t size = kG, int device = 0) {
    absl::StatusOr<ChunkHandle> c = books_.CreateChunk(device, size, NoFd);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : 0;
  }
  DevicePtr MustReserve(size_t size) {
    absl::StatusOr<DevicePtr> r = books_.ReserveRange(
        size, 0, [&](size_t s, size_t a) { return space_.Reserve(s, a); });
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : 0;
  }
  absl::Status Map(DevicePtr at, size_t size, ChunkHandle c) {
    return books_.Map(at, size, c, [](const ChunkRecord&) { return Ok(); });
  }

  VmmBooks books_{"test", Options()};
  FakeAddressSpace space_;
};

TEST(EmulatedOptionsTest, BadDevicesAndGranularityAreNamed) {
  EmulatedBackendOptions o = Options();
  EXPECT_TRUE(ValidateEmulatedOptions(o).ok());
  o.devices = 0;
  EXPECT_THAT(ValidateEmulatedOptions(o).message(), HasSubstr("devices"));
  o = Options();
  o.granularity = 3 << 20;
  EXPECT_THAT(ValidateEmulatedOptions(o).message(), HasSubstr("granularity"));
  o.granularity = 512;  // below the page size
  EXPECT_EQ(ValidateEmulatedOptions(o).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(VmmBooksTest, CapacityIsChargedAndGivenBack) {
  ChunkHandle a = MustCreate(4 * kG);
  ChunkHandle b = MustCreate(4 * kG);
  EXPECT_EQ(books_.used_bytes(0), 8 * kG);
  absl::StatusOr<ChunkHandle> over = books_.CreateChunk(0, kG, NoFd);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(books_.ReleaseChunk(a).ok());
  EXPECT_EQ(books_.used_bytes(0), 4 * kG);
  EXPECT_EQ(books_.ReleaseChunk(a).code(), absl::StatusCode::kNotFound);
  // Imported chunks are the exporter's: they charge nothing here.
  absl::StatusOr<ChunkHandle> imported = books_.ImportChunk(0, 8 * kG, NoFd);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(books_.used_bytes(0), 4 * kG);
  EXPECT_EQ(books_.live_chunks(), 2u);
  ASSERT_TRUE(books_.ReleaseChunk(b).ok());
  ASSERT_TRUE(books_.ReleaseChunk(*imported).ok());
  EXPECT_EQ(books_.used_bytes(0), 0u);
}

TEST_F(VmmBooksTest, BadChunkArgumentsNeverReachTheEffect) {
  int effects = 0;
  auto counting = [&]() -> absl::StatusOr<UniqueFd> {
    ++effects;
    return UniqueFd();
  };
  EXPECT_EQ(books_.CreateChunk(1, kG, counting).status().code(),
            absl::StatusCode::kInvalidArgument);  // no device 1
  EXPECT_EQ(books_.CreateChunk(0, kG + 4096, counting).status().code(),
            absl::StatusCode::kInvalidArgument);  // not whole granules
  EXPECT_EQ(books_.CreateChunk(0, 0, counting).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(effects, 0);
  EXPECT_EQ(books_.used_bytes(0), 0u);
}

TEST_F(VmmBooksTest, AFailedEffectLeavesTheBooksAsTheyWere) {
  absl::StatusOr<ChunkHandle> c = books_.CreateChunk(
      0, kG, []() -> absl::StatusOr<UniqueFd> { return Broken(); });
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(books_.used_bytes(0), 0u);
  EXPECT_EQ(books_.live_chunks(), 0u);

  ChunkHandle chunk = MustCreate();
  const DevicePtr base = MustReserve(2 * kG);
  EXPECT_FALSE(
      books_.Map(base, kG, chunk, [](const ChunkRecord&) { return Broken(); })
          .ok());
  EXPECT_EQ(books_.live_mappings(), 0u);
  ASSERT_TRUE(Map(base, kG, chunk).ok());
  EXPECT_FALSE(books_.SetAccess(base, kG, {0}, Broken).ok());
  bool ran = false;
  EXPECT_EQ(books_.WithAccessible(base, kG, "Fill", [&] { ran = true; }).code(),
            absl::StatusCode::kFailedPrecondition);  // access was not granted
  EXPECT_FALSE(ran);
  EXPECT_FALSE(books_.Unmap(base, kG, Broken).ok());
  EXPECT_EQ(books_.live_mappings(), 1u);
  ASSERT_TRUE(books_.Unmap(base, kG, Ok).ok());
  EXPECT_FALSE(books_.FreeRange(base, 2 * kG, Broken).ok());
  EXPECT_EQ(books_.live_ranges(), 1u);
  ASSERT_TRUE(books_.FreeRange(base, 2 * kG, Ok).ok());
  EXPECT_EQ(books_.live_ranges(), 0u);
}

TEST_F(VmmBooksTest, MappingsMustFitRangesAndNotOverlap) {
  ChunkHandle one = MustCreate();
  ChunkHandle two = MustCreate(2 * kG);
  const DevicePtr base = MustReserve(4 * kG);
  EXPECT_EQ(Map(base + 4096, kG, one).code(),
            absl::StatusCode::kInvalidArgument);  // misaligned
  EXPECT_EQ(Map(base, 2 * kG, one).code(),
            absl::StatusCode::kInvalidArgument);  // not the chunk's size
  EXPECT_EQ(Map(base + 3 * kG, 2 * kG, two).code(),
            absl::StatusCode::kInvalidArgument);  // past the range's end
  EXPECT_EQ(Map(base + 16 * kG, kG, one).code(),
            absl::StatusCode::kInvalidArgument);  // in no range
  ASSERT_TRUE(Map(base + kG, kG, one).ok());
  absl::Status overlap = Map(base, 2 * kG, two);
  EXPECT_EQ(overlap.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(overlap.message(), HasSubstr("already mapped"));
  ASSERT_TRUE(Map(base + 2 * kG, 2 * kG, two).ok());
  // Access and unmapping cover whole mappings with no gaps.
  EXPECT_EQ(books_.SetAccess(base, 4 * kG, {0}, Ok).code(),
            absl::StatusCode::kFailedPrecondition);        // base is not mapped
  EXPECT_FALSE(books_.Unmap(base + 2 * kG, kG, Ok).ok());  // half a chunk
  EXPECT_EQ(books_.SetAccess(base + kG, 3 * kG, {1}, Ok).code(),
            absl::StatusCode::kInvalidArgument);  // no device 1
  ASSERT_TRUE(books_.SetAccess(base + kG, 3 * kG, {0}, Ok).ok());
  int ran = 0;
  ASSERT_TRUE(
      books_.WithAccessible(base + kG + 100, 2 * kG, "Fill", [&] { ++ran; })
          .ok());
  EXPECT_EQ(ran, 1);
  // A range with mappings is not freed.
  EXPECT_EQ(books_.FreeRange(base, 4 * kG, Ok).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(books_.Unmap(base + kG, 3 * kG, Ok).ok());
  EXPECT_EQ(books_.live_mappings(), 0u);
  EXPECT_EQ(books_.FreeRange(base, 2 * kG, Ok).code(),
            absl::StatusCode::kInvalidArgument);  // free it whole
  ASSERT_TRUE(books_.FreeRange(base, 4 * kG, Ok).ok());
  EXPECT_EQ(books_.FreeRange(base, 4 * kG, Ok).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(VmmBooksTest, ReleasedChunkStaysMappedUntilUnmapped) {
  ChunkHandle c = MustCreate();
  const DevicePtr base = MustReserve(kG);
  ASSERT_TRUE(Map(base, kG, c).ok());
  ASSERT_TRUE(books_.ReleaseChunk(c).ok());
  EXPECT_EQ(books_.used_bytes(0), 0u);
  EXPECT_EQ(books_.live_mappings(), 1u);
  EXPECT_EQ(Map(base, kG, c).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(books_.Unmap(base, kG, Ok).ok());
  ASSERT_TRUE(books_.FreeRange(base, kG, Ok).ok());
}

TEST_F(VmmBooksTest, TakeAllRangesForgetsRangesAndMappings) {
  ChunkHandle c = MustCreate();
  const DevicePtr a = MustReserve(kG);
  MustReserve(2 * kG);
  ASSERT_TRUE(Map(a, kG, c).ok());
  EXPECT_EQ(books_.TakeAllRanges().size(), 2u);
  EXPECT_EQ(books_.live_ranges(), 0u);
  EXPECT_EQ(books_.live_mappings(), 0u);
}

TEST_F(VmmBooksTest, EventsCompleteAtOnceAfterADelayOrWhenHeldWorkFinishes) {
  absl::StatusOr<EventHandle> e = books_.CreateEvent(0);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(books_.CreateEvent(3).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(books_.RecordEvent(*e, 0).ok());
  EXPECT_EQ(*books_.EventDoneAt(*e), absl::InfinitePast());
  ASSERT_TRUE(books_.WaitForEvent(*e).ok());

  // A delay: done no earlier than the delay after the record.
  books_.set_event_delay(absl::Milliseconds(20));
  const absl::Time recorded = absl::Now();
  ASSERT_TRUE(books_.RecordEvent(*e, 0).ok());
  EXPECT_GE(*books_.EventDoneAt(*e), recorded + absl::Milliseconds(20));
  ASSERT_TRUE(books_.WaitForEvent(*e).ok());
  EXPECT_GE(absl::Now(), recorded + absl::Milliseconds(20));
  books_.set_event_delay(absl::ZeroDuration());

  // Held work: a waiter blocks until FinishQueuedWork, however long.
  books_.HoldQueuedWork();
  ASSERT_TRUE(books_.RecordEvent(*e, 0).ok());
  EXPECT_EQ(*books_.EventDoneAt(*e), absl::InfiniteFuture());
  std::atomic<bool> waited{false};
  std::thread waiter([&] {
    EXPECT_TRUE(books_.WaitForEvent(*e).ok());
    waited = true;
  });
  const absl::Time patience = absl::Now() + absl::Seconds(60);
  while (books_.event_waiters() == 0 && absl::Now() < patience) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(books_.event_waiters(), 1);
  EXPECT_FALSE(waited.load());
  books_.FinishQueuedWork();
  waiter.join();
  EXPECT_TRUE(waited.load());
  EXPECT_EQ(books_.event_waiters(), 0);
  // The hold is over: records complete at once again.
  ASSERT_TRUE(books_.RecordEvent(*e, 0).ok());
  EXPECT_EQ(*books_.EventDoneAt(*e), absl::InfinitePast());

  ASSERT_TRUE(books_.DestroyEvent(*e).ok());
  EXPECT_EQ(books_.WaitForEvent(*e).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(books_.RecordEvent(*e, 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(books_.DestroyEvent(*e).code(), absl::StatusCode::kNotFound);
}

TEST_F(VmmBooksTest, DescribesItsDevices) {
  EXPECT_EQ(books_.DescribeDevices(),
            "1 device, 16.00 MiB capacity, 2.00 MiB chunks");
  VmmBooks two("test", Options(kG, 2));
  EXPECT_THAT(two.DescribeDevices(), HasSubstr("2 devices"));
  EXPECT_THAT(two.DescribeDevices(), HasSubstr("capacity each"));
}

TEST(ChunkFdTest, MemfdOfTheSizeAskedAndImportChecks) {
  absl::StatusOr<UniqueFd> fd = MakeChunkMemfd(kG, "test");
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(::lseek(fd->get(), 0, SEEK_END), static_cast<off_t>(kG));
  EXPECT_NE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC, 0);

  absl::StatusOr<UniqueFd> dup = DupChunkFd(fd->get(), kG, "test");
  ASSERT_TRUE(dup.ok()) << dup.status();
  EXPECT_NE(dup->get(), fd->get());
  EXPECT_NE(::fcntl(dup->get(), F_GETFD) & FD_CLOEXEC, 0);

  absl::Status wrong_size = DupChunkFd(fd->get(), 2 * kG, "test").status();
  EXPECT_EQ(wrong_size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_size.message(), HasSubstr("exporter's chunk size"));
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  EXPECT_THAT(DupChunkFd(pipe_fds[0], kG, "test").status().message(),
              HasSubstr("is not a chunk"));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  EXPECT_THAT(DupChunkFd(-1, kG, "test").status().message(),
              HasSubstr("is not open"));
}

}  // namespace
}  // namespace gmlake
