// Copyright 2026 The GMLake Authors.

#include "tools/lake_share.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "client/allocator.h"
#include "client/daemon_chunk_source.h"
#include "client/open_chunk_source.h"
#include "client/options.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/gmlake.grpc.pb.h"
#include "tools/daemon_process.h"
#include "tools/progress_line.h"
#include "tools/replay.h"
#include "tools/subprocess.h"
#include "tools/trace.h"

namespace gmlake {
namespace {

constexpr uint64_t kChunk = uint64_t{2} << 20;

struct NodeView {
  uint64_t created = 0;       // bytes of chunks gmlaked holds, all devices
  uint64_t capacity = 0;      // its capacity, all devices
  uint64_t pressure = 0;      // pressure requests sent so far
  v1::StatusResponse status;  // the whole answer, for its counters
};

// Samples gmlaked's Status on a thread of its own until destroyed: what the
// node holds and what each client (known by its pid) holds.
class LakeSampler {
 public:
  LakeSampler(v1::Lake::Stub* stub, std::vector<pid_t> clients,
              absl::Duration every)
      : stub_(stub), clients_(std::move(clients)), start_(absl::Now()) {
    if (every > absl::ZeroDuration()) {
      thread_ = std::thread([this, every] {
        do {
          Sample();
        } while (!stop_.WaitForNotificationWithTimeout(every));
        Sample();
      });
    }
  }
  ~LakeSampler() { Stop(); }

  void Stop() {
    if (!thread_.joinable()) return;
    stop_.Notify();
    thread_.join();
  }
  double Seconds() const { return absl::ToDoubleSeconds(absl::Now() - start_); }
  // After Stop().
  std::vector<LakeSample> Take() { return std::move(samples_); }

 private:
  void Sample() {
    absl::StatusOr<v1::StatusResponse> st = DaemonStatus(stub_);
    if (!st.ok()) return;  // a gap in the figure, not a failed run
    LakeSample s;
    s.seconds = Seconds();
    for (const auto& d : st->devices()) {
      s.node_bytes += d.created_bytes() + d.creating_bytes();
    }
    s.process_bytes.assign(clients_.size(), 0);
    for (const auto& session : st->sessions()) {
      for (size_t i = 0; i < clients_.size(); ++i) {
        if (session.pid() == clients_[i]) {
          s.process_bytes[i] += session.leased_bytes();
        }
      }
    }
    samples_.push_back(std::move(s));
  }

