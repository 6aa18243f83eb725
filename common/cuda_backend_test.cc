// Copyright 2026 The GMLake Authors.
//
// Runs on every machine. Without a CUDA driver (CI) it checks that the cuda
// backend says so clearly instead of crashing, and that the binary never
// linked libcuda. With a driver (the GPU machine, tests/gpu/) it checks that
// the backend comes up and that a chunk round-trips through the driver.
// tests/vmm_conformance_cuda_test.cc holds the full conformance suite.

#include "common/cuda_backend.h"

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cuda_driver.h"
#include "common/unique_fd.h"
#include "common/vmm.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

// Whether any libcuda is mapped into this process, from /proc/self/maps.
bool LibcudaMapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (absl::StrContains(line, "/libcuda.so")) return true;
  }
  return false;
}

// Taken before main() and before any test loads the driver: by then the
// dynamic loader has mapped every library the binary depends on, so this is
// the binary's own (link-time) dependency on libcuda, nothing else.
const bool kLibcudaMappedAtStart = LibcudaMapped();
const bool kLibcudaLoadedAtStart = [] {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h != nullptr) dlclose(h);
  return h != nullptr;
}();

// Whether a driver can be loaded on this machine at all (it is loaded here,
// after the start-up checks above).
bool DriverPresent() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return h != nullptr;  // kept open: LoadCudaDriver opens it again anyway
}

TEST(CudaBackendTest, BinaryDoesNotLinkLibcuda) {
  EXPECT_FALSE(kLibcudaMappedAtStart)
      << "libcuda was mapped before main(): something links against it";
  EXPECT_FALSE(kLibcudaLoadedAtStart)
      << "libcuda.so.1 was loaded before main(): something links against it";
}

TEST(CudaBackendTest, NoDriverGivesClearUnavailable) {
  if (DriverPresent()) GTEST_SKIP() << "a CUDA driver is installed here";
  absl::StatusOr<std::unique_ptr<VmmBackend>> backend = CreateCudaBackend();
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
  const std::string message(backend.status().message());
  EXPECT_TRUE(absl::StartsWith(message, "no CUDA driver: "));
  EXPECT_TRUE(absl::StrContains(message, "dlopen(libcuda.so.1) failed"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "GMLAKE_BACKEND=host")) << message;
  // Asking again gives the same answer (the load is attempted once), and
  // still nothing got loaded.
  absl::StatusOr<std::unique_ptr<VmmBackend>> again = CreateCudaBackend();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status(), backend.status());
  EXPECT_FALSE(LibcudaMapped());
}

TEST(CudaCallErrorTest, NamesTheCallAndTheDriverError) {
  absl::Status s = CudaCallError(
      CUDA_ERROR_INVALID_VALUE, "cuMemMap(addr=0x7f0000000000, size=2097152)",
      "CUDA_ERROR_INVALID_VALUE", "invalid argument");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "cuMemMap(addr=0x7f0000000000, size=2097152) failed: "
            "CUDA_ERROR_INVALID_VALUE (invalid argument)");
}

TEST(CudaCallErrorTest, OutOfMemoryIsResourceExhausted) {
  absl::Status s = CudaCallError(CUDA_ERROR_OUT_OF_MEMORY,
                                 "cuMemCreate(device=0, size=2097152)",
                                 "CUDA_ERROR_OUT_OF_MEMORY", "out of memory");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "CUDA_ERROR_OUT_OF_MEMORY"));
}

TEST(CudaCallErrorTest, CodesByKindOfFailure) {
  EXPECT_EQ(CudaCallError(CUDA_ERROR_NO_DEVICE, "cuInit(0)", "n", "d").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      CudaCallError(CUDA_ERROR_STUB_LIBRARY, "cuInit(0)", "n", "d").code(),
      absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaCallError(CUDA_ERROR_NOT_SUPPORTED, "c", "n", "d").code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CudaCallError(CUDA_ERROR_ILLEGAL_ADDRESS, "c", "n", "d").code(),
            absl::StatusCode::kInternal);
}

TEST(CudaCallErrorTest, UnknownErrorNameFallsBackToTheNumber) {
  absl::Status s =
      CudaCallError(static_cast<CUresult>(12345), "cuFoo()", nullptr, nullptr);
  EXPECT_EQ(s.message(), "cuFoo() failed: CUDA error 12345 (no description)");
}

