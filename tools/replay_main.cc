// Copyright 2026 The GMLake Authors.
//
// gmlake-replay: replays real allocation traces through GMLake's allocator
// and prints, per trace, what it needed beside what PyTorch needed.
//
//   gmlake-replay [--capacity] [--baseline=FILE] [--json]
//                 [--plot=FILE.svg | --plot_dir=DIR] [TRACE|DIR ...]
//
// --plot draws one trace's memory over time as SVG (tools/memory_figure.h);
// with --lake it draws the lake-share run.
//
// With no trace named it replays the repository's traces/*.trace.gz.

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/bytes.h"
#include "nlohmann/json.hpp"
#include "tools/lake_share.h"
#include "tools/memory_figure.h"
#include "tools/replay.h"
#include "tools/svg_chart.h"
#include "tools/trace.h"

ABSL_FLAG(std::string, backend, "host",
          "VMM backend for the measured run: host, accounting, cuda or auto");
ABSL_FLAG(std::string, bisect_backend, "accounting",
          "backend for the capacity bisection replays (same decisions as the "
          "host backend, no memory): accounting, host, cuda");
ABSL_FLAG(bool, capacity, false,
          "also bisect the smallest capacity that replays each trace "
          "(min_capacity_bytes, 16 MiB resolution)");
ABSL_FLAG(uint64_t, resolution_mib, 16, "bisection resolution in MiB");
ABSL_FLAG(std::string, baseline, "",
          "baselines.json with PyTorch's figures to print beside ours");
ABSL_FLAG(bool, json, false, "one JSON object per trace instead of a table");
ABSL_FLAG(std::string, conf, "", "GMLAKE_CONF options for the allocator");
ABSL_FLAG(uint64_t, check_every, 0,
          "check the allocator's books every N events (0: never)");
ABSL_FLAG(bool, progress, true, "show progress on stderr");
ABSL_FLAG(bool, lake, false,
          "the lake-share benchmark: one client process per trace against "
          "one gmlaked, busy in turns (see tools/lake_share.h)");
ABSL_FLAG(int, lake_rounds, 2, "--lake: turns each client is busy");
ABSL_FLAG(std::string, lake_capacity, "",
          "--lake: gmlaked's capacity (default 1.05 x the floor)");
ABSL_FLAG(bool, lake_prefer_reclaim, false,
          "--lake: start gmlaked with --prefer_reclaim (idle processes give "
          "back their caches before the lake creates more)");
ABSL_FLAG(std::string, lake_socket, "",
          "--lake: use the gmlaked at this socket instead of starting one");
ABSL_FLAG(std::string, gmlaked, "",
          "--lake: path of gmlaked (default: beside this binary, or "
          "../daemon/gmlaked in bazel-bin)");
ABSL_FLAG(bool, lake_plan, false,
          "--lake: only print the floor and the capacity it would use, as "
          "JSON (for starting gmlaked separately)");
ABSL_FLAG(std::string, plot, "",
          "write a figure of memory over time to this .svg file: of the one "
          "trace replayed, or with --lake of the lake-share run");
ABSL_FLAG(std::string, plot_dir, "",
          "write a figure of memory over time for every trace replayed, as "
          "DIR/<trace>.svg");
ABSL_FLAG(bool, lake_client, false,
          "internal: run as one client process of --lake");