  v1::Lake::Stub* const stub_;
  const std::vector<pid_t> clients_;
  const absl::Time start_;
  Notification stop_;
  std::thread thread_;
  std::vector<LakeSample> samples_;  // the thread's until Stop()
};

absl::StatusOr<NodeView> Node(gmlake::v1::Lake::Stub* stub) {
  absl::StatusOr<v1::StatusResponse> status = DaemonStatus(stub);
  if (!status.ok()) return status.status();
  const v1::StatusResponse& resp = *status;
  NodeView v;
  for (const auto& d : resp.devices()) {
    v.created += d.created_bytes() + d.creating_bytes();
    v.capacity += d.capacity_bytes();
  }
  v.pressure = resp.pressure_requests_sent();
  v.status = resp;
  return v;
}

}  // namespace

nlohmann::json MemoryCallCounts(const VmmCallSnapshot& calls) {
  nlohmann::json out = nlohmann::json::object();
  for (int c = 0; c < kNumVmmCalls; ++c) {
    const VmmCall call = static_cast<VmmCall>(c);
    if (IsMemoryCall(call))
      out[std::string(VmmCallName(call))] = calls.Count(call);
  }
  return out;
}

VmmCallSnapshot MemoryCallCountsFrom(const nlohmann::json& counts) {
  VmmCallSnapshot calls;
  for (int c = 0; c < kNumVmmCalls; ++c) {
    const std::string name(VmmCallName(static_cast<VmmCall>(c)));
    if (counts.contains(name)) calls.count[c] = counts[name].get<uint64_t>();
  }
  return calls;
}

int LakeClientMain(const std::string& socket, const std::string& trace_path,
                   const std::string& conf) {
  auto fail = [](const std::string& what) {
    std::printf("err %s\n", what.c_str());
    std::fflush(stdout);
    return 1;
  };
  absl::StatusOr<Trace> trace = LoadTrace(trace_path);
  if (!trace.ok()) return fail(std::string(trace.status().message()));
  absl::StatusOr<AllocatorOptions> options = ParseConf(conf);
  if (!options.ok()) return fail(std::string(options.status().message()));
  DaemonSourceOptions d = DaemonSourceOptionsFor(*options);
  d.socket_path = socket;
  d.name = absl::StrCat("replay ", trace->name);
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> source =
      DaemonChunkSource::Connect(d);
  if (!source.ok()) return fail(std::string(source.status().message()));
  std::vector<DevicePtr> ptr(trace->num_ids, 0);
  {
    Allocator allocator(source->get(), *options);
    std::printf("ready\n");
    std::fflush(stdout);
    std::string line;
    // Driver calls while idle (answering pressure) and while busy.
    VmmCallSnapshot last_end = allocator.stats(0).driver_calls;
    while (std::getline(std::cin, line)) {
      const VmmCallSnapshot start = allocator.stats(0).driver_calls;
      for (DevicePtr& p : ptr) {
        if (p != 0) allocator.Free(p).IgnoreError();
        p = 0;
      }
      if (line == "exit") break;
      if (line != "run") return fail(absl::StrCat("unknown command ", line));
      allocator.ResetPeaks();
      const auto t0 = std::chrono::steady_clock::now();
      const absl::Status replayed = ReplayEvents(*trace, &allocator, &ptr);
      const AllocatorStats st = allocator.stats(0);
      nlohmann::json out;
      out["ok"] = replayed.ok();
      out["error"] = std::string(replayed.message());
      out["reserved_peak"] = st.reserved_bytes.peak;
      out["reserved_now"] = st.reserved_bytes.current;
      out["allocated_now"] = st.allocated_bytes.current;
      out["chunks_returned"] = st.chunks_returned;
      out["pressure_requests"] = (*source)->pressure_requests();
      out["busy_calls"] = MemoryCallCounts(st.driver_calls - start);
      out["idle_calls"] = MemoryCallCounts(start - last_end);
      last_end = st.driver_calls;
      out["seconds"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      std::printf("done %s\n", out.dump().c_str());
      std::fflush(stdout);
      if (!replayed.ok()) break;
    }
  }
  return 0;
}

absl::StatusOr<LakeShareResult> PlanLakeShare(const LakeShareConfig& config) {
  const size_t n = config.trace_paths.size();
  if (n < 2) {
    return absl::InvalidArgumentError(
        "--lake needs two or more traces, one per client process");
  }
  // The floor, from the traces alone: in each phase, the busy process's
  // live peak plus what the others' last runs left live.
  std::vector<std::string> names;
  struct TraceShape {
    uint64_t peak;      // most bytes live at once
    uint64_t leftover;  // still live at its end (kept while idle)
  };
  std::vector<TraceShape> shapes;
  for (const std::string& p : config.trace_paths) {
    Progress(config.progress, absl::StrCat("lake: loading ", p));
    absl::StatusOr<Trace> t = LoadTrace(p);
    if (!t.ok()) return t.status();
    names.push_back(t->name);
    shapes.push_back({t->peak_live_bytes, t->end_live_bytes});
  }
  LakeShareResult result;
  std::vector<bool> started(n, false);
  for (int r = 0; r < config.rounds; ++r) {
    for (size_t i = 0; i < n; ++i) {
      uint64_t f = shapes[i].peak;
      for (size_t j = 0; j < n; ++j) {
        if (j != i && started[j]) f += shapes[j].leftover;
      }
      started[i] = true;
      LakePhase p;
      p.round = r;
      p.client = static_cast<int>(i);
      p.trace = names[i];
      p.floor_bytes = f;
      result.phases.push_back(p);
      result.floor_bytes = std::max(result.floor_bytes, f);
    }
  }
  // Rounded down to whole chunks: the lake never holds more than 1.05x.
  result.capacity_bytes =
      config.capacity != 0
          ? config.capacity
          : static_cast<uint64_t>(result.floor_bytes * 1.05) / kChunk * kChunk;
  return result;
}

namespace {

// gmlaked for the run: the one at config.socket, or one started here with
// the plan's capacity (`daemon` owns it). Returns the socket.
absl::StatusOr<std::string> StartGmlaked(
    const LakeShareConfig& config, uint64_t capacity,
    std::unique_ptr<DaemonProcess>* daemon) {
  if (!config.socket.empty()) return config.socket;
  const uint64_t host_capacity =
      std::max<uint64_t>(capacity, uint64_t{64} << 30);
  std::vector<std::string> flags = {
      "--backend=" + config.backend, absl::StrCat("--capacity=", capacity),
      absl::StrCat("--host_capacity=", host_capacity),
      absl::StrCat("--prefer_reclaim=", config.prefer_reclaim)};
  flags.insert(flags.end(), config.gmlaked_flags.begin(),
               config.gmlaked_flags.end());
  if (config.reclaim_timeout > absl::ZeroDuration()) {
    flags.push_back(absl::StrCat("--reclaim_timeout=",
                                 absl::FormatDuration(config.reclaim_timeout)));
  }
  Progress(config.progress, "lake: starting gmlaked");
  absl::StatusOr<std::unique_ptr<DaemonProcess>> d =
      DaemonProcess::Start(FindGmlaked(config.gmlaked, config.self), flags);
  if (!d.ok()) return d.status();
  *daemon = *std::move(d);
  return (*daemon)->socket();
}

// One client process per trace, each started and ready.
absl::StatusOr<std::vector<std::unique_ptr<Subprocess>>> StartClients(
    const LakeShareConfig& config, const std::string& socket,
    const std::vector<std::string>& names) {
  std::vector<std::unique_ptr<Subprocess>> clients;
  for (size_t i = 0; i < config.trace_paths.size(); ++i) {
    absl::StatusOr<std::unique_ptr<Subprocess>> c = Subprocess::Start(
        {config.self, "--lake_client", "--lake_socket=" + socket,
         "--conf=" + config.conf, config.trace_paths[i]},
        /*pipes=*/true);
    if (!c.ok()) return c.status();
    absl::StatusOr<std::string> ready = (*c)->ReadLine();
    if (!ready.ok() || *ready != "ready") {
      return absl::UnavailableError(absl::StrCat(
          "client for ", names[i], " did not start: ",
          ready.ok() ? *ready : std::string(ready.status().message())));
    }
    clients.push_back(*std::move(c));
  }
  return clients;
}

// Client `p.client` replays its trace once while the others idle; fills
// the rest of `p` from its report and gmlaked's books after it.
absl::Status RunPhase(Subprocess* client, v1::Lake::Stub* stub,
                      uint64_t capacity, LakePhase* p) {
  if (absl::Status s = client->Send("run"); !s.ok()) return s;
  absl::StatusOr<std::string> line = client->ReadLine();
  if (!line.ok() || !absl::StartsWith(*line, "done ")) {
    return absl::InternalError(absl::StrCat(
        p->trace, ": ", line.ok() ? *line : line.status().message()));
  }
  nlohmann::json d = nlohmann::json::parse(line->substr(5));
  if (!d["ok"].get<bool>()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(p->trace, " ran out of memory in the lake of ", capacity,
                     " bytes: ", d["error"].get<std::string>()));
  }
  absl::StatusOr<NodeView> node = Node(stub);
  if (!node.ok()) return node.status();
  p->client_reserved_peak = d["reserved_peak"].get<uint64_t>();
  p->node_bytes = node->created;
  p->pressure_requests = node->pressure;
  const v1::StatusResponse& st = node->status;
  p->pressure_rounds = st.pressure_rounds();
  p->pressure_asked_bytes = st.pressure_asked_bytes();
  p->pressure_returned_bytes = st.pressure_returned_bytes();
  p->leases_served = st.leases_served();
  p->leases_failed = st.leases_failed();
  p->leased_chunks = st.leased_chunks_total();
  p->leased_bytes = st.leased_bytes_total();
  p->seconds = d["seconds"].get<double>();
  p->busy_calls = MemoryCallCountsFrom(d["busy_calls"]);
  p->idle_calls = MemoryCallCountsFrom(d["idle_calls"]);
  return absl::OkStatus();
}

// Waits (generously: gmlaked starts in well under a second when the
// machine is idle, but a busy one may take many times that) until gmlaked
// at `socket` answers, and returns what it says of the node.
absl::StatusOr<NodeView> WaitForGmlaked(v1::Lake::Stub* stub,
                                        const std::string& socket,
                                        bool progress) {
  Progress(progress, absl::StrCat("lake: waiting for gmlaked at ", socket));
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!Node(stub).ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  return Node(stub);
}

// The plan's rounds: each client busy in turn while the others idle.
// Records each phase, the node's peak and each process's peak into
// `result`; stops at the first phase that fails.
absl::Status RunRounds(const LakeShareConfig& config,
                       const LakeShareResult& plan,
                       absl::Span<const std::unique_ptr<Subprocess>> clients,
                       v1::Lake::Stub* stub, LakeSampler* sampler,
                       LakeShareResult* result) {
  const size_t n = clients.size();
  std::vector<uint64_t> process_peak(n, 0);
  size_t phase = 0;
  for (int r = 0; r < config.rounds; ++r) {
    for (size_t i = 0; i < n; ++i, ++phase) {
      const std::string& name = result->process_names[i];
      Progress(config.progress,
               absl::StrFormat("lake: round %d/%d, %s busy, %d others idle",
                               r + 1, config.rounds, name, n - 1));
      LakePhase p;
      p.round = r;
      p.client = static_cast<int>(i);
      p.trace = name;
      p.floor_bytes = plan.phases[phase].floor_bytes;
      p.start_seconds = sampler->Seconds();
      if (absl::Status s =
              RunPhase(clients[i].get(), stub, result->capacity_bytes, &p);
          !s.ok()) {
        return s;
      }
      process_peak[i] = std::max(process_peak[i], p.client_reserved_peak);
      result->node_peak_bytes = std::max(result->node_peak_bytes, p.node_bytes);
      result->phases.push_back(p);
    }
  }
  for (uint64_t p : process_peak) result->sum_of_process_peaks_bytes += p;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LakeShareResult> RunLakeShare(const LakeShareConfig& config) {
  // A client that dies must not take this process with it (SIGPIPE on
  // the next command): its failure is reported instead.
  ::signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<LakeShareResult> plan = PlanLakeShare(config);
  if (!plan.ok()) return plan.status();
  LakeShareResult result;
  result.floor_bytes = plan->floor_bytes;
  result.capacity_bytes = plan->capacity_bytes;
  for (size_t i = 0; i < config.trace_paths.size(); ++i) {
    result.process_names.push_back(plan->phases[i].trace);
  }

  std::unique_ptr<DaemonProcess> daemon;
  absl::StatusOr<std::string> socket =
      StartGmlaked(config, result.capacity_bytes, &daemon);
  if (!socket.ok()) return socket.status();
  auto channel = grpc::CreateChannel("unix:" + *socket,
                                     grpc::InsecureChannelCredentials());
  auto stub = gmlake::v1::Lake::NewStub(channel);
  absl::StatusOr<NodeView> start =
      WaitForGmlaked(stub.get(), *socket, config.progress);
  if (!start.ok()) return start.status();
  // A gmlaked started elsewhere has its own capacity: report that one.
  if (!config.socket.empty()) result.capacity_bytes = start->capacity;

  absl::StatusOr<std::vector<std::unique_ptr<Subprocess>>> clients =
      StartClients(config, *socket, result.process_names);
  if (!clients.ok()) return clients.status();
  std::vector<pid_t> pids;
  for (const auto& c : *clients) pids.push_back(c->pid());
  LakeSampler sampler(stub.get(), pids, config.sample_every);
  const absl::Status failure =
      RunRounds(config, *plan, *clients, stub.get(), &sampler, &result);
  sampler.Stop();
  result.timeline = sampler.Take();
  for (auto& c : *clients) {
    c->Send("exit").IgnoreError();
    c->Wait(absl::Seconds(30)).IgnoreError();
  }
  daemon.reset();  // stops gmlaked, removes its sockets
  Progress(config.progress, "");
  if (!failure.ok()) return failure;
  result.node_peak_over_floor =
      static_cast<double>(result.node_peak_bytes) / result.floor_bytes;
  return result;
}

}  // namespace gmlake
