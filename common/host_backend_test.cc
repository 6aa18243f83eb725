// Copyright 2026 The GMLake Authors.
//
// What is particular to the host backend: real pointers, memfds, page
// protections, descriptor limits, injected event delays. The behaviour every
// backend shares is tested by tests/vmm_conformance.cc.

#include "common/host_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "common/vmm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

constexpr size_t kChunk = size_t{2} << 20;

std::unique_ptr<HostBackend> MakeHost(size_t capacity = size_t{1} << 30) {
  HostBackend::Options o;
  o.capacity_bytes = capacity;
  absl::StatusOr<std::unique_ptr<HostBackend>> b = HostBackend::Create(o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

// The permissions column of /proc/self/maps for the mapping holding `addr`
// ("rw-s"), or "" when nothing is mapped there.
std::string Protection(DevicePtr addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::vector<std::string> cols = absl::StrSplit(line, ' ');
    std::vector<std::string> range = absl::StrSplit(cols[0], '-');
    uint64_t lo = 0, hi = 0;
    if (!absl::SimpleHexAtoi(range[0], &lo) ||
        !absl::SimpleHexAtoi(range[1], &hi)) {
      continue;
    }
    if (addr >= lo && addr < hi) return cols[1];
  }
  return "";
}

// How many mappings (VMAs) of /proc/self/maps overlap [lo, hi).
int CountMapsIn(DevicePtr lo, DevicePtr hi) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) {
    std::vector<std::string> cols = absl::StrSplit(line, ' ');
    std::vector<std::string> range = absl::StrSplit(cols[0], '-');
    uint64_t start = 0, end = 0;
    if (absl::SimpleHexAtoi(range[0], &start) &&
        absl::SimpleHexAtoi(range[1], &end) && start < hi && end > lo) {
      ++n;
    }
  }
  return n;
}

TEST(HostBackendTest, DescribeAndFdLimit) {
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max > 1024) {
    // Start low, as under a default login, to see Create raise it.
    rlimit low = lim;
    low.rlim_cur = 1024;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  }
  std::unique_ptr<HostBackend> host = MakeHost(size_t{64} << 30);
  ASSERT_TRUE(host);
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(lim.rlim_cur, lim.rlim_max);
  }
  EXPECT_EQ(host->fd_limit(), lim.rlim_cur);
  EXPECT_EQ(host->Describe(),
            absl::StrCat("host backend (memfd+mmap): 1 device, 64.00 GiB "
                         "capacity, 2.00 MiB chunks, fd limit ",
                         lim.rlim_cur));
  EXPECT_EQ(host->name(), "host");
  EXPECT_EQ(host->device_count(), 1);
  EXPECT_EQ(host->granularity(0), kChunk);
  EXPECT_TRUE(host->has_memory());

  HostBackend::Options o;
  o.devices = 2;
  o.note = "why: a test";
  absl::StatusOr<std::unique_ptr<HostBackend>> two = HostBackend::Create(o);
  ASSERT_TRUE(two.ok());
  EXPECT_THAT((*two)->Describe(), HasSubstr("2 devices, 64.00 GiB capacity "
                                            "each"));
  EXPECT_THAT((*two)->Describe(), HasSubstr("; why: a test"));
}