TEST(CudaVersionStringTest, MajorDotMinor) {
  EXPECT_EQ(CudaVersionString(13000), "13.0");
  EXPECT_EQ(CudaVersionString(12080), "12.8");
}

// --- Only where a driver is installed (the GPU machine) ----------------------

// Whether `ordinal`'s primary context exists in this process (retained by
// anyone), as the driver says.
bool PrimaryContextActive(const CudaDriver& d, int ordinal) {
  CUdevice dev = 0;
  unsigned int flags = 0;
  int active = 0;
  if (d.cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS) return false;
  if (d.cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS) {
    return false;
  }
  return active != 0;
}

// A process creates a context only on a device it uses (issue 11: with a
// context on every visible GPU, each DDP rank took ~0.5 GiB of every other
// rank's GPU). Uses the last device, so that on a machine of several the
// others must stay untouched.
TEST(CudaBackendContextsTest, CreatedOnlyOnTheDevicesUsed) {
  if (!DriverPresent()) GTEST_SKIP() << "no CUDA driver on this machine";
  absl::StatusOr<std::unique_ptr<VmmBackend>> made = CreateCudaBackend();
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<VmmBackend> b = *std::move(made);
  const CudaDriver& d = **LoadCudaDriver();
  const int n = b->device_count();
  for (int i = 0; i < n; ++i) {
    EXPECT_FALSE(PrimaryContextActive(d, i))
        << "device " << i << " got a context when the backend was created";
    EXPECT_TRUE(absl::StartsWith(b->device_uuid(i), "GPU-"))
        << b->device_uuid(i);
    EXPECT_EQ(b->device_uuid(i).size(), 40u) << b->device_uuid(i);
    for (int j = 0; j < i; ++j) EXPECT_NE(b->device_uuid(i), b->device_uuid(j));
  }
  const int used = n - 1;
  const size_t g = b->granularity(used);
  {
    absl::StatusOr<Chunk> chunk = Chunk::Create(b.get(), used, g);
    ASSERT_TRUE(chunk.ok()) << chunk.status();
    absl::StatusOr<VirtualRange> range =
        VirtualRange::Reserve(b.get(), g, 0, used);
    ASSERT_TRUE(range.ok()) << range.status();
    const int devs[] = {used};
    absl::StatusOr<Mapping> m =
        Mapping::Map(b.get(), range->base(), g, chunk->handle(), devs);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(b->Fill(range->base(), 1, g).ok());
    absl::StatusOr<EventHandle> e = b->CreateEvent(used);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE(b->RecordEvent(*e, 0).ok());
    ASSERT_TRUE(b->SyncEvent(*e).ok());
    ASSERT_TRUE(b->DestroyEvent(*e).ok());
    // A range for no device in particular goes to one already in use.
    absl::StatusOr<VirtualRange> any = VirtualRange::Reserve(b.get(), g);
    ASSERT_TRUE(any.ok()) << any.status();
    EXPECT_TRUE(PrimaryContextActive(d, used));
    for (int i = 0; i < n; ++i) {
      if (i != used) {
        EXPECT_FALSE(PrimaryContextActive(d, i))
            << "device " << i << " got a context; only " << used << " is used";
      }
    }
  }
  b.reset();
  EXPECT_FALSE(PrimaryContextActive(d, used))
      << "the backend's context outlived it";
}

class CudaBackendOnGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DriverPresent()) GTEST_SKIP() << "no CUDA driver on this machine";
    absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateCudaBackend();
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = *std::move(b);
    std::printf("[ INFO     ] %s\n", backend_->Describe().c_str());
    // Lands in --gtest_output=json, where tests/gpu/run_conformance.sh
    // reads the driver, device and granularity that were seen.
    RecordProperty("backend", backend_->Describe());
  }
  std::unique_ptr<VmmBackend> backend_;
};

TEST_F(CudaBackendOnGpuTest, ComesUp) {
  EXPECT_EQ(backend_->name(), "cuda");
  ASSERT_GE(backend_->device_count(), 1);
  EXPECT_TRUE(backend_->has_memory());
  for (int d = 0; d < backend_->device_count(); ++d) {
    const size_t g = backend_->granularity(d);
    EXPECT_GT(g, 0u);
    EXPECT_EQ(g & (g - 1), 0u) << "granularity " << g << " not a power of 2";
    // What gmlaked's --capacity=0.9 is a fraction of.
    EXPECT_GT(backend_->device_memory_bytes(d), uint64_t{1} << 30);
  }
  EXPECT_EQ(backend_->granularity(backend_->device_count()), 0u);
  EXPECT_TRUE(absl::StartsWith(backend_->Describe(), "cuda backend: driver "))
      << backend_->Describe();
  EXPECT_TRUE(LibcudaMapped());
}

