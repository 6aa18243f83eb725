// Copyright 2026 The GMLake Authors.
//
// gmlakectl: look at and tend a running gmlaked.
//
//   gmlakectl [--socket=/run/gmlake/gmlaked.sock] status  [--json]
//   gmlakectl [--socket=...]                      clients [--json]
//   gmlakectl [--socket=...]                      trim    [--device=N]
//                                                         [--bytes=4GiB]
//                                                         [--json]
//   gmlakectl [--socket=...]                      health  [--service=NAME]
//
// status: the lake per device (capacity, created, leased, free, scrubbing)
// and the daemon's counters. clients: one line per session (pid, uid, name,
// what it holds, age; other users' sessions only for root and gmlaked's
// uid). trim: releases free chunks to the driver (root and gmlaked's uid
// only). health: asks the standard gRPC health service (grpc.health.v1) on
// the socket, for probes (systemd, Kubernetes). --json prints the RPC's
// response as JSON instead (proto field names, numbers as numbers:
// tools/proto_json.h).
//
// Exit codes: 0 done (health: serving), 1 gmlaked unreachable, refused or
// (health) not serving, 2 bad usage.

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/bytes.h"
#include "grpcpp/grpcpp.h"
#include "proto/gmlake.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "proto/protocol.h"
#include "tools/held_report.h"
#include "tools/proto_json.h"

ABSL_FLAG(std::string, socket, "/run/gmlake/gmlaked.sock",
          "gmlaked's gRPC socket.");
ABSL_FLAG(bool, json, false, "Print JSON instead of tables.");
ABSL_FLAG(int, device, -1, "trim: the device (-1: all).");
ABSL_FLAG(std::string, bytes, "0", "trim: at most this much (0: all free).");
ABSL_FLAG(std::string, service, "",
          "health: the service to ask about (\"\": the whole daemon, or "
          "gmlake.v1.Lake).");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "How long to wait for gmlaked.");

namespace gmlake {
namespace {

constexpr char kUsage[] =
    "gmlakectl: look at and tend gmlaked.\n"
    "Usage: gmlakectl [--socket=PATH] status|clients|trim|health [--json]\n"
    "       gmlakectl trim [--device=N] [--bytes=SIZE]\n"
    "       gmlakectl health [--service=NAME]: exit 0 when serving, else 1";

std::string Age(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds);
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 7200) return absl::StrCat(s / 60, "m");
  if (s < 172800) return absl::StrCat(s / 3600, "h", (s % 3600) / 60, "m");
  return absl::StrCat(s / 86400, "d", (s % 86400) / 3600, "h");
}

// Left-aligned text columns, widths from the content.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) {
      width[i] = std::max(width[i], r[i].size());
    }
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size())
        line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

// What a caller who is not an operator was not shown.
std::string HiddenNote(const v1::StatusResponse& st) {
  if (st.sessions_hidden() == 0) return "";
  return absl::StrFormat(
      "%d sessions of other users are not shown: only root and gmlaked's uid "
      "(%d) see them (you are uid %d)\n",
      st.sessions_hidden(), st.daemon_uid(), st.caller_uid());
}

