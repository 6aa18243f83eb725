// Copyright 2026 The GMLake Authors.
//
// gmlaked: the per-node GMLake daemon. Owns the node's physical GPU chunks
// and leases them to training processes (docs/daemon.md).
//
//   gmlaked --flagfile=/etc/gmlake/gmlaked.flags
//   gmlaked --backend=host --host_devices=2 --capacity=8GiB
//           --socket=/tmp/g/gmlaked.sock --fd_socket=/tmp/g/fd.sock

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/bytes.h"
#include "common/fd_passing.h"
#include "common/vmm.h"
#include "daemon/grpc_peer_credentials.h"
#include "daemon/lake.h"
#include "daemon/log.h"
#include "daemon/servers.h"
#include "daemon/service_notifier.h"
#include "daemon/units.h"
#include "proto/protocol.h"

ABSL_FLAG(std::string, socket, "/run/gmlake/gmlaked.sock",
          "gRPC socket clients and gmlakectl connect to.");
ABSL_FLAG(std::string, fd_socket, "/run/gmlake/fd.sock",
          "Socket where clients bind sessions and receive chunk descriptors.");
ABSL_FLAG(std::string, socket_mode, "0666",
          "Permissions (octal) of both socket files. Quotas and scrubbing "
          "work per uid, so every user may connect by default.");
ABSL_FLAG(std::string, backend, "auto",
          "VMM backend: auto (cuda when a GPU is present, else host), cuda "
          "or host. GMLAKE_BACKEND overrides auto.");
ABSL_FLAG(int, host_devices, 1, "host backend: devices to emulate.");
ABSL_FLAG(std::string, host_capacity, "64GiB",
          "host backend: memory per emulated device.");
ABSL_FLAG(std::string, host_granularity, "2MiB",
          "host backend: chunk granularity.");
ABSL_FLAG(std::string, capacity, "0.9",
          "Most memory the lake creates per device: bytes (40GiB) or a "
          "fraction of the device (0.9). A comma-separated list gives one "
          "value per device.");
ABSL_FLAG(std::string, precreate, "0",
          "Memory to create per device at start-up, before any lease: bytes "
          "or a fraction of --capacity.");
ABSL_FLAG(std::string, chunk_size, "0",
          "Size of every chunk (a multiple of the granularity; 0: the "
          "granularity, 2 MiB on an H200).");
ABSL_FLAG(std::string, uid_quota, "0",
          "Most memory all sessions of one uid may hold, over all devices "
          "(0: no limit).");
ABSL_FLAG(std::string, session_quota, "0",
          "Most memory one session may hold, over all devices (0: no limit).");
ABSL_FLAG(std::string, scrub, "cross-uid",
          "Which chunks are zeroed before they are leased again: always, "
          "cross-uid (those going to another uid) or never.");
ABSL_FLAG(absl::Duration, reclaim_timeout, absl::Seconds(2),
          "How long a lease waits for other sessions to return memory while "
          "none arrives (each byte that comes back restarts it).");
ABSL_FLAG(absl::Duration, pressure_patience, absl::Milliseconds(500),
          "How long a session asked for memory has to answer (or return "
          "more) before the lease asks others for what it owes and its cache "
          "reports are discounted (at most --reclaim_timeout).");
ABSL_FLAG(absl::Duration, pressure_growth_window, absl::Seconds(2),
          "A short lease asks idle sessions for at least what its session "
          "leased over this window (its recent growth).");
ABSL_FLAG(int64_t, pressure_peak_margin_divisor, 64,
          "A short lease asks for its session's deficit against its own "
          "recent peak and 1/this of that peak, for what a turn needs beyond "
          "the last one (0: no margin).");
ABSL_FLAG(int, max_waiting_leases, 64,
          "Most leases waiting for other sessions to return memory at once; "
          "each holds a thread. Past it, a lease that would wait fails.");
ABSL_FLAG(int, max_waiting_leases_per_uid, 16,
          "Most leases of one uid waiting for memory at once.");
ABSL_FLAG(bool, prefer_reclaim, false,
          "Before creating chunks for a lease, ask other sessions for the "
          "memory they cache and do not use; create only the rest.");
