// Copyright 2026 The GMLake Authors.
//
// gmlaked's grpc.health.v1.Health service, in place of gRPC's built-in
// one: the same answers (Check, and Watch streams that send each change),
// with a limit on the Watch streams one uid holds open at once. Each
// stream costs gmlaked memory for as long as the client keeps it (20,000
// of them grew it by 360 MB, issue 20 §C); a connection carries at most
// --max_streams_per_connection calls, but a uid may open many connections,
// so the limit is per uid, across them. Streams past it are refused with
// RESOURCE_EXHAUSTED naming the limit and its flag.

#ifndef GMLAKE_DAEMON_HEALTH_SERVICE_H_
#define GMLAKE_DAEMON_HEALTH_SERVICE_H_

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "common/fd_passing.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/health.grpc.pb.h"

namespace gmlake {

class HealthWatch;

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  // Who made a call (as LakeService::CallerLookup); unknown callers share
  // one count.
  using CallerLookup = std::function<std::optional<PeerCredentials>(
      const grpc::ServerContextBase&)>;

  // Serves "" (the whole daemon) as SERVING.
  HealthService(CallerLookup identify, size_t max_watches_per_uid);
  ~HealthService() override;

  // Sets one service's status (adding it), or every service's; Watch
  // streams of it are sent the change.
  void SetServingStatus(const std::string& service, bool serving);
  void SetServingStatus(bool serving);

  // Watch streams open, and refused for the limit, so far.
  size_t watches() const;
  uint64_t watches_refused() const;

  grpc::ServerUnaryReactor* Check(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request,
      grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  friend class HealthWatch;
  Status StatusOfLocked(const std::string& service) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetLocked(const std::string& service, Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stream that ends: forgotten, its uid's count lowered.
  void Gone(HealthWatch* watch);

  const CallerLookup identify_;
  const size_t max_watches_per_uid_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Status> services_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<HealthWatch*, std::shared_ptr<HealthWatch>> watches_
      ABSL_GUARDED_BY(mu_);
  // Open streams per uid (unknown callers: uid_t(-1)).
  absl::flat_hash_map<uid_t, size_t> per_uid_ ABSL_GUARDED_BY(mu_);
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_HEALTH_SERVICE_H_
