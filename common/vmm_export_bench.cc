// Copyright 2026 The GMLake Authors.
//
// vmm_export_bench: what a chunk costs on its way through gmlaked, call by
// call, by chunk size and by threads. gmlaked creates and exports a chunk,
// the client imports, maps and grants it; going back, the client unmaps and
// releases its import, and gmlaked closes the descriptor and releases the
// chunk. Growth through gmlaked pays all of it per chunk, so the figures
// decide between larger chunks and more threads (docs/design.md, "Growth
// through gmlaked").
//
//   bazel run -c opt //common:vmm_export_bench -- --backend=cuda
//       [--sizes_mib=2,8,32] [--threads=1,4] [--bytes_mib=2048] [--json]
//
// Every phase runs over --bytes_mib of chunks; a threaded phase splits the
// chunks between threads. Prints microseconds per chunk of wall time.
// Import is from this process's own export (the same driver call a client
// makes on a received descriptor).

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "common/vmm.h"

ABSL_FLAG(std::string, backend, "host", "host or cuda");
ABSL_FLAG(std::string, sizes_mib, "2,8,32", "chunk sizes in MiB");
ABSL_FLAG(std::string, threads, "1,4", "threads per phase to try");
ABSL_FLAG(int, bytes_mib, 2048, "MiB of chunks per phase");
ABSL_FLAG(bool, json, false, "one JSON object per size and thread count");

namespace gmlake {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

struct Chunk {
  ChunkHandle own = 0;
  UniqueFd fd;
  ChunkHandle imported = 0;
};

// Phases, in the order a chunk lives through them.
enum Phase {
  kCreate,
  kExport,
  kImport,
  kMap,
  kAccess,
  kUnmap,
  kReleaseImport,
  kClose,
  kRelease,
  kPhases
};
constexpr const char* kPhaseNames[kPhases] = {
    "create", "export",     "import", "map",    "access",
    "unmap",  "rel_import", "close",  "release"};

// Runs `step(i)` for every chunk index, split over `threads` threads, and
// returns the wall time; the first error wins.
template <typename Step>
absl::StatusOr<absl::Duration> Parallel(size_t n, int threads, Step step) {
  std::vector<absl::Status> errors(threads);
  const absl::Time t = absl::Now();
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      for (size_t i = k; i < n; i += threads) {
        absl::Status s = step(i);
        if (!s.ok()) {
          errors[k] = s;
          return;
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  const absl::Duration d = absl::Now() - t;
  for (const absl::Status& s : errors) {
    if (!s.ok()) return s;
  }
  return d;
}

absl::StatusOr<std::vector<double>> Measure(VmmBackend& b, size_t size,
                                            size_t n, int threads) {
  std::vector<Chunk> chunks(n);
  std::vector<double> us(kPhases, 0);
  auto timed = [&](Phase p, auto step) -> absl::Status {
    absl::StatusOr<absl::Duration> d = Parallel(n, threads, step);
    if (!d.ok()) return d.status();
    us[p] = absl::ToDoubleMicroseconds(*d) / n;
    return absl::OkStatus();
  };
  absl::StatusOr<DevicePtr> range = b.ReserveRange(n * size);
  if (!range.ok()) return range.status();
  absl::Status s = timed(kCreate, [&](size_t i) -> absl::Status {
    absl::StatusOr<ChunkHandle> c = b.CreateChunk(0, size);
    if (!c.ok()) return c.status();
    chunks[i].own = *c;
    return absl::OkStatus();
  });
  if (s.ok())
    s = timed(kExport, [&](size_t i) -> absl::Status {
      absl::StatusOr<UniqueFd> fd = b.ExportChunk(chunks[i].own);
      if (!fd.ok()) return fd.status();
      chunks[i].fd = std::move(*fd);
      return absl::OkStatus();
    });
  if (s.ok())
    s = timed(kImport, [&](size_t i) -> absl::Status {
      absl::StatusOr<ChunkHandle> c =
          b.ImportChunk(chunks[i].fd.get(), 0, size);
      if (!c.ok()) return c.status();
      chunks[i].imported = *c;
      return absl::OkStatus();
    });
  // Map, access and unmap as the allocator does them: one thread, access
  // and unmap in one call over the whole range.
  if (s.ok())
    s = timed(kMap, [&](size_t i) {
      return b.Map(*range + i * size, size, chunks[i].imported);
    });
  if (s.ok()) {
    const absl::Time t = absl::Now();
    s = b.SetAccess(*range, n * size, {0});
    us[kAccess] = absl::ToDoubleMicroseconds(absl::Now() - t) / n;
  }
  if (s.ok()) {
    const absl::Time t = absl::Now();
    s = b.Unmap(*range, n * size);
    us[kUnmap] = absl::ToDoubleMicroseconds(absl::Now() - t) / n;
  }
  if (s.ok())
    s = timed(kReleaseImport,
              [&](size_t i) { return b.ReleaseChunk(chunks[i].imported); });
  if (s.ok())
    s = timed(kClose, [&](size_t i) {
      chunks[i].fd.Reset();
      return absl::OkStatus();
    });
  if (s.ok())
    s = timed(kRelease,
              [&](size_t i) { return b.ReleaseChunk(chunks[i].own); });
  b.FreeRange(*range, n * size).IgnoreError();
  if (!s.ok()) return s;
  return us;
}

std::vector<int> Ints(const std::string& list) {
  std::vector<int> out;
  for (absl::string_view v : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int x;
    if (absl::SimpleAtoi(v, &x) && x > 0) out.push_back(x);
  }
  return out;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const size_t bytes = size_t(absl::GetFlag(FLAGS_bytes_mib)) * kMiB;
  BackendOptions o;
  o.kind = absl::GetFlag(FLAGS_backend);
  o.host_capacity_bytes = 2 * bytes + 64 * kMiB;
  absl::StatusOr<std::unique_ptr<VmmBackend>> made = CreateBackend(o);
  if (!made.ok()) {
    std::fprintf(stderr, "vmm_export_bench: %s\n",
                 std::string(made.status().message()).c_str());
    return 1;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  if (!json) {
    std::printf("%s, %zu MiB per phase; microseconds per chunk (wall)\n",
                o.kind.c_str(), bytes / kMiB);
    std::printf("%6s %7s", "MiB", "threads");
    for (const char* name : kPhaseNames) std::printf(" %10s", name);
    std::printf("\n");
  }
  for (int mib : Ints(absl::GetFlag(FLAGS_sizes_mib))) {
    for (int threads : Ints(absl::GetFlag(FLAGS_threads))) {
      const size_t size = size_t(mib) * kMiB;
      absl::StatusOr<std::vector<double>> us =
          Measure(**made, size, bytes / size, threads);
      if (!us.ok()) {
        std::fprintf(stderr, "vmm_export_bench: %d MiB x %d threads: %s\n", mib,
                     threads, std::string(us.status().message()).c_str());
        return 1;
      }
      if (json) {
        std::printf("{\"chunk_mib\":%d,\"threads\":%d", mib, threads);
        for (int p = 0; p < kPhases; ++p) {
          std::printf(",\"%s_us\":%.2f", kPhaseNames[p], (*us)[p]);
        }
        std::printf("}\n");
      } else {
        std::printf("%6d %7d", mib, threads);
        for (double v : *us) std::printf(" %10.1f", v);
        std::printf("\n");
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace gmlake

int main(int argc, char** argv) { return gmlake::Main(argc, argv); }
