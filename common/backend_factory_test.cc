// Copyright 2026 The GMLake Authors.

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "common/vmm.h"
#include "common/vmm_books.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

std::string EmulatedUuid(int n) { return EmulatedDeviceUuid(n); }

// Sets an environment variable for the test's lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

BackendOptions Kind(const char* kind) {
  BackendOptions o;
  o.kind = kind;
  return o;
}

class BackendFactoryTest : public ::testing::Test {
 protected:
  // The tests set these themselves.
  ScopedEnv backend_{"GMLAKE_BACKEND", nullptr};
  ScopedEnv capacity_{"GMLAKE_HOST_CAPACITY", nullptr};
  ScopedEnv visible_{"GMLAKE_HOST_VISIBLE_DEVICES", nullptr};
};

TEST_F(BackendFactoryTest, ExplicitKinds) {
  absl::StatusOr<std::unique_ptr<VmmBackend>> host =
      CreateBackend(Kind("host"));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ((*host)->name(), "host");
  EXPECT_THAT((*host)->Describe(), HasSubstr("64.00 GiB capacity"));
  absl::StatusOr<std::unique_ptr<VmmBackend>> acc =
      CreateBackend(Kind("accounting"));
  ASSERT_TRUE(acc.ok()) << acc.status();
  EXPECT_EQ((*acc)->name(), "accounting");
}

TEST_F(BackendFactoryTest, UnknownKindListsTheValidOnes) {
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(Kind("gpu"));
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status().message(),
            "unknown backend kind 'gpu'; valid kinds: auto, cuda, host, "
            "accounting");
}

// Without a GPU (CI), "auto" falls back to host and says why; with one, it
// is cuda.
TEST_F(BackendFactoryTest, AutoFallsBackToHostWithTheReason) {
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(Kind("auto"));
  ASSERT_TRUE(b.ok()) << b.status();
  if ((*b)->name() == "cuda") GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ((*b)->name(), "host");
  EXPECT_THAT((*b)->Describe(), HasSubstr("; using host backend"));
  absl::StatusOr<std::unique_ptr<VmmBackend>> cuda =
      CreateBackend(Kind("cuda"));
  ASSERT_FALSE(cuda.ok());
  // The reason kept is the cuda backend's own error.
  EXPECT_THAT((*b)->Describe(),
              HasSubstr(std::string(cuda.status().message())));
}

TEST_F(BackendFactoryTest, EnvironmentOverridesOnlyAuto) {
  ScopedEnv env("GMLAKE_BACKEND", "accounting");
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(Kind("auto"));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name(), "accounting");
  EXPECT_THAT((*b)->Describe(), HasSubstr("chosen by GMLAKE_BACKEND"));
  b = CreateBackend(Kind("host"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->name(), "host");
}

TEST_F(BackendFactoryTest, BadEnvironmentIsAnError) {
  ScopedEnv env("GMLAKE_BACKEND", "hots");
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(Kind("auto"));
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("GMLAKE_BACKEND=hots is not a backend kind"));
}

TEST_F(BackendFactoryTest, HostCapacityFromTheEnvironment) {
  ScopedEnv env("GMLAKE_HOST_CAPACITY", "8MiB");
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(Kind("host"));
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<Chunk> chunks;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<Chunk> c = Chunk::Create(b->get(), 0, 2 << 20);
    ASSERT_TRUE(c.ok()) << c.status();
    chunks.push_back(*std::move(c));
  }
  absl::StatusOr<ChunkHandle> fifth = (*b)->CreateChunk(0, 2 << 20);
  EXPECT_EQ(fifth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(fifth.status().message(),
            "host backend: device 0 out of memory: asked 2097152 bytes, 0 of "
            "8388608 free; raise host_capacity_bytes / GMLAKE_HOST_CAPACITY");
  // Options win over the environment.
  BackendOptions o = Kind("accounting");
  o.host_capacity_bytes = 4 << 20;
  absl::StatusOr<std::unique_ptr<VmmBackend>> acc = CreateBackend(o);
  ASSERT_TRUE(acc.ok());
  EXPECT_THAT((*acc)->Describe(), HasSubstr("4.00 MiB capacity"));
}

