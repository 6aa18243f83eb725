// Copyright 2026 The GMLake Authors.
//
// gmlake-growth-bench: how fast a process grows through gmlaked against the
// embedded lake, on the host backend (or cuda), in many small shortfalls as
// a KV cache grows (token by token) or new batch shapes come. For each
// pattern and lake it runs a real Allocator, mallocs until --bytes are
// allocated, and prints GiB/s, the lease calls and chunks it took, and
// what the process held from the lake against what it had allocated, at
// the end of growth and once growth paused. Every run starts cold (a new
// embedded lake; gmlaked trimmed): chunks are created as they are leased.
// --json prints one object.
//
//   bazel run -c opt //tools:gmlake-growth-bench -- --bytes=4GiB [--json]

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/allocator.h"
#include "client/daemon_chunk_source.h"
#include "client/embedded_lake.h"
#include "client/open_chunk_source.h"
#include "client/options.h"
#include "common/bytes.h"
#include "common/vmm.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "tools/daemon_process.h"

ABSL_FLAG(std::string, bytes, "4GiB", "How much each run grows by.");
ABSL_FLAG(int, reps, 3, "Runs of each pattern and lake; the fastest counts.");
ABSL_FLAG(std::string, backend, "host", "host or cuda.");
ABSL_FLAG(std::string, gmlaked, "", "gmlaked binary (default: beside this).");
ABSL_FLAG(std::string, conf, "", "GMLAKE_CONF-style allocator options.");
ABSL_FLAG(bool, json, false, "Print one JSON object instead of a table.");