ABSL_FLAG(absl::Duration, bind_timeout, absl::Seconds(10),
          "Sessions not bound on the fd socket within this are dropped.");
ABSL_FLAG(absl::Duration, claim_timeout, absl::Seconds(30),
          "Leases whose descriptors are not claimed within this go back.");
ABSL_FLAG(absl::Duration, liveness_interval, absl::Milliseconds(200),
          "How often to check that the sessions' processes still run.");
ABSL_FLAG(int, max_sessions, 8192, "Most sessions at once.");
ABSL_FLAG(int, max_sessions_per_uid, 512,
          "Most sessions one uid may have at once (ended ones still holding "
          "chunks included).");
ABSL_FLAG(int, max_unbound_sessions, 128,
          "Most sessions opened and not yet bound on the fd socket; at the "
          "limit, one waiting over 1s makes room for a new one.");
ABSL_FLAG(bool, check_claimed_pid, true,
          "Require the fd-socket peer's pid to be the pid the client "
          "claimed (turn off for clients in another pid namespace).");
ABSL_FLAG(bool, zero_on_release, false,
          "Zero chunks that held a session's data before they go back to "
          "the driver. Off: they go back at once, and as many bytes of what "
          "gmlaked creates next are zeroed before they are leased.");
ABSL_FLAG(absl::Duration, release_idle, absl::Seconds(60),
          "Free chunks unused this long go back to the driver, down to "
          "--precreate per device, so that processes outside the lake can "
          "have the memory; once no session is open and none of a "
          "device's chunks is leased, within about a second (0: keep them "
          "until gmlakectl trim).");
ABSL_FLAG(std::string, metrics_address, "",
          "Serve Prometheus metrics over HTTP at this address "
          "(127.0.0.1:9478, [::1]:9478, :9478 for every address; empty: "
          "off). No authentication: bind it to loopback or a monitoring "
          "network.");
ABSL_FLAG(bool, export_on_demand, true,
          "Export a chunk's descriptor each time it is sent (~26 us on an "
          "H200) instead of keeping one open per chunk, so that the "
          "daemon's descriptors do not grow with the lake.");
ABSL_FLAG(int, max_grpc_connections_per_uid, 64,
          "Open gRPC connections of one uid (each client process holds "
          "one); the next is refused with a message that names this flag.");
ABSL_FLAG(int, max_grpc_connections, 1024,
          "Open gRPC connections in all; the next is refused.");
ABSL_FLAG(int, max_streams_per_connection, 64,
          "Calls (Watch streams, leases, health watches) at once on one gRPC "
          "connection; with --max_grpc_connections_per_uid it bounds a "
          "uid's calls.");
ABSL_FLAG(int, max_health_watches_per_uid, 256,
          "Health Watch streams (grpc.health.v1) one uid may hold open at "
          "once, over all its connections; the next is refused with a "
          "message that names this flag.");
ABSL_FLAG(absl::Duration, grpc_idle_timeout, absl::Minutes(5),
          "A gRPC connection with no call this long is closed (clients "
          "reconnect when they next call).");
ABSL_FLAG(std::string, grpc_fd_guard, "auto",
          "How descriptors sent on the gRPC socket are kept from gRPC, whose "
          "close of one can block: passrights (the kernel refuses them, "
          "Linux 6.16), proxy (a relay takes them and drops the connection) "
          "or auto (passrights where the kernel has it, else proxy).");
ABSL_FLAG(int, fd_limit, 0,
          "RLIMIT_NOFILE to serve with; 0 raises it to the hard limit.");
ABSL_FLAG(bool, verbose, false, "Log every session open, bind and lease.");
ABSL_FLAG(std::string, testonly_scrub_gate, "",
          "Tests only: a lease that must zero chunks first waits (at most "
          "60 s) until this file exists, so a test can act while the lease "
          "is in flight.");

