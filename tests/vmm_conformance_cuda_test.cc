// Copyright 2026 The GMLake Authors.
//
// The VMM conformance suite (vmm_conformance.h) on the cuda backend.
//
// GPU test (tagged "gpu"): it needs an NVIDIA driver and a GPU with virtual
// memory management. Without them (CI) the suite is not instantiated and the
// one test CudaConformance.NeedsTheCudaBackend SKIPS with the reason the
// backend gave, so the target stays green in //... . On the GPU machine it
// runs from the bundle (tests/gpu/build_bundle.sh,
// tests/gpu/run_conformance.sh, docs/gpu.md), where $GMLAKE_VMM_PEER names
// the peer binary.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cuda_backend.h"
#include "common/vmm.h"
#include "gtest/gtest.h"
#include "tests/vmm_conformance.h"

namespace gmlake {
namespace {

// Whether the cuda backend comes up on this machine, asked once (after
// main() starts: gtest evaluates the parameters when it registers tests).
const absl::Status& CudaStatus() {
  static const absl::Status* const status = [] {
    absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateCudaBackend();
    if (b.ok()) std::printf("[ INFO     ] %s\n", (*b)->Describe().c_str());
    return new absl::Status(b.status());
  }();
  return *status;
}

// The suite's parameters: the cuda backend where it comes up, else none.
std::vector<VmmConformanceBackend> CudaOrNothing() {
  if (!CudaStatus().ok()) return {};
  return {ConformanceBackend("cuda")};
}

TEST(CudaConformance, NeedsTheCudaBackend) {
  if (!CudaStatus().ok()) {
    GTEST_SKIP() << "GPU test: the VMM conformance suite did not run on the "
                    "cuda backend, which is not available here: "
                 << CudaStatus();
  }
  SUCCEED() << "the suite runs as VmmConformanceTest/Cuda.*";
}

}  // namespace

// Without a GPU there is nothing to instantiate; the skip above says why.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VmmConformanceTest);

INSTANTIATE_TEST_SUITE_P(Cuda, VmmConformanceTest,
                         ::testing::ValuesIn(CudaOrNothing()),
                         VmmConformanceTestName);

}  // namespace gmlake