std::string PrintStatus(const v1::StatusResponse& st) {
  std::string out = absl::StrFormat(
      "gmlaked: protocol %d, up %s, backend %s\n  %s\n"
      "sessions %d; leases served %d, failed %d; pressure requests %d in "
      "%d rounds; chunks zeroed %d; sessions ended %d\n"
      "leased %d chunks (%s) in all, %s of it as capacity for chunks the "
      "clients made; pressure asked for %s (%s of it promised by cache "
      "reports), %s came back, %d requests undelivered\n"
      "scrub %s; uid quota %s; session quota %s\n\n",
      st.protocol_version(), Age(st.uptime_seconds()), st.backend(),
      st.backend_description(), st.sessions_size() + st.sessions_hidden(),
      st.leases_served(), st.leases_failed(), st.pressure_requests_sent(),
      st.pressure_rounds(), st.chunks_scrubbed(), st.sessions_ended(),
      st.leased_chunks_total(), FormatBytes(st.leased_bytes_total()),
      FormatBytes(st.client_made_bytes_total()),
      FormatBytes(st.pressure_asked_bytes()),
      FormatBytes(st.pressure_promised_bytes()),
      FormatBytes(st.pressure_returned_bytes()), st.pressure_undelivered(),
      st.scrub_policy(),
      st.uid_quota_bytes() ? FormatBytes(st.uid_quota_bytes()) : "none",
      st.session_quota_bytes() ? FormatBytes(st.session_quota_bytes())
                               : "none");
  std::vector<std::vector<std::string>> rows = {{"DEVICE", "CHUNK", "CAPACITY",
                                                 "CREATED", "LEASED", "FREE",
                                                 "SCRUBBING", "CHUNKS(L/F)"}};
  for (const v1::DeviceStatus& d : st.devices()) {
    rows.push_back({absl::StrCat(d.device()), FormatBytes(d.chunk_size()),
                    FormatBytes(d.capacity_bytes()),
                    FormatBytes(d.created_bytes()),
                    FormatBytes(d.leased_bytes()), FormatBytes(d.free_bytes()),
                    FormatBytes(d.scrubbing_bytes()),
                    absl::StrCat(d.leased_chunks(), "/", d.free_chunks())});
  }
  return absl::StrCat(out, Table(rows), "\n", HeldReport(st), HiddenNote(st));
}

std::string PrintClients(const v1::StatusResponse& st) {
  if (st.sessions_size() == 0) return "no sessions\n" + HiddenNote(st);
  std::vector<std::vector<std::string>> rows = {
      {"SESSION", "PID", "UID", "NAME", "STATE", "CHUNKS", "LEASED",
       "PER DEVICE", "USED", "CACHED", "AGE"}};
  for (const v1::SessionStatus& s : st.sessions()) {
    std::vector<std::string> per_device;
    for (const v1::DeviceLeased& l : s.leased()) {
      per_device.push_back(
          absl::StrCat(l.device(), ":", FormatBytes(l.bytes())));
    }
    uint64_t used = 0, cached = 0;
    for (const v1::DeviceUsage& u : s.usage()) {
      used += u.used_bytes();
      cached += u.cached_bytes();
    }
    // "ending": ended, its chunks kept until its process exits.
    const std::string state = s.ending()     ? "ending"
                              : !s.bound()   ? "unbound"
                              : s.watching() ? "watching"
                                             : "bound";
    rows.push_back(
        {absl::StrCat(s.session_id()), absl::StrCat(s.pid()),
         s.uid() < 0 ? "-" : absl::StrCat(s.uid()),
         s.name().empty() ? "-" : s.name(), state,
         absl::StrCat(s.leased_chunks()), FormatBytes(s.leased_bytes()),
         per_device.empty() ? "-" : absl::StrJoin(per_device, ","),
         s.usage_size() ? FormatBytes(used) : "-",
         s.usage_size() ? FormatBytes(cached) : "-", Age(s.age_seconds())});
  }
  return Table(rows) + HiddenNote(st);
}

int Fail(const std::string& socket, const absl::Status& s) {
  std::fprintf(stderr, "gmlakectl: gmlaked at %s: %s\n", socket.c_str(),
               std::string(s.message()).c_str());
  return 1;
}

// The standard health check, for probes: 0 when serving, 1 otherwise, with
// one line saying which.
int Health(const std::shared_ptr<grpc::Channel>& channel,
           std::chrono::system_clock::time_point deadline, bool json) {
  using grpc::health::v1::HealthCheckResponse;
  const std::string socket = absl::GetFlag(FLAGS_socket);
  const std::string service = absl::GetFlag(FLAGS_service);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline);
  absl::Status s = FromGrpc(
      grpc::health::v1::Health::NewStub(channel)->Check(&ctx, req, &resp));
  if (!s.ok()) {
    if (s.code() == absl::StatusCode::kNotFound) {
      return Fail(socket, absl::NotFoundError(absl::StrCat(
                              "no service '", service,
                              "' to check (use \"\" or gmlake.v1.Lake)")));
    }
    return Fail(socket,
                absl::Status(s.code(), absl::StrCat(s.message(),
                                                    " (is gmlaked running?)")));
  }
  const bool serving = resp.status() == HealthCheckResponse::SERVING;
  if (json) {
    std::fputs(ProtoToJsonText(resp).c_str(), stdout);
  } else {
    std::printf("gmlaked at %s%s: %s\n", socket.c_str(),
                service.empty() ? "" : absl::StrCat(" (", service, ")").c_str(),
                HealthCheckResponse::ServingStatus_Name(resp.status()).c_str());
  }
  return serving ? 0 : 1;
}