namespace gmlake {
namespace {

// Sets RLIMIT_NOFILE's soft limit to --fd_limit, or else to the hard limit:
// each client holds a
// connection, each claim a batch of exports in flight, and without
// --export_on_demand (or on the host backend, whose chunks are memfds) each
// chunk a descriptor (70 000 chunks of 2 MiB fill an H200).
uint64_t SetFdLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
  if (const int want = absl::GetFlag(FLAGS_fd_limit); want > 0) {
    r.rlim_cur = std::min<rlim_t>(static_cast<rlim_t>(want), r.rlim_max);
  } else if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
  }
  ::setrlimit(RLIMIT_NOFILE, &r);
  ::getrlimit(RLIMIT_NOFILE, &r);
  return r.rlim_cur;
}

absl::StatusOr<uint64_t> BytesFlag(const std::string& name,
                                   const std::string& text) {
  absl::StatusOr<uint64_t> b = ParseBytes(text);
  if (!b.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", text, ": ", b.status().message()));
  }
  return b;
}

// One Capacity per device from a comma-separated flag (one value: all).
absl::StatusOr<std::vector<Capacity>> CapacityList(const std::string& name,
                                                   const std::string& text,
                                                   int devices,
                                                   bool allow_zero) {
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  if (parts.size() != 1 && parts.size() != static_cast<size_t>(devices)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, "=", text, " has ", parts.size(),
        " values; give one for all devices or one per device (", devices, ")"));
  }
  std::vector<Capacity> out;
  for (int i = 0; i < devices; ++i) {
    const std::string& p = parts.size() == 1 ? parts[0] : parts[i];
    if (allow_zero && (p == "0" || p.empty())) {
      out.push_back(Capacity{});
      continue;
    }
    absl::StatusOr<Capacity> c = ParseCapacity(p);
    if (!c.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": ", c.status().message()));
    }
    out.push_back(*c);
  }
  return out;
}

// One line for systemd's STATUS= (shown by systemctl status): sessions and
// the books summed over devices.
std::string StatusLine(const v1::StatusResponse& st) {
  uint64_t created = 0, leased = 0, free = 0, capacity = 0;
  for (const v1::DeviceStatus& d : st.devices()) {
    created += d.created_bytes();
    leased += d.leased_bytes();
    free += d.free_bytes();
    capacity += d.capacity_bytes();
  }
  return absl::StrFormat(
      "serving %d sessions; %s leased, %s free, %s created of %s on %d "
      "devices",
      st.sessions_size(), FormatBytes(leased), FormatBytes(free),
      FormatBytes(created), FormatBytes(capacity), st.devices_size());
}

// Tells systemd; a failure is logged once, never fatal (the daemon serves
// its clients whether or not the service manager hears it).
void Notify(const ServiceNotifier& notifier, absl::string_view state) {
  static bool warned = false;
  absl::Status s = notifier.Notify(state);
  if (!s.ok() && !warned) {
    warned = true;
    Warnf("%s", s.message());
  }
}

// Until SIGTERM or SIGINT: checks the sessions' processes every
// --liveness_interval, gives idle chunks back to the driver about once a
// second, and keeps systemd's watchdog and STATUS= line fed. Returns the
// signal.
int ServeUntilStopped(Lake* lake, const ServiceNotifier& notifier) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  const absl::Duration period = absl::GetFlag(FLAGS_liveness_interval);
  // Half of WatchdogSec=, as sd_watchdog_enabled(3) advises.
  const absl::Duration watchdog = notifier.watchdog_interval() / 2;
  const timespec wait = absl::ToTimespec(
      watchdog > absl::ZeroDuration() ? std::min(period, watchdog) : period);
  absl::Time last_release = absl::Now();
  absl::Time last_watchdog = absl::Now();
  absl::Time last_status = absl::Now();
  std::string status_line;
  for (;;) {
    const int sig = ::sigtimedwait(&stop_signals, nullptr, &wait);
    if (sig == SIGTERM || sig == SIGINT) return sig;
    lake->CheckLiveness();
    const absl::Time now = absl::Now();
    if (now - last_release >= absl::Seconds(1)) {
      last_release = now;
      lake->ReleaseIdle(now);
    } else {
      // With no session open, free memory goes back within a wake.
      lake->ReleaseIdle(now, /*only_without_sessions=*/true);
    }
    if (watchdog > absl::ZeroDuration() && now - last_watchdog >= watchdog) {
      last_watchdog = now;
      Notify(notifier, "WATCHDOG=1");
    }
    if (notifier.enabled() && now - last_status >= absl::Seconds(5)) {
      last_status = now;
      v1::StatusResponse st;
      lake->FillStatus(&st);
      std::string line = StatusLine(st);
      if (line != status_line) {
        status_line = std::move(line);
        Notify(notifier, absl::StrCat("STATUS=", status_line));
      }
    }
  }
}