TEST_F(CudaBackendOnGpuTest, ChunkRoundTripsThroughAnExportedDescriptor) {
  VmmBackend* b = backend_.get();
  const size_t g = b->granularity(0);
  absl::StatusOr<Chunk> chunk = Chunk::Create(b, 0, 2 * g);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  absl::StatusOr<VirtualRange> range = VirtualRange::Reserve(b, 4 * g);
  ASSERT_TRUE(range.ok()) << range.status();

  // Write through one mapping, read back through a second mapping of the
  // same memory imported from an exported descriptor.
  {
    absl::StatusOr<Mapping> m =
        Mapping::Map(b, range->base(), 2 * g, chunk->handle(), {0});
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(b->Fill(range->base(), 0x5a, 2 * g).ok());
    const char hello[] = "stitched";
    ASSERT_TRUE(
        b->CopyFromHost(range->base() + g - 4, hello, sizeof(hello)).ok());
  }
  absl::StatusOr<UniqueFd> fd = b->ExportChunk(chunk->handle());
  ASSERT_TRUE(fd.ok()) << fd.status();
  ASSERT_TRUE(fd->valid());
  absl::StatusOr<ChunkHandle> imported = b->ImportChunk(fd->get(), 0, 2 * g);
  ASSERT_TRUE(imported.ok()) << imported.status();
  Chunk twin(b, *imported, 0, 2 * g);
  fd->Reset();  // the import does not need the descriptor any more
  absl::StatusOr<Mapping> m =
      Mapping::Map(b, range->base() + 2 * g, 2 * g, twin.handle(), {0});
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<char> out(2 * g);
  ASSERT_TRUE(b->CopyToHost(out.data(), m->addr(), out.size()).ok());
  EXPECT_EQ(out[0], 0x5a);
  EXPECT_EQ(std::string(out.data() + g - 4), "stitched");
  EXPECT_EQ(out[2 * g - 1], 0x5a);
}

TEST_F(CudaBackendOnGpuTest, AccessDoesNotSurviveUnmap) {
  VmmBackend* b = backend_.get();
  const size_t g = b->granularity(0);
  absl::StatusOr<Chunk> chunk = Chunk::Create(b, 0, g);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  absl::StatusOr<VirtualRange> range = VirtualRange::Reserve(b, g);
  ASSERT_TRUE(range.ok()) << range.status();
  ASSERT_TRUE(b->Map(range->base(), g, chunk->handle()).ok());
  absl::Status no_access = b->Fill(range->base(), 1, g);
  EXPECT_EQ(no_access.code(), absl::StatusCode::kFailedPrecondition)
      << no_access;
  ASSERT_TRUE(b->SetAccess(range->base(), g, {0}).ok());
  EXPECT_TRUE(b->Fill(range->base(), 1, g).ok());
  ASSERT_TRUE(b->Unmap(range->base(), g).ok());
  ASSERT_TRUE(b->Map(range->base(), g, chunk->handle()).ok());
  EXPECT_EQ(b->Fill(range->base(), 1, g).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(b->Unmap(range->base(), g).ok());
}

TEST_F(CudaBackendOnGpuTest, DriverErrorsNameTheCall) {
  VmmBackend* b = backend_.get();
  // Far more than any GPU has: the driver refuses it.
  const size_t huge = size_t{1} << 50;
  absl::StatusOr<ChunkHandle> c = b->CreateChunk(0, huge);
  ASSERT_FALSE(c.ok());
  const std::string message(c.status().message());
  EXPECT_TRUE(absl::StartsWith(message, "cuMemCreate(device=0, size="))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "failed: CUDA_ERROR_")) << message;
  if (absl::StrContains(message, "CUDA_ERROR_OUT_OF_MEMORY")) {
    EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  }
  std::printf("[ INFO     ] %s\n", message.c_str());

  // A descriptor that is no CUDA handle.
  UniqueFd not_cuda(open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(not_cuda.valid());
  absl::StatusOr<ChunkHandle> i =
      b->ImportChunk(not_cuda.get(), 0, b->granularity(0));
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(i.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(i.status().message(),
                                "cuMemImportFromShareableHandle(fd="))
      << i.status();
  std::printf("[ INFO     ] %s\n", std::string(i.status().message()).c_str());
}

