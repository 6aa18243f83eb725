// Copyright 2026 The GMLake Authors.
//
// gmlaked's servers around one Lake: the gRPC control plane (the lake's
// service and grpc.health.v1) on --socket, chunk descriptors on
// --fd_socket, and Prometheus metrics on --metrics_address. gmlaked_main.cc
// reads the flags; this file starts the servers and stops them in the order
// that lets every session end cleanly.

#ifndef GMLAKE_DAEMON_SERVERS_H_
#define GMLAKE_DAEMON_SERVERS_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/fd_server.h"
#include "daemon/grpc_peer_credentials.h"
#include "daemon/health_service.h"
#include "daemon/lake.h"
#include "daemon/lake_service.h"
#include "daemon/metrics_server.h"
#include "grpcpp/grpcpp.h"

namespace gmlake {

struct ServersOptions {
  std::string grpc_path;  // --socket
  std::string fd_path;    // --fd_socket
  mode_t mode = 0666;     // both socket files
  // How long a connection to the descriptor socket may stay unbound.
  absl::Duration bind_timeout = absl::Seconds(10);
  GrpcFdGuard fd_guard = GrpcFdGuard::kAuto;
  GrpcAcceptorLimits grpc_limits;
  int max_streams_per_connection = 64;
  absl::Duration grpc_idle_timeout = absl::Minutes(10);
  size_t max_health_watches_per_uid = 16;
  // Empty: no metrics server.
  std::string metrics_address;
};

class Servers {
 public:
  // Makes the sockets' directories where missing, then starts the
  // descriptor server, the gRPC server and its acceptor, and the metrics
  // server, in that order. On failure, what started is stopped and the
  // gRPC socket file removed; the error names the flag at fault. `lake`
  // must outlive the Servers.
  static absl::StatusOr<std::unique_ptr<Servers>> Start(
      Lake* lake, const ServersOptions& options);
  // Stop().
  ~Servers();
  Servers(const Servers&) = delete;
  Servers& operator=(const Servers&) = delete;

  // Health probes answer NOT_SERVING from here on (call before the lake
  // ends its sessions).
  void StopServing();
  // Stops the metrics, the acceptor, the gRPC server (its calls get 300 ms
  // to finish) and the descriptor server, and removes the gRPC socket
  // file. Call after Lake::Shutdown, so that Watch streams have ended.
  // Idempotent.
  void Stop();

  // For the start-up log: the metrics' URL ("" without), and how the gRPC
  // socket keeps descriptors from gRPC.
  std::string metrics_url() const;
  const char* grpc_fd_guard() const;

 private:
  Servers(Lake* lake, const ServersOptions& options);
  absl::Status StartGrpc(UniqueFd listener);
  absl::Status StartMetrics(Lake* lake);

  const ServersOptions options_;
  // Must outlive the gRPC server, which calls into them.
  GrpcPeerCredentials grpc_peers_;
  LakeService service_;
  HealthService health_;
  std::unique_ptr<FdServer> fd_server_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<GrpcUnixAcceptor> acceptor_;
  std::unique_ptr<MetricsServer> metrics_;
  bool stopped_ = false;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_SERVERS_H_