// The VMM backend of --backend and the host_* flags, refused unless it has
// memory to share. `host_capacity` gets --host_capacity (fractions of a
// host device are of it).
absl::StatusOr<std::unique_ptr<VmmBackend>> BackendFromFlags(
    uint64_t* host_capacity) {
  BackendOptions bo;
  bo.kind = absl::GetFlag(FLAGS_backend);
  if (bo.kind == "accounting") {
    return absl::InvalidArgumentError(
        "--backend=accounting has no memory to share: use cuda or host");
  }
  bo.host_devices = absl::GetFlag(FLAGS_host_devices);
  absl::StatusOr<uint64_t> host_cap =
      BytesFlag("host_capacity", absl::GetFlag(FLAGS_host_capacity));
  if (!host_cap.ok()) return host_cap.status();
  bo.host_capacity_bytes = *host_cap;
  *host_capacity = *host_cap;
  absl::StatusOr<uint64_t> host_gran =
      BytesFlag("host_granularity", absl::GetFlag(FLAGS_host_granularity));
  if (!host_gran.ok()) return host_gran.status();
  bo.host_granularity = *host_gran;
  absl::StatusOr<std::unique_ptr<VmmBackend>> backend = CreateBackend(bo);
  if (!backend.ok()) {
    return absl::Status(
        backend.status().code(),
        absl::StrCat("creating the VMM backend: ", backend.status().message()));
  }
  if (!(*backend)->has_memory()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend ", (*backend)->name(),
        " has no memory to share (GMLAKE_BACKEND?): use cuda or host"));
  }
  return backend;
}

// Each device's chunk size, capacity and memory created ahead of time, from
// --chunk_size, --capacity and --precreate, in whole chunks.
absl::StatusOr<std::vector<LakeDeviceConfig>> DevicesFromFlags(
    const VmmBackend& backend, uint64_t host_capacity) {
  const int devices = backend.device_count();
  absl::StatusOr<uint64_t> chunk =
      BytesFlag("chunk_size", absl::GetFlag(FLAGS_chunk_size));
  if (!chunk.ok()) return chunk.status();
  absl::StatusOr<std::vector<Capacity>> caps =
      CapacityList("capacity", absl::GetFlag(FLAGS_capacity), devices, false);
  if (!caps.ok()) return caps.status();
  absl::StatusOr<std::vector<Capacity>> pre =
      CapacityList("precreate", absl::GetFlag(FLAGS_precreate), devices, true);
  if (!pre.ok()) return pre.status();
  std::vector<LakeDeviceConfig> out;
  for (int i = 0; i < devices; ++i) {
    LakeDeviceConfig d;
    d.chunk_size = *chunk != 0 ? *chunk : backend.granularity(i);
    // The device's memory, for fractions: what the backend reports, else
    // (host) the emulated size.
    uint64_t whole = backend.device_memory_bytes(i);
    if (whole == 0 && backend.name() == "host") whole = host_capacity;
    if ((*caps)[i].is_fraction && whole == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--capacity=", absl::GetFlag(FLAGS_capacity),
          " is a fraction of the device, but the ", backend.name(),
          " backend does not report device memory: give bytes, e.g. "
          "--capacity=120GiB"));
    }
    d.capacity_bytes = (*caps)[i].Resolve(whole);
    d.capacity_bytes -= d.capacity_bytes % d.chunk_size;
    d.precreate_bytes = (*pre)[i].Resolve(d.capacity_bytes);
    d.precreate_bytes -= d.precreate_bytes % d.chunk_size;
    out.push_back(d);
  }
  return out;
}

