// Copyright 2026 The GMLake Authors.
//
// vmm_call_bench: what one VMM call costs through the VMM layer (its
// counters, the books and the backend's effect), per backend, for the
// pattern a stitch makes: N chunks created, mapped one by one into a
// range, given access in one call, unmapped in one call, released.
//
//   bazel run -c opt //common:vmm_call_bench -- [--backends=accounting,host]
//       [--chunks=1024] [--rounds=20] [--json]
//
// Timings are this machine's at this moment: compare backends in one run.
// On a GPU machine --backends=cuda measures the driver through the layer.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/vmm.h"

ABSL_FLAG(std::string, backends, "accounting,host",
          "comma-separated backends to measure: accounting, host, cuda");
ABSL_FLAG(int, chunks, 1024, "chunks of 2 MiB per round");
ABSL_FLAG(int, rounds, 20, "rounds; each maps, grants and unmaps them all");
ABSL_FLAG(bool, json, false, "one JSON object per backend");

namespace gmlake {
namespace {

constexpr size_t kChunk = size_t{2} << 20;

struct Figures {
  double create_us = 0, map_us = 0, set_access_us = 0, unmap_us = 0,
         release_us = 0;
};

double PerCall(absl::Duration d, int calls) {
  return absl::ToDoubleMicroseconds(d) / calls;
}

absl::StatusOr<Figures> Measure(const std::string& kind, int chunks,
                                int rounds) {
  BackendOptions o;
  o.kind = kind;
  o.host_capacity_bytes = chunks * kChunk + kChunk;
  absl::StatusOr<std::unique_ptr<VmmBackend>> made = CreateBackend(o);
  if (!made.ok()) return made.status();
  VmmBackend& b = **made;
  Figures f;
  absl::StatusOr<DevicePtr> range = b.ReserveRange(chunks * kChunk);
  if (!range.ok()) return range.status();
  std::vector<ChunkHandle> handles;
  absl::Time t = absl::Now();
  for (int i = 0; i < chunks; ++i) {
    absl::StatusOr<ChunkHandle> c = b.CreateChunk(0, kChunk);
    if (!c.ok()) return c.status();
    handles.push_back(*c);
  }
  f.create_us = PerCall(absl::Now() - t, chunks);
  absl::Duration map, access, unmap;
  for (int r = 0; r < rounds; ++r) {
    t = absl::Now();
    for (int i = 0; i < chunks; ++i) {
      const DevicePtr at = *range + ((i + r) % chunks) * kChunk;
      if (absl::Status s = b.Map(at, kChunk, handles[i]); !s.ok()) return s;
    }
    map += absl::Now() - t;
    t = absl::Now();
    if (absl::Status s = b.SetAccess(*range, chunks * kChunk, {0}); !s.ok()) {
      return s;
    }
    access += absl::Now() - t;
    t = absl::Now();
    if (absl::Status s = b.Unmap(*range, chunks * kChunk); !s.ok()) return s;
    unmap += absl::Now() - t;
  }
  f.map_us = PerCall(map, rounds * chunks);
  f.set_access_us = PerCall(access, rounds);
  f.unmap_us = PerCall(unmap, rounds);
  t = absl::Now();
  for (ChunkHandle c : handles) {
    if (absl::Status s = b.ReleaseChunk(c); !s.ok()) return s;
  }
  f.release_us = PerCall(absl::Now() - t, chunks);
  if (absl::Status s = b.FreeRange(*range, chunks * kChunk); !s.ok()) return s;
  return f;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int chunks = absl::GetFlag(FLAGS_chunks);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (chunks < 1 || rounds < 1) {
    std::fprintf(stderr,
                 "vmm_call_bench: --chunks and --rounds must be >= 1\n");
    return 2;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  if (!json) {
    std::printf("%d chunks of 2 MiB, %d rounds; microseconds per call\n",
                chunks, rounds);
    std::printf("%-12s %9s %9s %22s %18s %9s\n", "backend", "create", "map",
                "set_access (all)", "unmap (all)", "release");
  }
  int failures = 0;
  for (absl::string_view kind :
       absl::StrSplit(absl::GetFlag(FLAGS_backends), ',', absl::SkipEmpty())) {
    absl::StatusOr<Figures> f = Measure(std::string(kind), chunks, rounds);
    if (!f.ok()) {
      std::fprintf(stderr, "vmm_call_bench: %s: %s\n",
                   std::string(kind).c_str(),
                   std::string(f.status().message()).c_str());
      ++failures;
      continue;
    }
    if (json) {
      std::printf(
          "{\"backend\":\"%s\",\"chunks\":%d,\"rounds\":%d,"
          "\"create_us\":%.3f,\"map_us\":%.3f,\"set_access_us\":%.3f,"
          "\"unmap_us\":%.3f,\"release_us\":%.3f}\n",
          std::string(kind).c_str(), chunks, rounds, f->create_us, f->map_us,
          f->set_access_us, f->unmap_us, f->release_us);
    } else {
      std::printf("%-12s %9.2f %9.2f %22.1f %18.1f %9.2f\n",
                  std::string(kind).c_str(), f->create_us, f->map_us,
                  f->set_access_us, f->unmap_us, f->release_us);
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gmlake

int main(int argc, char** argv) { return gmlake::Main(argc, argv); }
