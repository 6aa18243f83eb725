// Copyright 2026 The GMLake Authors.
//
// LakeService: the gRPC face of the Lake (service gmlake.v1.Lake). Unary
// calls run on gRPC's synchronous thread pool (a Lease may wait for other
// sessions to return memory); Watch is a callback stream, so thousands of
// idle sessions hold no thread.

#ifndef GMLAKE_DAEMON_LAKE_SERVICE_H_
#define GMLAKE_DAEMON_LAKE_SERVICE_H_

#include <unistd.h>

#include <functional>
#include <string>
#include <utility>

#include "daemon/grpc_peer_credentials.h"
#include "daemon/lake.h"
#include "daemon/operator_access.h"
#include "proto/gmlake.grpc.pb.h"

namespace gmlake {

class LakeService final
    : public v1::Lake::WithCallbackMethod_Watch<v1::Lake::Service> {
 public:
  // How the service learns who made a call: gmlaked looks the call's
  // connection up in the credentials its GrpcUnixAcceptor recorded
  // (ByConnection); tests and fuzzers in-process say whom they play. Null:
  // every caller is unknown, so nobody may Trim.
  using CallerLookup = std::function<Caller(const grpc::ServerContextBase&)>;
  static CallerLookup ByConnection(const GrpcPeerCredentials* peers) {
    return [peers](const grpc::ServerContextBase& context) {
      return peers->Lookup(context.peer());
    };
  }

  // `lake` must outlive the service. `daemon_uid` may Trim and see every
  // session, as root may.
  explicit LakeService(Lake* lake, CallerLookup identify = nullptr,
                       uid_t daemon_uid = ::geteuid())
      : lake_(lake), identify_(std::move(identify)), access_(daemon_uid) {}

  grpc::Status OpenSession(grpc::ServerContext* context,
                           const v1::OpenSessionRequest* request,
                           v1::OpenSessionResponse* response) override;
  grpc::Status Lease(grpc::ServerContext* context,
                     const v1::LeaseRequest* request,
                     v1::LeaseResponse* response) override;
  grpc::Status Return(grpc::ServerContext* context,
                      const v1::ReturnRequest* request,
                      v1::ReturnResponse* response) override;
  grpc::Status ReportUsage(grpc::ServerContext* context,
                           const v1::ReportUsageRequest* request,
                           v1::ReportUsageResponse* response) override;
  grpc::ServerWriteReactor<v1::PressureRequest>* Watch(
      grpc::CallbackServerContext* context,
      const v1::WatchRequest* request) override;
  grpc::Status CloseSession(grpc::ServerContext* context,
                            const v1::CloseSessionRequest* request,
                            v1::CloseSessionResponse* response) override;
  grpc::Status Status(grpc::ServerContext* context,
                      const v1::StatusRequest* request,
                      v1::StatusResponse* response) override;
  grpc::Status Trim(grpc::ServerContext* context,
                    const v1::TrimRequest* request,
                    v1::TrimResponse* response) override;

  // Who made the call on `context`.
  Caller CallerOf(const grpc::ServerContextBase& context) const;
  // OK unless `session` belongs to another uid than the caller's
  // (Lake::CheckCaller).
  absl::Status CheckCaller(const grpc::ServerContextBase& context,
                           uint64_t session) const;

 private:
  Lake* const lake_;
  const CallerLookup identify_;
  const OperatorAccess access_;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_LAKE_SERVICE_H_
