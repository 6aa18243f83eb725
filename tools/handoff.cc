// Copyright 2026 The GMLake Authors.

#include "tools/handoff.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/allocator.h"
#include "client/daemon_chunk_source.h"
#include "client/open_chunk_source.h"
#include "client/options.h"
#include "common/bytes.h"
#include "nlohmann/json.hpp"
#include "tools/daemon_process.h"
#include "tools/progress_line.h"
#include "tools/subprocess.h"

namespace gmlake {
namespace {

nlohmann::json CallsJson(const VmmCallSnapshot& s) {
  nlohmann::json out = nlohmann::json::object();
  for (int c = 0; c < kNumVmmCalls; ++c) {
    if (s.count[c] == 0) continue;
    const std::string name(VmmCallName(static_cast<VmmCall>(c)));
    out[name]["calls"] = s.count[c];
    out[name]["seconds"] = s.nanos[c] * 1e-9;
  }
  return out;
}

VmmCallSnapshot CallsFromJson(const nlohmann::json& j) {
  VmmCallSnapshot s;
  for (int c = 0; c < kNumVmmCalls; ++c) {
    const std::string name(VmmCallName(static_cast<VmmCall>(c)));
    if (!j.contains(name)) continue;
    s.count[c] = j[name]["calls"].get<uint64_t>();
    s.nanos[c] = static_cast<uint64_t>(j[name]["seconds"].get<double>() * 1e9);
  }
  return s;
}

HandoffPhase Phase(const std::string& name, const VmmCallSnapshot& s,
                   VmmCall call) {
  return {name, s.Nanos(call) * 1e-9, s.Count(call)};
}

double PressureWaitSeconds(const v1::StatusResponse& s) {
  return s.pressure_wait_seconds().sum();
}

// The holder: started, ready, holding config.bytes in its cache.
absl::StatusOr<std::unique_ptr<Subprocess>> StartHolder(
    const HandoffConfig& config, const std::string& socket) {
  absl::StatusOr<std::unique_ptr<Subprocess>> holder = Subprocess::Start(
      {config.self, "--handoff_holder", "--socket=" + socket,
       absl::StrCat("--bytes=", config.bytes), "--conf=" + config.conf},
      /*pipes=*/true);
  if (!holder.ok()) return holder.status();
  absl::StatusOr<std::string> ready = (*holder)->ReadLine();
  if (!ready.ok() || *ready != "ready") {
    return absl::UnavailableError(absl::StrCat(
        "the holder process did not get its ", FormatBytes(config.bytes), ": ",
        ready.ok() ? *ready : std::string(ready.status().message())));
  }
  return holder;
}

}  // namespace

int HandoffHolderMain(const std::string& socket, uint64_t bytes,
                      const std::string& conf) {
  auto fail = [](absl::string_view what) {
    std::printf("err %s\n", std::string(what).c_str());
    std::fflush(stdout);
    return 1;
  };
  absl::StatusOr<AllocatorOptions> options = ParseConf(conf);
  if (!options.ok()) return fail(options.status().message());
  DaemonSourceOptions d = DaemonSourceOptionsFor(*options);
  d.socket_path = socket;
  d.name = "handoff holder";
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> source =
      DaemonChunkSource::Connect(d);
  if (!source.ok()) return fail(source.status().message());
  Allocator allocator(source->get(), *options);
  absl::StatusOr<DevicePtr> p = allocator.Malloc(bytes, 0, 0);
  if (!p.ok()) return fail(p.status().message());
  if (absl::Status s = allocator.Free(*p); !s.ok()) return fail(s.message());
  const VmmCallSnapshot start = (*source)->backend()->call_stats();
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line) && line != "exit") {
    if (line != "stats") return fail(absl::StrCat("unknown command ", line));
    nlohmann::json out;
    out["calls"] = CallsJson((*source)->backend()->call_stats() - start);
    out["chunks_returned"] = allocator.stats(0).chunks_returned;
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

namespace {

// gmlaked with room for the holder's lease and nothing else: the busy
// process's malloc must take the holder's chunks.
absl::StatusOr<std::unique_ptr<DaemonProcess>> StartHandoffDaemon(
    const HandoffConfig& config) {
  std::vector<std::string> flags = {"--backend=" + config.backend,
                                    absl::StrCat("--capacity=", config.bytes),
                                    "--precreate=0", "--release_idle=0"};
  if (config.backend == "host") {
    flags.push_back(absl::StrCat("--host_capacity=", config.bytes));
  }
  if (config.chunk_size != 0) {
    flags.push_back(absl::StrCat("--chunk_size=", config.chunk_size));
  }
  flags.insert(flags.end(), config.daemon_flags.begin(),
               config.daemon_flags.end());
  Progress(config.progress, "handoff: starting gmlaked");
  return DaemonProcess::Start(FindGmlaked(config.gmlaked, config.self), flags);
}

// The busy process's malloc of the whole lake, timed, with its driver
// calls and chunks, into `r`.
absl::Status TimedMalloc(const HandoffConfig& config,
                         const AllocatorOptions& options,
                         DaemonChunkSource* source, HandoffResult* r) {
  // The busy process is running already: its device context exists (on
  // the cuda backend a first context costs ~0.2 s, which is no hand-off).
  VmmBackend* backend = source->backend();
  absl::StatusOr<DevicePtr> warm =
      backend->ReserveRange(backend->granularity(0), 0, 0);
  if (!warm.ok()) return warm.status();
  backend->FreeRange(*warm, backend->granularity(0)).IgnoreError();
  Allocator allocator(source, options);
  Progress(config.progress,
           absl::StrCat("handoff: malloc(", FormatBytes(config.bytes), ")"));
  const VmmCallSnapshot calls0 = backend->call_stats();
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<DevicePtr> p = allocator.Malloc(config.bytes, 0, 0);
  const auto t1 = std::chrono::steady_clock::now();
  r->taker_calls = backend->call_stats() - calls0;
  // One import, or one create (chunks the process makes in the capacity
  // gmlaked leases), per chunk: their sizes are the allocator's and the
  // source's to choose (client/chunk_sizing.h).
  r->chunks = r->taker_calls.Count(VmmCall::kImport) +
              r->taker_calls.Count(VmmCall::kCreate);
  if (!p.ok()) {
    return absl::Status(p.status().code(),
                        absl::StrCat("handoff: the busy process's malloc(",
                                     FormatBytes(config.bytes),
                                     ") failed: ", p.status().message()));
  }
  r->total_seconds = std::chrono::duration<double>(t1 - t0).count();
  allocator.Free(*p).IgnoreError();
  return absl::OkStatus();
}

// What answering the pressure cost the holder (its driver calls and the
// chunks it gave back), into `r`; then the holder exits.
absl::Status CollectHolder(Subprocess* holder, HandoffResult* r) {
  if (absl::Status s = holder->Send("stats"); !s.ok()) return s;
  absl::StatusOr<std::string> line = holder->ReadLine();
  if (!line.ok()) return line.status();
  nlohmann::json h = nlohmann::json::parse(*line, nullptr, false);
  if (h.is_discarded() || !h.contains("calls")) {
    return absl::InternalError(absl::StrCat("holder: ", *line));
  }
  r->holder_calls = CallsFromJson(h["calls"]);
  r->holder_chunks_returned = h["chunks_returned"].get<uint64_t>();
  holder->Send("exit").IgnoreError();
  holder->Wait(absl::Seconds(30)).IgnoreError();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HandoffResult> RunHandoff(const HandoffConfig& config) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      StartHandoffDaemon(config);
  if (!daemon.ok()) return daemon.status();
  Progress(config.progress, absl::StrCat("handoff: the holder leases ",
                                         FormatBytes(config.bytes)));
  absl::StatusOr<std::unique_ptr<Subprocess>> holder =
      StartHolder(config, (*daemon)->socket());
  if (!holder.ok()) return holder.status();

  absl::StatusOr<AllocatorOptions> options = ParseConf(config.conf);
  if (!options.ok()) return options.status();
  DaemonSourceOptions d = DaemonSourceOptionsFor(*options);
  d.socket_path = (*daemon)->socket();
  d.name = "handoff taker";
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> source =
      DaemonChunkSource::Connect(d);
  if (!source.ok()) return source.status();
  absl::StatusOr<v1::StatusResponse> before = (*daemon)->Status();
  if (!before.ok()) return before.status();

  HandoffResult r;
  r.bytes = config.bytes;
  r.chunk_size = (*source)->chunk_size(0);
  r.backend_description = before->backend_description();
  if (absl::Status s = TimedMalloc(config, *options, source->get(), &r);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<v1::StatusResponse> after = (*daemon)->Status();
  if (!after.ok()) return after.status();
  r.pressure_rounds = after->pressure_rounds() - before->pressure_rounds();
  r.daemon_handoff_seconds =
      after->handoff_seconds().sum() - before->handoff_seconds().sum();
  const double reclaim =
      PressureWaitSeconds(*after) - PressureWaitSeconds(*before);
  if (absl::Status s = CollectHolder(holder->get(), &r); !s.ok()) return s;

  r.phases.push_back({"reclaim", reclaim,
                      r.holder_calls.Count(VmmCall::kUnmap) +
                          r.holder_calls.Count(VmmCall::kRelease)});
  r.phases.push_back(Phase("make", r.taker_calls, VmmCall::kCreate));
  r.phases.push_back(Phase("import", r.taker_calls, VmmCall::kImport));
  r.phases.push_back(Phase("map", r.taker_calls, VmmCall::kMap));
  r.phases.push_back(Phase("access", r.taker_calls, VmmCall::kSetAccess));
  double rest = r.total_seconds;
  for (const HandoffPhase& p : r.phases) rest -= p.seconds;
  r.phases.push_back({"lease and transfer (rest)", rest, 0});
  Progress(config.progress, "");
  return r;
}

std::string FormatHandoff(const HandoffResult& r) {
  std::string out = absl::StrFormat(
      "hand-off of %s in %llu chunks (%s each on average; gmlaked's unit %s; "
      "%s): %.1f ms from malloc to its return (gmlaked's lease: %.1f ms), "
      "%llu pressure round(s)\n",
      FormatBytes(r.bytes), static_cast<unsigned long long>(r.chunks),
      FormatBytes(r.chunks == 0 ? 0 : r.bytes / r.chunks),
      FormatBytes(r.chunk_size), r.backend_description, r.total_seconds * 1e3,
      r.daemon_handoff_seconds * 1e3,
      static_cast<unsigned long long>(r.pressure_rounds));
  absl::StrAppendFormat(&out, "%-28s %10s %8s %7s\n", "PHASE", "MS", "CALLS",
                        "SHARE");
  for (const HandoffPhase& p : r.phases) {
    absl::StrAppendFormat(
        &out, "%-28s %10.2f %8s %6.1f%%\n", p.name, p.seconds * 1e3,
        p.calls == 0 ? std::string("-") : absl::StrCat(p.calls),
        r.total_seconds > 0 ? 100 * p.seconds / r.total_seconds : 0.0);
  }
  absl::StrAppendFormat(
      &out, "holder: %llu chunks returned, %llu unmaps, %llu releases\n",
      static_cast<unsigned long long>(r.holder_chunks_returned),
      static_cast<unsigned long long>(r.holder_calls.Count(VmmCall::kUnmap)),
      static_cast<unsigned long long>(r.holder_calls.Count(VmmCall::kRelease)));
  return out;
}

std::string HandoffJson(const HandoffResult& r) {
  nlohmann::json out;
  out["bytes"] = r.bytes;
  out["chunk_size"] = r.chunk_size;
  out["chunks"] = r.chunks;
  out["backend"] = r.backend_description;
  out["total_seconds"] = r.total_seconds;
  out["pressure_rounds"] = r.pressure_rounds;
  out["daemon_handoff_seconds"] = r.daemon_handoff_seconds;
  out["holder_chunks_returned"] = r.holder_chunks_returned;
  for (const HandoffPhase& p : r.phases) {
    out["phases"].push_back(
        {{"name", p.name}, {"seconds", p.seconds}, {"calls", p.calls}});
  }
  out["taker_calls"] = CallsJson(r.taker_calls);
  out["holder_calls"] = CallsJson(r.holder_calls);
  return out.dump();
}

}  // namespace gmlake
