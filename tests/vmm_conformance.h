// Copyright 2026 The GMLake Authors.
//
// The VMM conformance suite: one set of tests that every VmmBackend must
// pass, written once and run against the host and accounting backends here
// (vmm_conformance_host_test.cc) and against the cuda backend on a GPU
// machine (vmm_conformance_cuda_test.cc). Instantiating it for a backend is
// one line:
//
//   GMLAKE_INSTANTIATE_VMM_CONFORMANCE(Cuda,
//   gmlake::ConformanceBackend("cuda"));
//
// What it checks: chunks mapped, given access, written and read; two chunks
// stitched side by side with a write across the seam, seen through each
// chunk's own mapping; a chunk exported and its descriptor sent to another
// process (the vmm_peer binary, fork+exec'd), where both processes see each
// other's writes; unmap and remap elsewhere (data intact, access needed
// again); release while mapped; out of memory at the capacity; the error
// code of every bad call (the contract in common/vmm_books.h); events; and
// that the call counters count the calls made.
//
// Memory contents are checked only where has_memory() is true. The
// cross-process test finds the peer binary through $GMLAKE_VMM_PEER, else
// Bazel's runfiles (tests/vmm_peer), else next to the test binary.

#ifndef GMLAKE_TESTS_VMM_CONFORMANCE_H_
#define GMLAKE_TESTS_VMM_CONFORMANCE_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/vmm.h"
#include "gtest/gtest.h"

namespace gmlake {

// A backend under test.
struct VmmConformanceBackend {
  // Suffix of the test names: letters, digits and underscores.
  std::string name;
  // Makes a fresh backend; called once per test.
  std::function<absl::StatusOr<std::unique_ptr<VmmBackend>>()> make;
  // The --backend kind for the peer process; empty skips the cross-process
  // test.
  std::string peer_kind;
  // Device 0's capacity in the backends `make` returns, when a test may rely
  // on it; 0 skips the out-of-memory test (a real GPU is too costly to
  // fill).
  size_t capacity_bytes = 0;
  // Whether ImportChunk refuses a descriptor whose chunk has another size
  // (the emulated backends can tell; the CUDA driver cannot).
  bool import_checks_size = false;
};

// The backend CreateBackend makes for `kind` ("host", "accounting", "cuda").
// For host and accounting, `host_capacity_bytes` (if not 0) becomes the
// capacity the out-of-memory test fills.
VmmConformanceBackend ConformanceBackend(absl::string_view kind,
                                         size_t host_capacity_bytes = 0);

// For INSTANTIATE_TEST_SUITE_P: the param's name.
std::string VmmConformanceTestName(
    const ::testing::TestParamInfo<VmmConformanceBackend>& info);

// gtest prints params; keep it to the name.
inline void PrintTo(const VmmConformanceBackend& b, std::ostream* os) {
  *os << b.name;
}

// The fixture: a fresh backend per test.
class VmmConformanceTest
    : public ::testing::TestWithParam<VmmConformanceBackend> {
 protected:
  void SetUp() override;
  void TearDown() override;

  VmmBackend* backend() { return backend_.get(); }
  // granularity(0).
  size_t g() const { return granularity_; }

  std::unique_ptr<VmmBackend> backend_;
  size_t granularity_ = 0;
};

}  // namespace gmlake

// Runs the whole suite against each backend given (VmmConformanceBackend
// values, e.g. from ConformanceBackend). Use it at namespace scope; it opens
// namespace gmlake itself, because gtest needs the suite's unqualified name.
#define GMLAKE_INSTANTIATE_VMM_CONFORMANCE(prefix, ...)    \
  namespace gmlake {                                       \
  INSTANTIATE_TEST_SUITE_P(prefix, VmmConformanceTest,     \
                           ::testing::Values(__VA_ARGS__), \
                           VmmConformanceTestName);        \
  }

#endif  // GMLAKE_TESTS_VMM_CONFORMANCE_H_