namespace gmlake {
namespace {

std::string Resolve(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  // Under `bazel run`, relative paths are the user's, not the runfiles'.
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  return wd != nullptr ? absl::StrCat(wd, "/", path) : path;
}

std::vector<std::string> TraceFiles(const std::vector<std::string>& args) {
  std::vector<std::string> in = args;
  if (in.empty()) {
    // The shipped traces: under `bazel run` in the workspace, else here.
    const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
    in.push_back(ws != nullptr ? absl::StrCat(ws, "/traces") : "traces");
  }
  std::vector<std::string> files;
  for (const std::string& a : in) {
    const std::string p = Resolve(a);
    DIR* dir = opendir(p.c_str());
    if (dir == nullptr) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    while (dirent* e = readdir(dir)) {
      if (absl::EndsWith(e->d_name, ".trace.gz")) {
        found.push_back(absl::StrCat(p, "/", e->d_name));
      }
    }
    closedir(dir);
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

void Progress(const std::string& line) {
  if (!absl::GetFlag(FLAGS_progress)) return;
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

double Gib(uint64_t b) { return b / double(uint64_t{1} << 30); }

// The lake-share run as --json prints it.
nlohmann::json LakeShareJson(const LakeShareConfig& config,
                             const LakeShareResult& r) {
  nlohmann::json out;
  out["processes"] = config.trace_paths.size();
  out["rounds"] = config.rounds;
  out["backend"] = config.backend;
  out["capacity_bytes"] = r.capacity_bytes;
  out["node_peak_bytes"] = r.node_peak_bytes;
  out["sum_of_process_peaks_bytes"] = r.sum_of_process_peaks_bytes;
  out["floor_bytes"] = r.floor_bytes;
  out["node_peak_over_floor"] = r.node_peak_over_floor;
  for (const LakePhase& p : r.phases) {
    out["phases"].push_back(
        {{"round", p.round},
         {"busy", p.trace},
         {"busy_reserved_peak_bytes", p.client_reserved_peak},
         {"node_bytes", p.node_bytes},
         {"floor_bytes", p.floor_bytes},
         {"pressure_requests", p.pressure_requests},
         {"pressure_rounds", p.pressure_rounds},
         {"leases_served", p.leases_served},
         {"leases_failed", p.leases_failed},
         {"leased_chunks", p.leased_chunks},
         {"leased_bytes", p.leased_bytes},
         {"busy_driver_calls", MemoryCallCounts(p.busy_calls)},
         {"idle_driver_calls", MemoryCallCounts(p.idle_calls)},
         {"seconds", p.seconds}});
  }
  return out;
}

// The lake-share run as a table, one row per phase.
void PrintLakeShareTable(const LakeShareConfig& config,
                         const LakeShareResult& r) {
  std::printf(
      "lake-share: %zu processes against one gmlaked (%s backend), "
      "capacity %.2f GiB, %d rounds\n",
      config.trace_paths.size(), config.backend.c_str(), Gib(r.capacity_bytes),
      config.rounds);
  // gmlaked's counters are totals since it started: a phase's leases and
  // chunks are the difference from the phase before (the first phase's
  // include whatever the daemon served before the run, none for a new one).
  // Its driver calls: maps and unmaps while busy, and releases while idle
  // before the phase (what answering pressure cost it).
  std::printf("%5s %-22s %14s %12s %12s %9s %7s %7s %7s %7s %9s %8s\n", "round",
              "busy", "its peak GiB", "node GiB", "floor GiB", "pressure",
              "leases", "chunks", "maps", "unmaps", "idle rel.", "seconds");
  uint64_t leases_before = 0, chunks_before = 0;
  for (const LakePhase& p : r.phases) {
    std::printf(
        "%5d %-22s %14.2f %12.2f %12.2f %9llu %7llu %7llu %7llu %7llu %9llu "
        "%8.1f\n",
        p.round + 1, p.trace.c_str(), Gib(p.client_reserved_peak),
        Gib(p.node_bytes), Gib(p.floor_bytes),
        static_cast<unsigned long long>(p.pressure_requests),
        static_cast<unsigned long long>(p.leases_served - leases_before),
        static_cast<unsigned long long>(p.leased_chunks - chunks_before),
        static_cast<unsigned long long>(p.busy_calls.Count(VmmCall::kMap)),
        static_cast<unsigned long long>(p.busy_calls.Count(VmmCall::kUnmap)),
        static_cast<unsigned long long>(p.idle_calls.Count(VmmCall::kRelease)),
        p.seconds);
    leases_before = p.leases_served;
    chunks_before = p.leased_chunks;
  }
  std::printf(
      "node peak %.2f GiB = %.3f x the floor (%.2f GiB live across "
      "processes at most); separate processes would hold %.2f GiB "
      "(%.3f x)\n",
      Gib(r.node_peak_bytes), r.node_peak_over_floor, Gib(r.floor_bytes),
      Gib(r.sum_of_process_peaks_bytes),
      static_cast<double>(r.sum_of_process_peaks_bytes) / r.floor_bytes);
}

int LakeMain(const std::vector<std::string>& args) {
  LakeShareConfig config;
  config.trace_paths = TraceFiles(args);
  config.rounds = absl::GetFlag(FLAGS_lake_rounds);
  config.backend = absl::GetFlag(FLAGS_backend);
  config.conf = absl::GetFlag(FLAGS_conf);
  config.socket = absl::GetFlag(FLAGS_lake_socket);
  config.prefer_reclaim = absl::GetFlag(FLAGS_lake_prefer_reclaim);
  config.gmlaked = Resolve(absl::GetFlag(FLAGS_gmlaked));
  config.progress = absl::GetFlag(FLAGS_progress);
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  config.self = len > 0 ? std::string(self, len) : "gmlake-replay";
  if (const std::string c = absl::GetFlag(FLAGS_lake_capacity); !c.empty()) {
    absl::StatusOr<uint64_t> b = ParseBytes(c);
    if (!b.ok()) {
      std::cerr << "gmlake-replay: --lake_capacity: " << b.status().message()
                << "\n";
      return 2;
    }
    config.capacity = *b;
  }
  if (absl::GetFlag(FLAGS_lake_plan)) {
    absl::StatusOr<LakeShareResult> plan = PlanLakeShare(config);
    if (!plan.ok()) {
      std::cerr << "gmlake-replay --lake_plan: " << plan.status().message()
                << "\n";
      return 1;
    }
    std::printf("{\"floor_bytes\":%llu,\"capacity_bytes\":%llu}\n",
                static_cast<unsigned long long>(plan->floor_bytes),
                static_cast<unsigned long long>(plan->capacity_bytes));
    return 0;
  }
  const std::string plot = Resolve(absl::GetFlag(FLAGS_plot));
  if (plot.empty()) config.sample_every = absl::ZeroDuration();
  absl::StatusOr<LakeShareResult> r = RunLakeShare(config);
  if (!r.ok()) {
    std::cerr << "\ngmlake-replay --lake: " << r.status().message() << "\n";
    return 1;
  }
  if (!plot.empty()) {
    if (absl::Status s = WriteSvg(plot, RenderSvg(LakeMemoryChart(*r)));
        !s.ok()) {
      std::cerr << "gmlake-replay --lake --plot: " << s.message() << "\n";
      return 1;
    }
    std::cerr << "gmlake-replay: figure of the lake-share run: " << plot
              << "\n";
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", LakeShareJson(config, *r).dump().c_str());
  } else {
    PrintLakeShareTable(config, *r);
  }
  return 0;
}

// --baseline's "traces" object (empty without the flag); false, after
// saying why, when it cannot be read.
bool LoadBaseline(nlohmann::json* baseline) {
  const std::string b = absl::GetFlag(FLAGS_baseline);
  if (b.empty()) return true;
  std::ifstream in(Resolve(b));
  if (!in) {
    std::cerr << "gmlake-replay: cannot read --baseline " << Resolve(b) << "\n";
    return false;
  }
  try {
    *baseline = nlohmann::json::parse(in)["traces"];
  } catch (const std::exception& e) {
    std::cerr << "gmlake-replay: --baseline " << b
              << " is not JSON: " << e.what() << "\n";
    return false;
  }
  return true;
}

// One trace's figures, as --json prints them.
nlohmann::json ResultJson(const Trace& trace, const ReplayConfig& config,
                          const ReplayResult& r) {
  nlohmann::json out;
  out["trace"] = trace.name;
  out["events"] = trace.events.size();
  out["backend"] = config.backend;
  out["peak_live_bytes"] = trace.peak_live_bytes;
  out["peak_reserved_bytes"] = r.peak_reserved_bytes;
  out["reserved_over_live"] =
      r.peak_reserved_bytes / static_cast<double>(trace.peak_live_bytes);
  out["driver_calls"] = r.calls.MemoryCalls();
  out["driver_calls_second_half"] = r.calls_second_half.MemoryCalls();
  out["driver_seconds"] = r.calls.TotalNanos() * 1e-9;
  for (int c = 0; c < kNumVmmCalls; ++c) {
    if (r.calls.count[c] == 0) continue;
    const std::string name(VmmCallName(static_cast<VmmCall>(c)));
    out["driver_calls_by_kind"][name] = r.calls.count[c];
    out["driver_seconds_by_kind"][name] = r.calls.nanos[c] * 1e-9;
    if (r.calls_second_half.count[c] != 0) {
      out["driver_calls_second_half_by_kind"][name] =
          r.calls_second_half.count[c];
    }
  }
  out["host_waits"] = r.stats.host_waits;
  out["unmaps"] = r.calls.Count(VmmCall::kUnmap);
  out["first_half_peak_live_bytes"] = r.first_half_peak_live_bytes;
  out["calls_for_second_half_peak"] = r.calls_for_second_half_peak;
  out["stitches"] = r.stats.stitches;
  out["reactivations"] = r.stats.reactivations;
  out["slow_path_seconds"] = r.stats.slow_path_us / 1e6;
  out["covers"] = r.stats.covers;
  out["dormant_chunks"] = r.stats.dormant_chunks;
  out["chunks_stolen"] = r.stats.chunks_stolen;
  out["ns_per_op_p50"] = r.ns_per_op_p50;
  out["ns_per_op_p99"] = r.ns_per_op_p99;
  out["timer_ns_p50"] = r.timer_ns_p50;
  out["replay_seconds"] = r.seconds;
  return out;
}

// PyTorch's figures for the trace from the baseline, beside ours in `out`.
void AddPyTorchFigures(const nlohmann::json& baseline, const std::string& name,
                       nlohmann::json* out) {
  if (!baseline.contains(name)) return;
  const nlohmann::json& b = baseline[name];
  for (const char* who : {"pytorch_native", "pytorch_expandable_segments"}) {
    if (!b.contains(who)) continue;
    for (const char* key : {"peak_reserved_bytes", "min_capacity_bytes"}) {
      if (!b[who].contains(key)) continue;
      const double v = b[who][key].get<double>();
      (*out)[who][key] = v;
      (*out)[who][std::string(key).substr(0, std::string(key).size() - 6) +
                  "_over_live"] = v / b["peak_live_bytes"].get<double>();
    }
  }
}

// The figure of memory over time, with PyTorch's peaks from the baseline.
absl::Status DrawFigure(const std::string& figure, const Trace& trace,
                        const ReplayResult& r, const nlohmann::json& baseline) {
  PyTorchPeaks peaks;
  if (baseline.contains(trace.name)) {
    const nlohmann::json& b = baseline[trace.name];
    auto peak = [&](const char* who) -> uint64_t {
      if (!b.contains(who) || !b[who].contains("peak_reserved_bytes")) {
        return 0;
      }
      return b[who]["peak_reserved_bytes"].get<uint64_t>();
    };
    peaks.native_reserved = peak("pytorch_native");
    peaks.expandable_reserved = peak("pytorch_expandable_segments");
  }
  return WriteSvg(
      figure, RenderSvg(TraceMemoryChart(trace, r.reserved_timeline, peaks)));
}

void PrintTableHeader() {
  std::printf("%-22s %8s %9s %9s %9s %9s %9s %9s %9s %8s %8s %8s %6s %6s\n",
              "trace", "events", "live GiB", "reserved", "native", "expand.",
              "min cap", "native", "expand.", "driver", "2nd half", "stitches",
              "p50ns", "p99ns");
  std::printf("%-22s %8s %9s %9s %9s %9s %9s %9s %9s %8s %8s %8s %6s %6s\n", "",
              "", "", "/live", "reserved", "reserved", "/live", "min cap",
              "min cap", "calls", "calls", "", "", "");
}

void PrintTableRow(const nlohmann::json& out, const Trace& trace,
                   const ReplayResult& r, bool bisect) {
  auto ratio = [&](const char* who, const char* key) -> std::string {
    if (!out.contains(who) || !out[who].contains(key)) return "-";
    return absl::StrFormat("%.3f", out[who][key].get<double>());
  };
  std::printf(
      "%-22s %8zu %9.2f %9.3f %9s %9s %9s %9s %9s %8llu %8llu %8lld %6.0f "
      "%6.0f\n",
      trace.name.c_str(), trace.events.size(), Gib(trace.peak_live_bytes),
      out["reserved_over_live"].get<double>(),
      ratio("pytorch_native", "peak_reserved_over_live").c_str(),
      ratio("pytorch_expandable_segments", "peak_reserved_over_live").c_str(),
      bisect
          ? absl::StrFormat("%.3f", out["min_capacity_over_live"].get<double>())
                .c_str()
          : "-",
      ratio("pytorch_native", "min_capacity_over_live").c_str(),
      ratio("pytorch_expandable_segments", "min_capacity_over_live").c_str(),
      static_cast<unsigned long long>(r.calls.MemoryCalls()),
      static_cast<unsigned long long>(r.calls_second_half.MemoryCalls()),
      static_cast<long long>(r.stats.stitches), r.ns_per_op_p50,
      r.ns_per_op_p99);
}

// Replays one trace file and prints its row or JSON line; false, after
// saying why, when it does not load, replay, bisect or draw.
bool ReplayOne(const std::string& file, const std::string& tag,
               const std::string& figure_or_dir, bool one_figure,
               const nlohmann::json& baseline) {
  Progress(absl::StrCat(tag, "loading ", file));
  absl::StatusOr<Trace> trace = LoadTrace(file);
  if (!trace.ok()) {
    std::cerr << "\ngmlake-replay: " << trace.status().message() << "\n";
    return false;
  }
  Progress(absl::StrCat(tag, trace->name, ": replaying ", trace->events.size(),
                        " events on ", absl::GetFlag(FLAGS_backend)));
  ReplayConfig config;
  config.backend = absl::GetFlag(FLAGS_backend);
  config.conf = absl::GetFlag(FLAGS_conf);
  config.time_ops = true;
  config.check_every = absl::GetFlag(FLAGS_check_every);
  const std::string figure =
      one_figure || figure_or_dir.empty()
          ? figure_or_dir
          : absl::StrCat(figure_or_dir, "/", trace->name, ".svg");
  if (!figure.empty()) config.timeline_points = 1000;
  absl::StatusOr<ReplayResult> r = ReplayTrace(*trace, config, 0);
  if (!r.ok() || !r->completed) {
    std::cerr << "\ngmlake-replay: " << trace->name << ": "
              << (r.ok() ? r->error : std::string(r.status().message()))
              << "\n";
    return false;
  }
  nlohmann::json out = ResultJson(*trace, config, *r);
  const bool bisect = absl::GetFlag(FLAGS_capacity);
  if (bisect) {
    ReplayConfig bc = config;
    bc.backend = absl::GetFlag(FLAGS_bisect_backend);
    const uint64_t res = absl::GetFlag(FLAGS_resolution_mib) << 20;
    absl::StatusOr<uint64_t> cap = BisectMinCapacity(
        *trace, bc, trace->peak_live_bytes, r->peak_reserved_bytes + res, res,
        [&](uint64_t c, bool ok) {
          Progress(absl::StrFormat("%s%s: capacity %.3f GiB %s", tag,
                                   trace->name, Gib(c),
                                   ok ? "fits" : "runs out"));
        });
    if (!cap.ok()) {
      std::cerr << "\ngmlake-replay: " << trace->name << ": "
                << cap.status().message() << "\n";
      return false;
    }
    out["min_capacity_bytes"] = *cap;
    out["min_capacity_over_live"] =
        *cap / static_cast<double>(trace->peak_live_bytes);
  }
  AddPyTorchFigures(baseline, trace->name, &out);
  bool ok = true;
  if (!figure.empty()) {
    if (absl::Status s = DrawFigure(figure, *trace, *r, baseline); !s.ok()) {
      std::cerr << "\ngmlake-replay: --plot: " << s.message() << "\n";
      ok = false;
    } else {
      out["figure"] = figure;
      Progress("");
      std::cerr << "gmlake-replay: figure of " << trace->name << ": " << figure
                << "\n";
    }
  }
  Progress("");
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    PrintTableRow(out, *trace, *r, bisect);
  }
  std::fflush(stdout);
  return ok;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gmlake-replay [--capacity] [--baseline=FILE] [--json]\n"
      "              [--plot=FILE.svg | --plot_dir=DIR] [TRACE|DIR ...]\n"
      "gmlake-replay --lake [--lake_rounds=N] [--plot=FILE.svg] TRACE TRACE "
      "[...]");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  if (absl::GetFlag(FLAGS_lake_client)) {
    if (args.size() != 1) {
      std::cerr << "--lake_client takes one trace\n";
      return 2;
    }
    return LakeClientMain(absl::GetFlag(FLAGS_lake_socket), args[0],
                          absl::GetFlag(FLAGS_conf));
  }
  if (absl::GetFlag(FLAGS_lake)) return LakeMain(args);
  nlohmann::json baseline;
  if (!LoadBaseline(&baseline)) return 2;
  const std::vector<std::string> files = TraceFiles(args);
  if (files.empty()) {
    std::cerr << "gmlake-replay: no traces found\n";
    return 2;
  }
  const std::string plot = Resolve(absl::GetFlag(FLAGS_plot));
  const std::string plot_dir = Resolve(absl::GetFlag(FLAGS_plot_dir));
  if (!plot.empty() && files.size() != 1) {
    std::cerr << "gmlake-replay: --plot=FILE draws one trace and "
              << files.size()
              << " were given; use --plot_dir=DIR for one figure each\n";
    return 2;
  }
  if (!plot_dir.empty() && ::mkdir(plot_dir.c_str(), 0755) != 0 &&
      errno != EEXIST) {
    std::cerr << "gmlake-replay: --plot_dir: cannot make " << plot_dir << ": "
              << std::strerror(errno) << "\n";
    return 2;
  }
  if (!absl::GetFlag(FLAGS_json)) PrintTableHeader();
  int failures = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string tag = absl::StrCat("[", i + 1, "/", files.size(), "] ");
    if (!ReplayOne(files[i], tag, !plot.empty() ? plot : plot_dir,
                   !plot.empty(), baseline)) {
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gmlake

int main(int argc, char** argv) { return gmlake::Main(argc, argv); }