namespace gmlake {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr double kGiB = double(uint64_t{1} << 30);

struct Pattern {
  std::string name;
  std::string what;
  std::vector<uint64_t> steps;  // malloc sizes, in turn
};

std::vector<Pattern> Patterns() {
  return {
      {"kv", "2 MiB mallocs (a KV cache growing block by block)", {2 * kMiB}},
      {"shapes",
       "2, 6, 10 MiB mallocs in turn (new batch shapes)",
       {2 * kMiB, 6 * kMiB, 10 * kMiB}},
      {"large", "256 MiB mallocs (one large shortfall each)", {256 * kMiB}},
  };
}

struct Result {
  double seconds = 0;
  uint64_t allocated = 0;
  uint64_t lease_calls = 0;  // daemon only
  uint64_t chunks = 0;
  double held_over_allocated = 0;          // at the end of growth
  double settled_held_over_allocated = 0;  // once growth paused
};

// Grows `alloc` by `bytes` in `pattern`'s steps; frees at the end.
absl::StatusOr<double> Grow(Allocator* alloc, const Pattern& pattern,
                            uint64_t bytes, uint64_t* allocated,
                            std::vector<DevicePtr>* ptrs) {
  const absl::Time start = absl::Now();
  uint64_t grown = 0;
  for (size_t i = 0; grown < bytes; ++i) {
    const uint64_t step = pattern.steps[i % pattern.steps.size()];
    absl::StatusOr<DevicePtr> p = alloc->Malloc(step, 0, 0);
    if (!p.ok()) return p.status();
    ptrs->push_back(*p);
    grown += step;
  }
  *allocated = grown;
  return absl::ToDoubleSeconds(absl::Now() - start);
}

absl::StatusOr<Result> RunEmbedded(const Pattern& pattern, uint64_t bytes,
                                   const AllocatorOptions& options,
                                   VmmBackend* backend) {
  Result r;
  EmbeddedLake lake(backend, 0, GrowthSizing(options));
  Allocator alloc(&lake, options);
  std::vector<DevicePtr> ptrs;
  absl::StatusOr<double> s = Grow(&alloc, pattern, bytes, &r.allocated, &ptrs);
  if (!s.ok()) return s.status();
  r.seconds = *s;
  const AllocatorStats st = alloc.stats(0);
  r.chunks = st.chunks_acquired;
  r.held_over_allocated = double(st.reserved_bytes.current) / r.allocated;
  r.settled_held_over_allocated = r.held_over_allocated;
  for (DevicePtr p : ptrs) alloc.Free(p).IgnoreError();
  alloc.EmptyCache();
  return r;
}

// What gmlaked counts as leased to `session`.
uint64_t SessionBytes(DaemonProcess* daemon, uint64_t session) {
  absl::StatusOr<v1::StatusResponse> st = daemon->Status();
  if (!st.ok()) return 0;
  for (const auto& s : st->sessions()) {
    if (s.session_id() == session) return s.leased_bytes();
  }
  return 0;
}

absl::StatusOr<Result> RunDaemon(const Pattern& pattern, uint64_t bytes,
                                 const AllocatorOptions& options,
                                 DaemonProcess* daemon, uint64_t lease_ahead) {
  Result r;
  DaemonSourceOptions d = DaemonSourceOptionsFor(options);
  d.socket_path = daemon->socket();
  d.name = "growth bench";
  d.lease_ahead_max = lease_ahead;
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> src =
      DaemonChunkSource::Connect(d);
  if (!src.ok()) return src.status();
  {
    Allocator alloc(src->get(), options);
    std::vector<DevicePtr> ptrs;
    absl::StatusOr<double> s =
        Grow(&alloc, pattern, bytes, &r.allocated, &ptrs);
    if (!s.ok()) return s.status();
    r.seconds = *s;
    r.lease_calls = (*src)->lease_calls();
    r.chunks = (*src)->chunks_leased();
    const uint64_t session = (*src)->session_id();
    r.held_over_allocated = double(SessionBytes(daemon, session)) / r.allocated;
    // Growth paused: what was leased ahead and not taken goes back.
    const absl::Time until = absl::Now() + absl::Seconds(3);
    uint64_t held = SessionBytes(daemon, session);
    while ((*src)->ahead_bytes(0) > 0 && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    held = SessionBytes(daemon, session);
    r.settled_held_over_allocated = double(held) / r.allocated;
    for (DevicePtr p : ptrs) alloc.Free(p).IgnoreError();
    alloc.EmptyCache();
  }
  (*src)->ReleaseKept(0);
  return r;
}

// Every run starts cold, as the embedded lake's does: gmlaked's free chunks
// go back to the driver (gmlakectl trim).
absl::Status TrimDaemon(DaemonProcess* daemon) {
  v1::TrimRequest req;
  req.set_device(-1);
  v1::TrimResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  grpc::Status s = daemon->stub()->Trim(&ctx, req, &resp);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return absl::OkStatus();
}

// Where growth is served from: the embedded lake, or gmlaked leasing
// ahead by `lease_ahead` (0: not).
struct BenchLake {
  std::string name;
  bool daemon = false;
  uint64_t lease_ahead = 0;
};

// gmlaked with room for the bench (3 x --bytes).
absl::StatusOr<std::unique_ptr<DaemonProcess>> StartBenchDaemon(
    uint64_t capacity, const std::string& self) {
  std::vector<std::string> flags = {"--backend=" + absl::GetFlag(FLAGS_backend),
                                    absl::StrCat("--capacity=", capacity)};
  if (absl::GetFlag(FLAGS_backend) == "host") {
    flags.push_back(absl::StrCat("--host_capacity=", capacity));
  }
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
      FindGmlaked(absl::GetFlag(FLAGS_gmlaked), self), flags);
  if (!daemon.ok()) {
    return absl::Status(
        daemon.status().code(),
        absl::StrCat("starting gmlaked: ", daemon.status().message()));
  }
  return daemon;
}

// The fastest of --reps runs of `pattern` through `lake` (gmlaked trimmed
// before each, so that every run grows from nothing).
absl::StatusOr<Result> BestOf(const Pattern& pattern, const BenchLake& lake,
                              uint64_t bytes, const AllocatorOptions& options,
                              VmmBackend* backend, DaemonProcess* daemon) {
  Result best;
  for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
    if (lake.daemon) {
      if (absl::Status t = TrimDaemon(daemon); !t.ok()) {
        return absl::Status(t.code(),
                            absl::StrCat("trimming gmlaked: ", t.message()));
      }
    }
    absl::StatusOr<Result> r =
        lake.daemon
            ? RunDaemon(pattern, bytes, options, daemon, lake.lease_ahead)
            : RunEmbedded(pattern, bytes, options, backend);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat(pattern.name, " through ", lake.name,
                                       ": ", r.status().message()));
    }
    if (rep == 0 || r->seconds < best.seconds) best = *r;
  }
  return best;
}