// Quotas and scrubbing, from their flags, into `lo`.
absl::Status QuotasFromFlags(LakeOptions* lo) {
  absl::StatusOr<uint64_t> uq =
      BytesFlag("uid_quota", absl::GetFlag(FLAGS_uid_quota));
  if (!uq.ok()) return uq.status();
  absl::StatusOr<uint64_t> sq =
      BytesFlag("session_quota", absl::GetFlag(FLAGS_session_quota));
  if (!sq.ok()) return sq.status();
  lo->uid_quota_bytes = *uq;
  lo->session_quota_bytes = *sq;
  absl::StatusOr<ScrubPolicy> scrub =
      ParseScrubPolicy(absl::GetFlag(FLAGS_scrub));
  if (!scrub.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--scrub: ", scrub.status().message()));
  }
  lo->scrub = *scrub;
  return absl::OkStatus();
}

// Pressure (reclaim), waiting leases, session limits and the idle release,
// from their flags, into `lo`; a value out of range names its flag.
absl::Status LimitsFromFlags(LakeOptions* lo) {
  lo->reclaim_timeout = absl::GetFlag(FLAGS_reclaim_timeout);
  lo->pressure_patience = absl::GetFlag(FLAGS_pressure_patience);
  lo->pressure_growth_window = absl::GetFlag(FLAGS_pressure_growth_window);
  if (lo->pressure_patience <= absl::ZeroDuration() ||
      lo->pressure_growth_window < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--pressure_patience must be positive and --pressure_growth_window "
        "not negative");
  }
  const int64_t margin = absl::GetFlag(FLAGS_pressure_peak_margin_divisor);
  if (margin < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pressure_peak_margin_divisor=", margin,
        " is negative; give 0 for no margin or N for 1/N of the peak"));
  }
  lo->pressure_peak_margin_divisor = static_cast<uint64_t>(margin);
  lo->prefer_reclaim = absl::GetFlag(FLAGS_prefer_reclaim);
  lo->max_waiting_leases = absl::GetFlag(FLAGS_max_waiting_leases);
  lo->max_waiting_leases_per_uid =
      absl::GetFlag(FLAGS_max_waiting_leases_per_uid);
  if (lo->max_waiting_leases <= 0 || lo->max_waiting_leases_per_uid <= 0) {
    return absl::InvalidArgumentError(
        "--max_waiting_leases and --max_waiting_leases_per_uid must be "
        "positive");
  }
  lo->bind_timeout = absl::GetFlag(FLAGS_bind_timeout);
  lo->claim_timeout = absl::GetFlag(FLAGS_claim_timeout);
  lo->max_sessions = absl::GetFlag(FLAGS_max_sessions);
  if (lo->max_sessions <= 0) {
    return absl::InvalidArgumentError("--max_sessions must be positive");
  }
  lo->max_sessions_per_uid = absl::GetFlag(FLAGS_max_sessions_per_uid);
  lo->max_unbound_sessions = absl::GetFlag(FLAGS_max_unbound_sessions);
  if (lo->max_sessions_per_uid <= 0 || lo->max_unbound_sessions <= 0) {
    return absl::InvalidArgumentError(
        "--max_sessions_per_uid and --max_unbound_sessions must be positive");
  }
  lo->check_claimed_pid = absl::GetFlag(FLAGS_check_claimed_pid);
  lo->release.idle_after = absl::GetFlag(FLAGS_release_idle);
  if (lo->release.idle_after < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--release_idle must be 0 (never) or a positive duration");
  }
  lo->zero_on_release = absl::GetFlag(FLAGS_zero_on_release);
  lo->export_on_demand = absl::GetFlag(FLAGS_export_on_demand);
  if (const std::string gate = absl::GetFlag(FLAGS_testonly_scrub_gate);
      !gate.empty()) {
    lo->testonly_before_lease_scrub = [gate] {
      const absl::Time give_up = absl::Now() + absl::Seconds(60);
      while (::access(gate.c_str(), F_OK) != 0 && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(5));
      }
    };
  }
  return absl::OkStatus();
}