TEST(HostBackendTest, BadOptions) {
  HostBackend::Options o;
  o.devices = 0;
  EXPECT_EQ(HostBackend::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.devices = 1;
  o.granularity = 3 << 20;
  EXPECT_EQ(HostBackend::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostBackendTest, PagesAreProtectedUntilSetAccessAndAfterUnmap) {
  std::unique_ptr<HostBackend> host = MakeHost();
  absl::StatusOr<Chunk> chunk = Chunk::Create(host.get(), 0, kChunk);
  ASSERT_TRUE(chunk.ok());
  absl::StatusOr<VirtualRange> range =
      VirtualRange::Reserve(host.get(), 4 * kChunk);
  ASSERT_TRUE(range.ok());
  const DevicePtr at = range->base() + kChunk;
  EXPECT_EQ(range->base() % kChunk, 0u);
  EXPECT_EQ(Protection(at), "---p");  // reserved: private, no access
  const DevicePtr lo = range->base(), hi = lo + 4 * kChunk;
  EXPECT_EQ(CountMapsIn(lo, hi), 1);
  ASSERT_TRUE(host->Map(at, kChunk, chunk->handle()).ok());
  EXPECT_EQ(Protection(at), "---s");  // the memfd, shared, still no access
  EXPECT_EQ(CountMapsIn(lo, hi), 3);  // one VMA for the chunk
  ASSERT_TRUE(host->SetAccess(at, kChunk, {0}).ok());
  EXPECT_EQ(Protection(at), "rw-s");
  // A real pointer: the memory is usable directly.
  std::memset(reinterpret_cast<void*>(at), 0x5a, 4096);
  uint8_t b = 0;
  ASSERT_TRUE(host->CopyToHost(&b, at + 4095, 1).ok());
  EXPECT_EQ(b, 0x5a);
  ASSERT_TRUE(host->Unmap(at, kChunk).ok());
  EXPECT_EQ(Protection(at), "---p");
  // The reservation merged back into one VMA.
  EXPECT_EQ(CountMapsIn(lo, hi), 1);
}

TEST(HostBackendTest, PagesAreAllocatedOnlyWhenTouched) {
  std::unique_ptr<HostBackend> host = MakeHost();
  absl::StatusOr<Chunk> chunk = Chunk::Create(host.get(), 0, kChunk);
  ASSERT_TRUE(chunk.ok());
  absl::StatusOr<UniqueFd> fd = host->ExportChunk(chunk->handle());
  ASSERT_TRUE(fd.ok());
  struct stat st {};
  ASSERT_EQ(fstat(fd->get(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(kChunk));
  EXPECT_EQ(st.st_blocks, 0);
  absl::StatusOr<VirtualRange> range =
      VirtualRange::Reserve(host.get(), kChunk);
  ASSERT_TRUE(range.ok());
  absl::StatusOr<Mapping> m =
      Mapping::Map(host.get(), range->base(), kChunk, chunk->handle(), {0});
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(host->Fill(range->base() + 100000, 7, 1).ok());
  ASSERT_EQ(fstat(fd->get(), &st), 0);
  EXPECT_GT(st.st_blocks, 0);
  EXPECT_LE(st.st_blocks * 512, 64 * 1024);  // a page, not the chunk
  // And the exported descriptor reads the same bytes.
  uint8_t b = 0;
  ASSERT_EQ(pread(fd->get(), &b, 1, 100000), 1);
  EXPECT_EQ(b, 7);
}

TEST(HostBackendTest, RunningOutOfDescriptorsIsAnErrorNotACrash) {
  std::unique_ptr<HostBackend> host = MakeHost(size_t{64} << 30);
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Leave room for about 20 more descriptors.
  int highest = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    if (fcntl(fd, F_GETFD) >= 0) highest = fd;
  }
  rlimit low = saved;
  low.rlim_cur = highest + 21;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<Chunk> chunks;
  absl::Status error;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<Chunk> c = Chunk::Create(host.get(), 0, kChunk);
    if (!c.ok()) {
      error = c.status();
      break;
    }
    chunks.push_back(*std::move(c));
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(error.code(), absl::StatusCode::kResourceExhausted) << error;
  EXPECT_THAT(std::string(error.message()),
              HasSubstr("out of file descriptors"));
  EXPECT_THAT(std::string(error.message()), HasSubstr("RLIMIT_NOFILE"));
  EXPECT_GT(chunks.size(), 5u);
  EXPECT_LT(chunks.size(), 30u);
  // The failed create charged nothing.
  EXPECT_EQ(host->used_bytes(0), chunks.size() * kChunk);
}

// Every holder of an exported chunk can reach its file. Nobody may resize
// it (a shrunk memfd kills every mapping of it with SIGBUS, the daemon's
// zeroing included) or add seals that refuse the next holder's mapping.
TEST(HostBackendTest, ExportedChunksAreSealedAndImportsChecked) {
  std::unique_ptr<HostBackend> b = MakeHost();
  absl::StatusOr<ChunkHandle> h = b->CreateChunk(0, kChunk);
  ASSERT_TRUE(h.ok());
  absl::StatusOr<UniqueFd> fd = b->ExportChunk(*h);
  ASSERT_TRUE(fd.ok());
  EXPECT_NE(::ftruncate(fd->get(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(fd->get(), off_t{1} << 40), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::fcntl(fd->get(), F_ADD_SEALS, F_SEAL_WRITE), 0);
  struct stat st {};
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), kChunk);
  // Still a chunk for the next holder.
  std::unique_ptr<HostBackend> other = MakeHost();
  absl::StatusOr<ChunkHandle> in = other->ImportChunk(fd->get(), 0, kChunk);
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<VirtualRange> r = VirtualRange::Reserve(other.get(), kChunk);
  ASSERT_TRUE(r.ok());
  const int devs[] = {0};
  absl::StatusOr<Mapping> m =
      Mapping::Map(other.get(), r->base(), kChunk, *in, devs);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(other->Fill(r->base(), 7, kChunk).ok());
  m->Reset().IgnoreError();
  other->ReleaseChunk(*in).IgnoreError();

  // A memfd of the right size without seals is not imported: another
  // holder could resize it under the mapping.
  UniqueFd loose(::memfd_create("loose", MFD_CLOEXEC));
  ASSERT_TRUE(loose.valid());
  ASSERT_EQ(::ftruncate(loose.get(), kChunk), 0);
  absl::StatusOr<ChunkHandle> bad = other->ImportChunk(loose.get(), 0, kChunk);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("not a sealed chunk"));
  ASSERT_TRUE(b->ReleaseChunk(*h).ok());
}

TEST(HostBackendTest, EventDelay) {
  std::unique_ptr<HostBackend> host = MakeHost();
  absl::StatusOr<EventHandle> e = host->CreateEvent(0);
  ASSERT_TRUE(e.ok());
  host->set_event_delay(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  ASSERT_TRUE(host->RecordEvent(*e, 0).ok());
  absl::StatusOr<bool> done = host->QueryEvent(*e);
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done);
  ASSERT_TRUE(host->SyncEvent(*e).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  done = host->QueryEvent(*e);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  host->set_event_delay(absl::ZeroDuration());
  ASSERT_TRUE(host->RecordEvent(*e, 0).ok());
  EXPECT_TRUE(*host->QueryEvent(*e));
  EXPECT_TRUE(host->DestroyEvent(*e).ok());
}

// The capture graph the allocator reads (VmmBackend::CaptureFrontier and
// CaptureFollows): work on a stream depends on its frontier, a join adds
// another stream's frontier, and ancestry goes back through both.
TEST(HostBackendTest, CaptureGraphOrdersWorkThroughJoins) {
  std::unique_ptr<HostBackend> host = MakeHost();
  EXPECT_TRUE(absl::IsFailedPrecondition(host->CaptureFrontier(1).status()));
  host->SetCaptured(1, true);
  host->SetCaptured(2, true);
  const uint64_t a = host->CaptureKernel(1);
  host->CaptureJoin(2, 1);
  const uint64_t b = host->CaptureKernel(2);  // after a
  EXPECT_THAT(*host->CaptureFrontier(2), ::testing::ElementsAre(b));
  EXPECT_FALSE(*host->CaptureFollows(1, {b}));  // not joined back yet
  EXPECT_TRUE(*host->CaptureFollows(1, {a}));
  host->CaptureJoin(1, 2);
  EXPECT_TRUE(*host->CaptureFollows(1, {b}));  // joined, not yet run
  host->CaptureKernel(1);
  EXPECT_TRUE(*host->CaptureFollows(1, {a, b}));  // through an ancestor
  EXPECT_EQ(host->capture_violations(), 0u);
  host->SetCaptured(1, false);
  EXPECT_TRUE(
      absl::IsFailedPrecondition(host->CaptureFollows(1, {a}).status()));
  host->SetCaptured(2, false);
}

TEST(HostBackendTest, DestroyingTheBackendReleasesItsAddressSpace) {
  DevicePtr base = 0;
  {
    std::unique_ptr<HostBackend> host = MakeHost();
    absl::StatusOr<DevicePtr> r = host->ReserveRange(8 * kChunk);
    ASSERT_TRUE(r.ok());
    base = *r;
    absl::StatusOr<ChunkHandle> c = host->CreateChunk(0, kChunk);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(host->Map(base, kChunk, *c).ok());
    ASSERT_TRUE(host->SetAccess(base, kChunk, {0}).ok());
    EXPECT_EQ(Protection(base), "rw-s");
  }
  EXPECT_EQ(Protection(base), "");
  EXPECT_EQ(Protection(base + 7 * kChunk), "");
}

// Many threads mapping into one range; all racing for one address: exactly
// one wins each round, and the books stay consistent.
TEST(HostBackendTest, ConcurrentMapsAreAtomic) {
  std::unique_ptr<HostBackend> host = MakeHost();
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  absl::StatusOr<VirtualRange> range =
      VirtualRange::Reserve(host.get(), (kThreads + 1) * kChunk);
  ASSERT_TRUE(range.ok());
  std::vector<Chunk> chunks;
  for (int t = 0; t < kThreads; ++t) {
    chunks.push_back(*Chunk::Create(host.get(), 0, kChunk));
  }
  const DevicePtr contested = range->base() + kThreads * kChunk;
  std::atomic<int> wins{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const DevicePtr own = range->base() + t * kChunk;
      for (int r = 0; r < kRounds; ++r) {
        // Own slot: always succeeds, and the data is ours.
        if (!host->Map(own, kChunk, chunks[t].handle()).ok() ||
            !host->SetAccess(own, kChunk, {0}).ok() ||
            !host->Fill(own, static_cast<uint8_t>(t), kChunk).ok()) {
          failures++;
        }
        uint8_t b = 0xff;
        if (!host->CopyToHost(&b, own + kChunk - 1, 1).ok() || b != t) {
          failures++;
        }
        if (!host->Unmap(own, kChunk).ok()) failures++;
        // Contested slot: whoever maps it unmaps it again.
        if (host->Map(contested, kChunk, chunks[t].handle()).ok()) {
          wins++;
          if (!host->Unmap(contested, kChunk).ok()) failures++;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(wins.load(), 0);
  EXPECT_EQ(Protection(contested), "---p");
}

}  // namespace
}  // namespace gmlake
