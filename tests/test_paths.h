// Copyright 2026 The GMLake Authors.
//
// Where a test finds the files it declared in `data`: binaries of this
// workspace and the shipped traces (traces/ of this repository).

#ifndef GMLAKE_TESTS_TEST_PATHS_H_
#define GMLAKE_TESTS_TEST_PATHS_H_

#include <string>

namespace gmlake {

// The path of a file of this workspace (e.g. "daemon/gmlaked") in the
// test's runfiles, or under bazel-bin outside of `bazel test`.
std::string RunfilePath(const std::string& workspace_relative);

// The path of traces/NAME.trace.gz as the test sees it (through
// //traces:traces in its data), or "" when it is not there.
std::string ShippedTracePath(const std::string& name);

}  // namespace gmlake

#endif  // GMLAKE_TESTS_TEST_PATHS_H_