// The servers' settings: the socket flags (paths, mode), the gRPC limits and
// the metrics address.
absl::StatusOr<ServersOptions> ServersFromFlags(const LakeOptions& lo) {
  ServersOptions so;
  so.grpc_path = absl::GetFlag(FLAGS_socket);
  so.fd_path = lo.fd_socket_path;
  const std::string mode_text = absl::GetFlag(FLAGS_socket_mode);
  char* end = nullptr;
  const long mode = std::strtol(mode_text.c_str(), &end, 8);
  if (end == mode_text.c_str() || *end != '\0' || mode < 0 || mode > 0777) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--socket_mode=", mode_text, " is not an octal mode like 0666"));
  }
  so.mode = static_cast<mode_t>(mode);
  if (so.grpc_path.size() > kMaxUnixPathLength ||
      so.fd_path.size() > kMaxUnixPathLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket paths must be at most ", kMaxUnixPathLength, " bytes"));
  }
  absl::StatusOr<GrpcFdGuard> fd_guard =
      ParseGrpcFdGuard(absl::GetFlag(FLAGS_grpc_fd_guard));
  if (!fd_guard.ok()) return fd_guard.status();
  so.fd_guard = *fd_guard;
  so.bind_timeout = lo.bind_timeout;
  so.grpc_limits.max_connections_per_uid = static_cast<size_t>(
      std::max(1, absl::GetFlag(FLAGS_max_grpc_connections_per_uid)));
  so.grpc_limits.max_connections = static_cast<size_t>(
      std::max(1, absl::GetFlag(FLAGS_max_grpc_connections)));
  so.max_streams_per_connection =
      absl::GetFlag(FLAGS_max_streams_per_connection);
  so.grpc_idle_timeout = absl::GetFlag(FLAGS_grpc_idle_timeout);
  so.max_health_watches_per_uid = static_cast<size_t>(
      std::max(1, absl::GetFlag(FLAGS_max_health_watches_per_uid)));
  so.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  return so;
}

// The settings gmlaked starts with, in its log.
void LogSettings(const VmmBackend& backend, const LakeOptions& lo,
                 uint64_t fd_limit) {
  Logf("gmlaked starting (protocol %d)", ProtocolVersion());
  Logf("backend: %s", backend.Describe());
  for (size_t i = 0; i < lo.devices.size(); ++i) {
    Logf("device %d: capacity %s in chunks of %s, %s created ahead of time",
         static_cast<int>(i), FormatBytes(lo.devices[i].capacity_bytes),
         FormatBytes(lo.devices[i].chunk_size),
         FormatBytes(lo.devices[i].precreate_bytes));
  }
  Logf(
      "limits: uid quota %s, session quota %s, scrub %s, reclaim timeout "
      "%s%s, max sessions %d (%d per uid, %d unbound), open files %d",
      lo.uid_quota_bytes ? FormatBytes(lo.uid_quota_bytes) : "none",
      lo.session_quota_bytes ? FormatBytes(lo.session_quota_bytes) : "none",
      ScrubPolicyName(lo.scrub), absl::FormatDuration(lo.reclaim_timeout),
      lo.prefer_reclaim ? " (reclaim before creating)" : "", lo.max_sessions,
      lo.max_sessions_per_uid, lo.max_unbound_sessions, fd_limit);
  Logf(
      "release: free chunks unused for %s go back to the driver, down to "
      "--precreate",
      lo.release.enabled() ? absl::FormatDuration(lo.release.idle_after)
                           : "ever (never: --release_idle=0)");
  if (fd_limit < 4096) {
    Warnf(
        "warning: only %d open files allowed; each client needs one, and "
        "each chunk one on the host backend or without --export_on_demand "
        "(raise LimitNOFILE= / ulimit -n)",
        fd_limit);
  }
}

// Tells systemd the books (READY=1 with it once serving).
void NotifyStatus(const ServiceNotifier& notifier, const Lake& lake,
                  absl::string_view prefix) {
  v1::StatusResponse st;
  lake.FillStatus(&st);
  Notify(notifier, absl::StrCat(prefix, "STATUS=", StatusLine(st)));
}