TEST_F(BackendFactoryTest, BadCapacityInTheEnvironment) {
  for (const char* bad : {"lots", "0", "12 parsecs"}) {
    ScopedEnv env("GMLAKE_HOST_CAPACITY", bad);
    absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(Kind("host"));
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(b.status().message()),
                HasSubstr("GMLAKE_HOST_CAPACITY="));
  }
}

TEST_F(BackendFactoryTest, HostOptions) {
  BackendOptions o = Kind("host");
  o.host_devices = 3;
  o.host_granularity = 4 << 20;
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->device_count(), 3);
  EXPECT_EQ((*b)->granularity(2), size_t{4} << 20);
  EXPECT_TRUE((*b)->CreateChunk(2, 4 << 20).ok());
  EXPECT_EQ((*b)->CreateChunk(3, 4 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.host_devices = 0;
  EXPECT_EQ(CreateBackend(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Emulated devices have UUIDs, as GPUs do, so that client and gmlaked can be
// tested matching devices by UUID rather than by number.
TEST_F(BackendFactoryTest, EmulatedDevicesHaveStableDistinctUuids) {
  for (const char* kind : {"host", "accounting"}) {
    BackendOptions o = Kind(kind);
    o.host_devices = 3;
    absl::StatusOr<std::unique_ptr<VmmBackend>> a = CreateBackend(o);
    absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(o);
    ASSERT_TRUE(a.ok() && b.ok());
    for (int d = 0; d < 3; ++d) {
      EXPECT_EQ((*a)->device_uuid(d), EmulatedUuid(d)) << kind;
      EXPECT_EQ((*a)->device_uuid(d), (*b)->device_uuid(d)) << kind;
    }
    EXPECT_NE((*a)->device_uuid(0), (*a)->device_uuid(1));
    EXPECT_EQ((*a)->device_uuid(3), "");
    EXPECT_EQ((*a)->device_uuid(-1), "");
  }
  EXPECT_EQ(EmulatedUuid(2), "GPU-686f7374-0000-0000-0000-000000000002");
}

// GMLAKE_HOST_VISIBLE_DEVICES is to the emulated devices what
// CUDA_VISIBLE_DEVICES is to GPUs: which of the node's this process sees,
// in its own order.
TEST_F(BackendFactoryTest, VisibleDevicesPickAndOrderTheNodesDevices) {
  ScopedEnv visible("GMLAKE_HOST_VISIBLE_DEVICES", "2,0");
  BackendOptions o = Kind("host");
  o.host_devices = 4;  // the environment decides over this
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(o);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*b)->device_count(), 2);
  EXPECT_EQ((*b)->device_uuid(0), EmulatedUuid(2));
  EXPECT_EQ((*b)->device_uuid(1), EmulatedUuid(0));
  EXPECT_THAT((*b)->Describe(), HasSubstr(EmulatedUuid(2)));
}

TEST_F(BackendFactoryTest, UuidsFromTheOptions) {
  BackendOptions o = Kind("host");
  o.host_uuids = {"GPU-b", "GPU-a"};
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(o);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*b)->device_count(), 2);
  EXPECT_EQ((*b)->device_uuid(0), "GPU-b");
  o.host_uuids = {"GPU-a", "GPU-a"};
  EXPECT_THAT(CreateBackend(o).status().message(), HasSubstr("same UUID"));
}

TEST_F(BackendFactoryTest, BadVisibleDevicesNameTheVariable) {
  for (const char* bad : {"a", "1,1", "-1", "0,,2", "5000"}) {
    ScopedEnv visible("GMLAKE_HOST_VISIBLE_DEVICES", bad);
    absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(Kind("host"));
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(b.status().message(), HasSubstr("GMLAKE_HOST_VISIBLE_DEVICES"));
  }
}

}  // namespace
}  // namespace gmlake