TEST_F(CudaBackendOnGpuTest, EventsCompleteOnTheDefaultStream) {
  VmmBackend* b = backend_.get();
  absl::StatusOr<EventHandle> e = b->CreateEvent(0);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(b->RecordEvent(*e, 0).ok());
  ASSERT_TRUE(b->SyncEvent(*e).ok());
  absl::StatusOr<bool> done = b->QueryEvent(*e);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);
  EXPECT_TRUE(b->DestroyEvent(*e).ok());
  EXPECT_EQ(b->DestroyEvent(*e).code(), absl::StatusCode::kNotFound);
}

// Stitches 64 chunks of one granularity into one range and back, and prints
// the mean wall time of each kind of call, as the VMM layer's counters saw it
// (docs/gpu.md records what an H200 gave).
TEST_F(CudaBackendOnGpuTest, PrintsCallTimings) {
  VmmBackend* b = backend_.get();
  const size_t g = b->granularity(0);
  constexpr int kChunks = 64;
  const VmmCallSnapshot before = b->call_stats();
  std::vector<Chunk> chunks;
  for (int i = 0; i < kChunks; ++i) {
    absl::StatusOr<Chunk> c = Chunk::Create(b, 0, g);
    ASSERT_TRUE(c.ok()) << c.status();
    chunks.push_back(*std::move(c));
  }
  absl::StatusOr<VirtualRange> range = VirtualRange::Reserve(b, kChunks * g);
  ASSERT_TRUE(range.ok()) << range.status();
  for (int i = 0; i < kChunks; ++i) {
    ASSERT_TRUE(b->Map(range->base() + i * g, g, chunks[i].handle()).ok());
  }
  // One SetAccess over the whole stitched range, as the allocator does.
  ASSERT_TRUE(b->SetAccess(range->base(), kChunks * g, {0}).ok());
  ASSERT_TRUE(b->Fill(range->base(), 7, kChunks * g).ok());
  uint8_t last = 0;
  ASSERT_TRUE(b->CopyToHost(&last, range->base() + kChunks * g - 1, 1).ok());
  EXPECT_EQ(last, 7);
  {
    absl::StatusOr<UniqueFd> fd = b->ExportChunk(chunks[0].handle());
    ASSERT_TRUE(fd.ok()) << fd.status();
  }
  for (int i = 0; i < kChunks; ++i) {
    ASSERT_TRUE(b->Unmap(range->base() + i * g, g).ok());
  }
  ASSERT_TRUE(range->Reset().ok());
  for (Chunk& c : chunks) ASSERT_TRUE(c.Reset().ok());

  const VmmCallSnapshot d = b->call_stats() - before;
  EXPECT_EQ(d.Count(VmmCall::kCreate), kChunks);
  EXPECT_EQ(d.Count(VmmCall::kMap), kChunks);
  EXPECT_EQ(d.Count(VmmCall::kSetAccess), 1u);
  EXPECT_EQ(d.Count(VmmCall::kUnmap), kChunks);
  EXPECT_EQ(d.Count(VmmCall::kRelease), kChunks);
  for (VmmCall c : {VmmCall::kCreate, VmmCall::kExport, VmmCall::kReserve,
                    VmmCall::kMap, VmmCall::kSetAccess, VmmCall::kUnmap,
                    VmmCall::kFree, VmmCall::kRelease}) {
    if (d.Count(c) == 0) continue;
    const double us = d.Nanos(c) / 1e3 / d.Count(c);
    std::printf(
        "[ TIMING   ] %-10s %3llu call(s) of %zu bytes: %9.1f us each\n",
        std::string(VmmCallName(c)).c_str(),
        static_cast<unsigned long long>(d.Count(c)),
        c == VmmCall::kSetAccess || c == VmmCall::kReserve ||
                c == VmmCall::kFree
            ? kChunks * g
            : g,
        us);
    RecordProperty(absl::StrCat("us_", VmmCallName(c)),
                   absl::StrFormat("%.1f", us));
  }
}

}  // namespace
}  // namespace gmlake
