// Copyright 2026 The GMLake Authors.
//
// The conformance suite against the host backend (real memory, real
// descriptors, a real second process) and the accounting backend (the same
// books, no memory), both with a 64 MiB capacity so the out-of-memory test
// is cheap. Plus the host backend's large live set.

#include <dirent.h>
#include <sys/resource.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/vmm.h"
#include "gtest/gtest.h"
#include "tests/vmm_conformance.h"

namespace gmlake {
namespace {

// Two emulated devices, for the tests that use a second one.
VmmConformanceBackend TwoHostDevices() {
  VmmConformanceBackend b = ConformanceBackend("host", 64 << 20);
  b.name = "host_two_devices";
  b.make = [] {
    BackendOptions o;
    o.kind = "host";
    o.host_devices = 2;
    o.host_capacity_bytes = 64 << 20;
    return CreateBackend(o);
  };
  return b;
}

}  // namespace
}  // namespace gmlake

GMLAKE_INSTANTIATE_VMM_CONFORMANCE(Emulated,
                                   gmlake::ConformanceBackend("host", 64 << 20),
                                   gmlake::ConformanceBackend("accounting",
                                                              64 << 20),
                                   gmlake::TwoHostDevices());

namespace gmlake {
namespace {

size_t CountOpenFds() {
  DIR* d = opendir("/proc/self/fd");
  size_t n = 0;
  while (d != nullptr && readdir(d) != nullptr) ++n;
  if (d != nullptr) closedir(d);
  return n;
}

size_t CountMaps() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  size_t n = 0;
  while (std::getline(maps, line)) ++n;
  return n;
}

// A "Name:   123 kB" line of /proc/self/status, in bytes.
uint64_t StatusBytes(absl::string_view name) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, name) && absl::ConsumePrefix(&rest, ":")) {
      rest = absl::StripAsciiWhitespace(rest);
      absl::ConsumeSuffix(&rest, " kB");
      uint64_t kb = 0;
      if (absl::SimpleAtoi(rest, &kb)) return kb * 1024;
    }
  }
  return 0;
}

// Training with 2 MiB chunks keeps tens of thousands of them live: each
// holds a descriptor and each mapped one a VMA. 40 GiB of them (or as many
// as the descriptor limit allows, at least 35 GiB), created, stitched into
// 1 GiB ranges and given access, on a machine with less memory than that:
// untouched pages cost nothing.
TEST(HostBackendLiveSet, CarriesALargeLiveSetOfSmallChunks) {
  BackendOptions options;
  options.kind = "host";
  options.host_capacity_bytes = size_t{64} << 30;
  absl::StatusOr<std::unique_ptr<VmmBackend>> made = CreateBackend(options);
  ASSERT_TRUE(made.ok()) << made.status();
  VmmBackend* b = made->get();
  const size_t g = b->granularity(0);
  ASSERT_EQ(g, size_t{2} << 20);

  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  const size_t open_before = CountOpenFds();
  const size_t want = (size_t{40} << 30) / g;
  const size_t room = lim.rlim_cur - open_before - 64;
  const size_t n = std::min(want, room);
  ASSERT_GE(n * g, size_t{35} << 30)
      << "RLIMIT_NOFILE " << lim.rlim_cur << " leaves room for only " << room
      << " chunks of 2 MiB (every chunk holds a descriptor); raise the hard "
         "limit (ulimit -Hn / LimitNOFILE=)";
  const size_t per_range = (size_t{1} << 30) / g;
  const size_t maps_before = CountMaps();
  const uint64_t shmem_before = StatusBytes("RssShmem");

  const absl::Time start = absl::Now();
  std::vector<ChunkHandle> chunks;
  std::vector<std::pair<DevicePtr, size_t>> ranges;
  chunks.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (i % per_range == 0) {
      const size_t count = std::min(per_range, n - i);
      absl::StatusOr<DevicePtr> r = b->ReserveRange(count * g);
      ASSERT_TRUE(r.ok()) << r.status();
      ranges.emplace_back(*r, count * g);
    }
    absl::StatusOr<ChunkHandle> c = b->CreateChunk(0, g);
    ASSERT_TRUE(c.ok()) << "chunk " << i << ": " << c.status();
    chunks.push_back(*c);
    ASSERT_TRUE(b->Map(ranges.back().first + (i % per_range) * g, g, *c).ok());
  }
  for (const auto& [base, size] : ranges) {
    ASSERT_TRUE(b->SetAccess(base, size, {0}).ok());
  }
  const absl::Duration built = absl::Now() - start;

  // Touch one byte in a sample of chunks, and read it back.
  size_t touched = 0;
  for (size_t i = 0; i < n; i += 97) {
    const DevicePtr at =
        ranges[i / per_range].first + (i % per_range) * g + (i * 4096) % g;
    ASSERT_TRUE(b->Fill(at, static_cast<uint8_t>(i), 1).ok());
    uint8_t back = 0;
    ASSERT_TRUE(b->CopyToHost(&back, at, 1).ok());
    ASSERT_EQ(back, static_cast<uint8_t>(i));
    ++touched;
  }
  // One VMA per mapped chunk (and a few per range), far below
  // vm.max_map_count.
  const size_t maps = CountMaps() - maps_before;
#if defined(__SANITIZE_THREAD__)
  const size_t sanitizer_maps = 1024;  // TSAN maps shadow memory as it goes
#else
  const size_t sanitizer_maps = 0;
#endif
  EXPECT_LE(maps, n + 2 * ranges.size() + 64 + sanitizer_maps);
  // Only touched pages hold memory.
  const uint64_t shmem = StatusBytes("RssShmem") - shmem_before;
  EXPECT_LT(shmem, uint64_t{64} << 20) << "bytes of shared memory resident";

  const absl::Time teardown = absl::Now();
  for (const auto& [base, size] : ranges) {
    ASSERT_TRUE(b->Unmap(base, size).ok());
    ASSERT_TRUE(b->FreeRange(base, size).ok());
  }
  for (ChunkHandle c : chunks) ASSERT_TRUE(b->ReleaseChunk(c).ok());
  const absl::Duration torn = absl::Now() - teardown;
  EXPECT_EQ(CountOpenFds(), open_before);

  std::cout << "[ INFO ] live set: " << n << " chunks of 2 MiB ("
            << absl::StrFormat("%.1f", n * g / double(size_t{1} << 30))
            << " GiB) in " << ranges.size() << " ranges; fd limit "
            << lim.rlim_cur << "; " << maps << " VMAs; " << touched
            << " touched, " << shmem / 1024 << " KiB resident; built in "
            << built << ", torn down in " << torn << std::endl;
  RecordProperty("live_set_chunks", static_cast<int>(n));
}

}  // namespace
}  // namespace gmlake
