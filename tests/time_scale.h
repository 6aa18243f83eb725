// Copyright 2026 The GMLake Authors.
//
// How much longer than in an optimised build a test may take for what it
// bounds in time: sanitizers run the same code 5-15 times slower (TSAN
// most), so a liveness bound written for users' builds (a lease within
// 1 s) is scaled for them. GMLAKE_TEST_TIME_SCALE overrides (an integer
// >= 1). Counts are never scaled: only deadlines.

#ifndef GMLAKE_TESTS_TIME_SCALE_H_
#define GMLAKE_TESTS_TIME_SCALE_H_

#include <cstdlib>

#include "absl/time/time.h"
#include "common/mutex.h"  // GMLAKE_THREAD_SANITIZER

namespace gmlake {
namespace testing {

inline int TimeScale() {
  if (const char* v = std::getenv("GMLAKE_TEST_TIME_SCALE")) {
    const int n = std::atoi(v);
    if (n >= 1) return n;
  }
#if defined(GMLAKE_THREAD_SANITIZER)
  return 10;
#elif defined(__SANITIZE_ADDRESS__)
  return 4;
#else
  return 1;
#endif
}

// `d` for this build: the bound itself in an optimised one.
inline absl::Duration Scaled(absl::Duration d) { return d * TimeScale(); }

}  // namespace testing
}  // namespace gmlake

#endif  // GMLAKE_TESTS_TIME_SCALE_H_