absl::Status Run(const ServiceNotifier& notifier) {
  SetVerboseLog(absl::GetFlag(FLAGS_verbose));
  const uint64_t fd_limit = SetFdLimit();
  uint64_t host_capacity = 0;
  absl::StatusOr<std::unique_ptr<VmmBackend>> backend =
      BackendFromFlags(&host_capacity);
  if (!backend.ok()) return backend.status();
  LakeOptions lo;
  absl::StatusOr<std::vector<LakeDeviceConfig>> devices =
      DevicesFromFlags(**backend, host_capacity);
  if (!devices.ok()) return devices.status();
  lo.devices = *std::move(devices);
  lo.fd_socket_path = absl::GetFlag(FLAGS_fd_socket);
  if (absl::Status s = QuotasFromFlags(&lo); !s.ok()) return s;
  if (absl::Status s = LimitsFromFlags(&lo); !s.ok()) return s;
  absl::StatusOr<ServersOptions> so = ServersFromFlags(lo);
  if (!so.ok()) return so.status();
  LogSettings(**backend, lo, fd_limit);

  uint64_t precreate = 0;
  for (const LakeDeviceConfig& d : lo.devices) precreate += d.precreate_bytes;
  if (precreate > 0) {
    Notify(notifier, absl::StrCat("STATUS=creating ", FormatBytes(precreate),
                                  " of chunks ahead of time (--precreate)"));
  }
  absl::StatusOr<std::unique_ptr<Lake>> lake = Lake::Create(backend->get(), lo);
  if (!lake.ok()) return lake.status();
  // The backend may have raised the limit for its chunks: --fd_limit holds
  // from here on.
  if (absl::GetFlag(FLAGS_fd_limit) > 0) SetFdLimit();
  absl::StatusOr<std::unique_ptr<Servers>> servers =
      Servers::Start(lake->get(), *so);
  if (!servers.ok()) return servers.status();
  Logf("serving: gRPC on unix:%s (%s), descriptors on %s (mode %s)",
       so->grpc_path, (*servers)->grpc_fd_guard(), so->fd_path,
       absl::GetFlag(FLAGS_socket_mode));
  if (!so->metrics_address.empty()) {
    Logf("metrics: Prometheus text at %s", (*servers)->metrics_url());
  }
  // Both sockets (and the metrics) serve: systemd may start what needs us.
  NotifyStatus(notifier, **lake, "READY=1\n");

  const int sig = ServeUntilStopped(lake->get(), notifier);
  Logf("%s: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  v1::StatusResponse ending;
  (*lake)->FillStatus(&ending);
  Notify(notifier, absl::StrFormat("STOPPING=1\nSTATUS=shutting down: ending "
                                   "%d sessions",
                                   ending.sessions_size()));
  // Sessions end first (their Watch streams finish, waiting leases fail),
  // then the servers stop, then the chunks are released.
  (*servers)->StopServing();
  (*lake)->Shutdown();
  (*servers)->Stop();
  v1::StatusResponse st;
  (*lake)->FillStatus(&st);
  uint64_t created = 0;
  for (const auto& d : st.devices()) created += d.created_bytes();
  lake->reset();
  Logf("released %s of chunks; stopped", FormatBytes(created));
  return absl::OkStatus();
}

}  // namespace
}  // namespace gmlake

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gmlaked: the GMLake per-node daemon that leases GPU memory chunks to "
      "training processes.\nUsage: gmlaked [--flagfile=FILE] [flags]");
  // Blocked before any thread starts, so only sigtimedwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A client that vanishes must not kill the daemon with SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "gmlaked: unexpected argument '%s' (flags only)\n",
                 rest[1]);
    return 2;
  }
  const gmlake::ServiceNotifier notifier =
      gmlake::ServiceNotifier::FromEnvironment();
  absl::Status s = gmlake::Run(notifier);
  if (!s.ok()) {
    gmlake::Errorf("error: %s", s.ToString());
    // systemctl status shows why it did not start.
    gmlake::Notify(notifier, absl::StrCat("STATUS=failed: ", s.message()));
    return 1;
  }
  return 0;
}