// `status` and `clients`: one Status call, printed as a table or JSON.
int StatusOrClients(v1::Lake::Stub* stub, const std::string& socket,
                    const std::string& command,
                    std::chrono::system_clock::time_point deadline, bool json) {
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline);
  v1::StatusResponse st;
  absl::Status s = FromGrpc(stub->Status(&ctx, v1::StatusRequest(), &st));
  if (!s.ok()) {
    return Fail(socket,
                absl::Status(s.code(), absl::StrCat(s.message(),
                                                    " (is gmlaked running?)")));
  }
  if (!json) {
    std::fputs(
        (command == "status" ? PrintStatus(st) : PrintClients(st)).c_str(),
        stdout);
  } else if (command == "clients") {
    nlohmann::ordered_json sessions = nlohmann::ordered_json::array();
    for (const v1::SessionStatus& s : st.sessions()) {
      sessions.push_back(ProtoToJson(s));
    }
    nlohmann::ordered_json out;
    out["sessions"] = std::move(sessions);
    std::fputs((out.dump(2) + "\n").c_str(), stdout);
  } else {
    std::fputs(ProtoToJsonText(st).c_str(), stdout);
  }
  return 0;
}

// `trim`: gmlaked releases up to --bytes of its free chunks to the driver.
int Trim(v1::Lake::Stub* stub, const std::string& socket,
         std::chrono::system_clock::time_point deadline, bool json) {
  absl::StatusOr<uint64_t> bytes = ParseBytes(absl::GetFlag(FLAGS_bytes));
  if (!bytes.ok()) {
    std::fprintf(stderr, "gmlakectl: --bytes: %s\n",
                 std::string(bytes.status().message()).c_str());
    return 2;
  }
  v1::TrimRequest req;
  req.set_device(absl::GetFlag(FLAGS_device));
  req.set_bytes(*bytes);
  v1::TrimResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline);
  absl::Status s = FromGrpc(stub->Trim(&ctx, req, &resp));
  if (absl::IsPermissionDenied(s)) {
    return Fail(socket, absl::PermissionDeniedError(
                            absl::StrCat("refused to trim: ", s.message())));
  }
  if (!s.ok()) return Fail(socket, s);
  if (json) {
    std::fputs(ProtoToJsonText(resp).c_str(), stdout);
  } else {
    std::printf("released %s (%llu chunks) to the driver\n",
                FormatBytes(resp.released_bytes()).c_str(),
                static_cast<unsigned long long>(resp.released_chunks()));
  }
  return 0;
}

int Main(const std::string& command) {
  const std::string socket = absl::GetFlag(FLAGS_socket);
  auto channel = grpc::CreateChannel(absl::StrCat("unix:", socket),
                                     grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::Lake::Stub> stub = v1::Lake::NewStub(channel);
  const auto deadline =
      absl::ToChronoTime(absl::Now() + absl::GetFlag(FLAGS_timeout));
  const bool json = absl::GetFlag(FLAGS_json);
  if (command == "status" || command == "clients") {
    return StatusOrClients(stub.get(), socket, command, deadline, json);
  }
  if (command == "trim") return Trim(stub.get(), socket, deadline, json);
  if (command == "health") return Health(channel, deadline, json);
  std::fprintf(stderr, "gmlakectl: unknown command '%s'\n%s\n", command.c_str(),
               kUsage);
  return 2;
}

}  // namespace
}  // namespace gmlake

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(gmlake::kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n", gmlake::kUsage);
    return 2;
  }
  return gmlake::Main(args[1]);
}