nlohmann::json RowJson(const Pattern& pattern, const BenchLake& lake,
                       const Result& best, double embedded_s) {
  const double gib = best.allocated / kGiB;
  nlohmann::json j;
  j["pattern"] = pattern.name;
  j["lake"] = lake.name;
  j["bytes"] = best.allocated;
  j["seconds"] = best.seconds;
  j["gib_per_s"] = gib / best.seconds;
  j["x_embedded"] = best.seconds / embedded_s;
  j["lease_calls"] = best.lease_calls;
  j["chunks"] = best.chunks;
  j["held_over_allocated"] = best.held_over_allocated;
  j["settled_held_over_allocated"] = best.settled_held_over_allocated;
  return j;
}

void PrintRow(const Pattern& pattern, const BenchLake& lake, const Result& best,
              double embedded_s) {
  const double gib = best.allocated / kGiB;
  std::printf(
      "| %s | %s | %.1f | %.1f | %.2f | %s | %s | %.0f | %.3f | %.3f "
      "|\n",
      pattern.name.c_str(), lake.name.c_str(), gib / best.seconds,
      best.seconds * 1e3, best.seconds / embedded_s,
      lake.daemon ? absl::StrCat(best.lease_calls).c_str() : "-",
      lake.daemon ? absl::StrFormat("%.1f", best.lease_calls / gib).c_str()
                  : "-",
      best.chunks / gib, best.held_over_allocated,
      best.settled_held_over_allocated);
}

int Main(const std::string& self) {
  absl::StatusOr<uint64_t> bytes = ParseBytes(absl::GetFlag(FLAGS_bytes));
  if (!bytes.ok()) {
    std::fprintf(stderr, "--bytes: %s\n", bytes.status().ToString().c_str());
    return 2;
  }
  const std::string conf = absl::StrCat(
      "log:false,backend:", absl::GetFlag(FLAGS_backend),
      absl::GetFlag(FLAGS_conf).empty() ? "" : ",", absl::GetFlag(FLAGS_conf));
  absl::StatusOr<AllocatorOptions> options = ParseConf(conf);
  if (!options.ok()) {
    std::fprintf(stderr, "--conf: %s\n", options.status().ToString().c_str());
    return 2;
  }
  const uint64_t capacity = *bytes * 3;
  BackendOptions bo;
  bo.kind = absl::GetFlag(FLAGS_backend);
  bo.host_capacity_bytes = capacity;
  absl::StatusOr<std::unique_ptr<VmmBackend>> backend = CreateBackend(bo);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartBenchDaemon(capacity, self);
  if (!daemon.ok()) {
    std::fprintf(stderr, "%s\n", daemon.status().ToString().c_str());
    return 1;
  }
  const std::vector<BenchLake> lakes = {
      {"embedded", false, 0},
      {"gmlaked, lease_ahead:0", true, 0},
      {absl::StrCat("gmlaked, lease_ahead:", FormatBytes(options->lease_ahead)),
       true, options->lease_ahead},
  };
  const bool json = absl::GetFlag(FLAGS_json);
  nlohmann::json out = nlohmann::json::array();
  if (!json) {
    std::printf("growth by %s, %s backend, fastest of %d runs\n\n",
                FormatBytes(*bytes).c_str(),
                absl::GetFlag(FLAGS_backend).c_str(),
                absl::GetFlag(FLAGS_reps));
    std::printf(
        "| pattern | lake | GiB/s | ms | x embedded | lease calls | "
        "leases/GiB | chunks/GiB | held/allocated (end) | (settled) |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (const Pattern& pattern : Patterns()) {
    double embedded_s = 0;
    for (const BenchLake& lake : lakes) {
      absl::StatusOr<Result> best = BestOf(pattern, lake, *bytes, *options,
                                           backend->get(), daemon->get());
      if (!best.ok()) {
        std::fprintf(stderr, "%s\n", best.status().ToString().c_str());
        return 1;
      }
      if (!lake.daemon) embedded_s = best->seconds;
      out.push_back(RowJson(pattern, lake, *best, embedded_s));
      if (!json) PrintRow(pattern, lake, *best, embedded_s);
    }
  }
  if (json) {
    nlohmann::json all;
    all["bytes"] = *bytes;
    all["backend"] = absl::GetFlag(FLAGS_backend);
    all["runs"] = out;
    std::printf("%s\n", all.dump(2).c_str());
  } else {
    std::printf("\npatterns:\n");
    for (const Pattern& p : Patterns()) {
      std::printf("  %s: %s\n", p.name.c_str(), p.what.c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace gmlake

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gmlake::Main(argv[0]);
}
