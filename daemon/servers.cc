// Copyright 2026 The GMLake Authors.

#include "daemon/servers.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "daemon/metrics.h"
#include "proto/protocol.h"

namespace gmlake {
namespace {

// systemd makes /run/gmlake (RuntimeDirectory=); elsewhere the sockets'
// directories are made if missing.
absl::Status MakeParentDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return absl::OkStatus();
  const std::string dir = path.substr(0, slash);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the socket directory ", dir, ": ",
                     std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

Servers::Servers(Lake* lake, const ServersOptions& options)
    : options_(options),
      service_(lake, LakeService::ByConnection(&grpc_peers_)),
      health_(LakeService::ByConnection(&grpc_peers_),
              std::max<size_t>(1, options.max_health_watches_per_uid)) {}

Servers::~Servers() { Stop(); }

absl::StatusOr<std::unique_ptr<Servers>> Servers::Start(
    Lake* lake, const ServersOptions& options) {
  for (const std::string& path : {options.grpc_path, options.fd_path}) {
    if (absl::Status s = MakeParentDirectory(path); !s.ok()) return s;
  }
  // Refuses to start over a live gmlaked; removes a stale socket file. The
  // daemon accepts this socket's connections itself (GrpcUnixAcceptor) to
  // learn who is calling.
  absl::StatusOr<UniqueFd> listener =
      ListenUnix(options.grpc_path, options.mode);
  if (!listener.ok()) return Prefixed(listener.status(), "--socket: ");
  std::unique_ptr<Servers> servers(new Servers(lake, options));
  FdServerOptions fo;
  fo.path = options.fd_path;
  fo.mode = options.mode;
  fo.bind_timeout = options.bind_timeout;
  absl::StatusOr<std::unique_ptr<FdServer>> fd_server =
      FdServer::Start(lake, fo);
  if (!fd_server.ok()) {
    return Prefixed(fd_server.status(), "--fd_socket: ");  // ~Servers cleans
  }
  servers->fd_server_ = *std::move(fd_server);
  if (absl::Status s = servers->StartGrpc(*std::move(listener)); !s.ok()) {
    return s;
  }
  if (absl::Status s = servers->StartMetrics(lake); !s.ok()) return s;
  return servers;
}

absl::Status Servers::StartGrpc(UniqueFd listener) {
  grpc::EnableDefaultHealthCheckService(false);
  grpc::ServerBuilder builder;
  builder.RegisterService(&service_);
  // The standard health service (grpc.health.v1) beside the lake's, for
  // probes (`gmlakectl health`): gmlaked's own, which limits a uid's Watch
  // streams, in place of gRPC's built-in one.
  builder.RegisterService(&health_);
  builder.SetMaxReceiveMessageSize(8 << 20);
  builder.SetMaxSendMessageSize(8 << 20);
  // Bounds what one client can make gmlaked hold (with the acceptor's
  // connection limits).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             std::max(1, options_.max_streams_per_connection));
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONNECTION_IDLE_MS,
      static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(options_.grpc_idle_timeout), 1,
          INT32_MAX)));
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on unix:", options_.grpc_path,
                     ": the gRPC server did not start"));
  }
  absl::StatusOr<std::unique_ptr<GrpcUnixAcceptor>> acceptor =
      GrpcUnixAcceptor::Start(grpc_server_.get(), std::move(listener),
                              &grpc_peers_, options_.grpc_limits,
                              options_.fd_guard);
  if (!acceptor.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on unix:", options_.grpc_path, ": ",
                     acceptor.status().message()));
  }
  acceptor_ = *std::move(acceptor);
  health_.SetServingStatus(v1::Lake::service_full_name(), true);
  return absl::OkStatus();
}

absl::Status Servers::StartMetrics(Lake* lake) {
  if (options_.metrics_address.empty()) return absl::OkStatus();
  MetricsServerOptions mo;
  mo.address = options_.metrics_address;
  absl::StatusOr<std::unique_ptr<MetricsServer>> m =
      MetricsServer::Start(mo, [lake] {
        v1::StatusResponse st;
        lake->FillStatus(&st);
        st.set_protocol_version(ProtocolVersion());
        return RenderMetrics(st);
      });
  if (!m.ok()) return m.status();
  metrics_ = *std::move(m);
  return absl::OkStatus();
}

void Servers::StopServing() { health_.SetServingStatus(false); }

void Servers::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (metrics_ != nullptr) metrics_->Stop();
  if (acceptor_ != nullptr) acceptor_->Stop();
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(
        absl::ToChronoTime(absl::Now() + absl::Milliseconds(300)));
    grpc_server_->Wait();
  }
  if (fd_server_ != nullptr) fd_server_->Stop();
  ::unlink(options_.grpc_path.c_str());
}

std::string Servers::metrics_url() const {
  return metrics_ != nullptr ? metrics_->url() : "";
}

const char* Servers::grpc_fd_guard() const {
  return acceptor_ != nullptr && acceptor_->relay() != nullptr
             ? "relayed: descriptors sent there are dropped"
             : "the kernel refuses descriptors sent there";
}

}  // namespace gmlake
