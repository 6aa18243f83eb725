// Copyright 2026 The GMLake Authors.
//
// gmlake-handoff: how long one process takes to get N bytes that another,
// idle, process holds (tools/handoff.h). On the CI machine with the host
// backend; on a GPU node with --backend=cuda:
//
//   gmlake-handoff --bytes=40GiB --backend=cuda [--chunk_size=64MiB] [--json]

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "common/bytes.h"
#include "tools/handoff.h"

ABSL_FLAG(std::string, bytes, "1GiB",
          "what the holder holds and is handed off");
ABSL_FLAG(std::string, backend, "host", "gmlaked's backend: host or cuda");
ABSL_FLAG(std::string, chunk_size, "",
          "gmlaked's --chunk_size (empty: its default, the granularity)");
ABSL_FLAG(std::string, daemon_flags, "",
          "more flags for gmlaked, comma-separated");
ABSL_FLAG(std::string, conf, "", "GMLAKE_CONF of both processes' allocators");
ABSL_FLAG(std::string, gmlaked, "",
          "path of gmlaked (default: beside this "
          "binary, or Bazel's ../daemon/gmlaked)");
ABSL_FLAG(bool, json, false, "one JSON object instead of a table");
ABSL_FLAG(bool, progress, true, "show progress on stderr");
ABSL_FLAG(bool, handoff_holder, false, "internal: run as the holder process");
ABSL_FLAG(std::string, socket, "", "internal: the holder's gmlaked socket");

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "gmlake-handoff: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gmlake-handoff [--bytes=1GiB] [--backend=host|cuda] [--chunk_size=N] "
      "[--json]\nTimes a busy process's malloc of memory an idle one holds "
      "in the same gmlaked, split into reclaim, import, map, access and the "
      "rest.");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<uint64_t> bytes =
      gmlake::ParseBytes(absl::GetFlag(FLAGS_bytes));
  if (!bytes.ok() || *bytes == 0) {
    return Fail("--bytes: give a size such as 1GiB or 512MiB");
  }
  if (absl::GetFlag(FLAGS_handoff_holder)) {
    return gmlake::HandoffHolderMain(absl::GetFlag(FLAGS_socket), *bytes,
                                     absl::GetFlag(FLAGS_conf));
  }
  gmlake::HandoffConfig config;
  config.bytes = *bytes;
  config.backend = absl::GetFlag(FLAGS_backend);
  if (!absl::GetFlag(FLAGS_chunk_size).empty()) {
    absl::StatusOr<uint64_t> chunk =
        gmlake::ParseBytes(absl::GetFlag(FLAGS_chunk_size));
    if (!chunk.ok()) return Fail("--chunk_size: give a size such as 64MiB");
    config.chunk_size = *chunk;
  }
  for (absl::string_view f : absl::StrSplit(absl::GetFlag(FLAGS_daemon_flags),
                                            ',', absl::SkipEmpty())) {
    config.daemon_flags.emplace_back(f);
  }
  config.conf = absl::GetFlag(FLAGS_conf);
  config.gmlaked = absl::GetFlag(FLAGS_gmlaked);
  config.self = argv[0];
  config.progress = absl::GetFlag(FLAGS_progress);
  absl::StatusOr<gmlake::HandoffResult> r = gmlake::RunHandoff(config);
  if (!r.ok()) return Fail(std::string(r.status().message()));
  std::printf("%s\n", absl::GetFlag(FLAGS_json)
                          ? gmlake::HandoffJson(*r).c_str()
                          : gmlake::FormatHandoff(*r).c_str());
  return 0;
}
