// Copyright 2026 The GMLake Authors.

#include "tests/test_paths.h"

#include <unistd.h>

#include <cstdlib>

namespace gmlake {

std::string RunfilePath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  if (srcdir != nullptr) {
    return std::string(srcdir) + "/gmlake/" + workspace_relative;
  }
  return "bazel-bin/" + workspace_relative;
}

std::string ShippedTracePath(const std::string& name) {
  const std::string file = "traces/" + name + ".trace.gz";
  const char* srcdir = std::getenv("TEST_SRCDIR");
  // Under `bazel test` the runfiles; otherwise the checkout.
  const std::string p =
      srcdir != nullptr ? std::string(srcdir) + "/gmlake/" + file : file;
  return ::access(p.c_str(), R_OK) == 0 ? p : "";
}

}  // namespace gmlake
