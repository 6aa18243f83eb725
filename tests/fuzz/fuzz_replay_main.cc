// Copyright 2026 The GMLake Authors.
//
// Replays a fuzz target's seed corpus and every crash the fuzzer found
// (tests/fuzz/corpus/<target>, tests/fuzz/crashes/<target>) through its
// LLVMFuzzerTestOneInput, built with the project's compiler as a plain test:
// the regression tests of what fuzzing found. A target signals a failure
// by aborting, which fails this test with the target's message.
//
//   fuzz_replay <corpus dir> <crashes dir>

#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::string corpus_dir;
std::string crashes_dir;

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || name == "README.md") continue;
    out.push_back(dir + "/" + name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

int Replay(const std::vector<std::string>& files) {
  int n = 0;
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    std::ifstream in(f, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    const std::string data = s.str();
    std::fprintf(stderr, "replaying %s (%zu bytes)\n", f.c_str(), data.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()),
                           data.size());
    ++n;
  }
  return n;
}

TEST(FuzzReplay, SeedCorpus) {
  // The seeds are what the fuzzer starts from: there must be some.
  EXPECT_GT(Replay(Files(corpus_dir)), 0) << "no seeds in " << corpus_dir;
}

TEST(FuzzReplay, CrashesFound) { Replay(Files(crashes_dir)); }

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <corpus dir> <crashes dir>\n", argv[0]);
    return 2;
  }
  corpus_dir = argv[1];
  crashes_dir = argv[2];
  return RUN_ALL_TESTS();
}
