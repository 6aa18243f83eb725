// Copyright 2026 The GMLake Authors.
//
// Fuzzes the gRPC service's request handling (daemon/lake_service.h)
// in-process, over a real Lake on the host backend: each input is a script
// of calls whose requests are the input's bytes parsed as the method's
// protobuf (as gRPC would hand them over), optionally pointed at a real
// session and token so that the calls reach past authentication. Sessions
// are bound beside it (as the fd socket would) with a uid from the input,
// and the caller of Status and Trim is root, gmlaked's uid, another uid or
// nobody. No call may crash, hang or throw; the books must balance after
// every call; and once the lake is gone no descriptor may be left open.

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "common/host_backend.h"
#include "daemon/lake.h"
#include "daemon/lake_service.h"
#include "proto/gmlake.grpc.pb.h"
#include "tests/fuzz/fuzz_input.h"

namespace gmlake {
namespace fuzz {
namespace {

constexpr size_t kChunk = 64 << 10;
constexpr int kMaxOps = 48;
constexpr uid_t kDaemonUid = 4242;

VmmBackend* Backend() {
  static VmmBackend* backend = [] {
    HostBackend::Options o;
    o.devices = 2;
    o.capacity_bytes = 64 << 20;
    o.granularity = kChunk;
    absl::StatusOr<std::unique_ptr<HostBackend>> b = HostBackend::Create(o);
    FUZZ_CHECK(b.ok(), "host backend: %s", b.status().ToString().c_str());
    return b->release();
  }();
  return backend;
}

void CheckBooks(const Lake& lake) {
  v1::StatusResponse st;
  lake.FillStatus(&st);
  for (const v1::DeviceStatus& d : st.devices()) {
    FUZZ_CHECK(
        d.created_chunks() ==
            d.free_chunks() + d.leased_chunks() + d.scrubbing_chunks(),
        "device %d: created %lu != free %lu + leased %lu + scrubbing %lu",
        d.device(), d.created_chunks(), d.free_chunks(), d.leased_chunks(),
        d.scrubbing_chunks());
  }
}

class Script {
 public:
  Script(FuzzInput* in, Lake* lake)
      : in_(in),
        lake_(lake),
        service_(
            lake, [this](const grpc::ServerContextBase&) { return caller_; },
            kDaemonUid) {}

  void Run() {
    for (int op = 0; op < kMaxOps && !in_->empty(); ++op) {
      Step(in_->Byte() % 10);
      CheckBooks(*lake_);
    }
  }

 private:
  // The request of the next call: the input's bytes as `Request`.
  template <typename Request>
  Request Parse() {
    Request req;
    req.ParseFromString(in_->Bytes(1024));
    return req;
  }
  // The same for a session's call, then perhaps pointed at a real session
  // and given its token.
  template <typename Request>
  Request ParseForSession() {
    Request req = Parse<Request>();
    const uint8_t how = in_->Byte();
    if ((how & 1) != 0 && !sessions_.empty()) {
      const SessionTicket& t = sessions_[in_->Byte() % sessions_.size()];
      req.set_session_id(t.id);
      if ((how & 2) != 0) req.set_token(t.token);
    }
    return req;
  }

  void Step(int op) {
    grpc::ServerContext ctx;
    switch (op) {
      case 0: {
        v1::OpenSessionResponse resp;
        v1::OpenSessionRequest req = Parse<v1::OpenSessionRequest>();
        if (in_->Byte() % 2) req.set_protocol_version(1);
        if (service_.OpenSession(&ctx, &req, &resp).ok()) {
          sessions_.push_back({resp.session_id(), resp.token()});
        }
        break;
      }
      case 1: {  // bound beside the service, as the fd socket would
        if (sessions_.empty()) break;
        const SessionTicket& t = sessions_[in_->Byte() % sessions_.size()];
        const uid_t uid = in_->Byte() % 3 * 1000;
        lake_->BindSession(t.id, t.token, {::getpid(), uid, uid}, nullptr)
            .IgnoreError();
        break;
      }
      case 2: {
        v1::LeaseResponse resp;
        v1::LeaseRequest req = ParseForSession<v1::LeaseRequest>();
        if (in_->Byte() % 2) req.set_chunk_count(in_->Byte() % 8);
        if (service_.Lease(&ctx, &req, &resp).ok()) {
          leased_.insert(leased_.end(), resp.chunk_ids().begin(),
                         resp.chunk_ids().end());
        }
        break;
      }
      case 3: {
        v1::ReturnResponse resp;
        v1::ReturnRequest req = ParseForSession<v1::ReturnRequest>();
        // Some of the chunks really leased, perhaps to another session.
        for (int n = in_->Byte() % 4; n > 0 && !leased_.empty(); --n) {
          req.add_chunk_ids(leased_[in_->Byte() % leased_.size()]);
        }
        service_.Return(&ctx, &req, &resp).IgnoreError();
        break;
      }
      case 4: {
        v1::ReportUsageResponse resp;
        v1::ReportUsageRequest req = ParseForSession<v1::ReportUsageRequest>();
        service_.ReportUsage(&ctx, &req, &resp).IgnoreError();
        break;
      }
      case 5: {
        v1::CloseSessionResponse resp;
        v1::CloseSessionRequest req =
            ParseForSession<v1::CloseSessionRequest>();
        service_.CloseSession(&ctx, &req, &resp).IgnoreError();
        break;
      }
      case 6: {
        v1::StatusResponse resp;
        v1::StatusRequest req = Parse<v1::StatusRequest>();
        PickCaller();
        FUZZ_CHECK(service_.Status(&ctx, &req, &resp).ok(), "Status failed");
        if (!caller_.has_value() ||
            (caller_->uid != 0 && caller_->uid != kDaemonUid)) {
          for (const v1::SessionStatus& s : resp.sessions()) {
            FUZZ_CHECK(caller_.has_value() && s.uid() == caller_->uid,
                       "uid %ld was shown a session of uid %ld",
                       caller_.has_value() ? long{caller_->uid} : -1L,
                       static_cast<long>(s.uid()));
          }
        }
        break;
      }
      case 7: {
        v1::TrimResponse resp;
        v1::TrimRequest req = Parse<v1::TrimRequest>();
        PickCaller();
        grpc::Status s = service_.Trim(&ctx, &req, &resp);
        const bool operator_call =
            caller_.has_value() &&
            (caller_->uid == 0 || caller_->uid == kDaemonUid);
        FUZZ_CHECK(operator_call ||
                       s.error_code() == grpc::StatusCode::PERMISSION_DENIED,
                   "a trim by a non-operator was not refused");
        break;
      }
      case 8:
        lake_->CheckLiveness();
        break;
      case 9: {
        if (sessions_.empty()) break;
        lake_->EndSession(sessions_[in_->Byte() % sessions_.size()].id, "fuzz");
        break;
      }
    }
  }

  void PickCaller() {
    switch (in_->Byte() % 4) {
      case 0:
        caller_ = std::nullopt;
        break;
      case 1:
        caller_ = PeerCredentials{::getpid(), 0, 0};
        break;
      case 2:
        caller_ = PeerCredentials{::getpid(), kDaemonUid, kDaemonUid};
        break;
      default:
        caller_ = PeerCredentials{::getpid(), 1000, 1000};
        break;
    }
  }

  FuzzInput* const in_;
  Lake* const lake_;
  Caller caller_;
  LakeService service_;
  std::vector<SessionTicket> sessions_;
  std::vector<uint64_t> leased_;
};

}  // namespace
}  // namespace fuzz
}  // namespace gmlake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gmlake;  // NOLINT
  VmmBackend* backend = fuzz::Backend();
  const int before = fuzz::OpenFdCount();
  {
    LakeOptions o;
    for (int d = 0; d < 2; ++d) {
      o.devices.push_back({fuzz::kChunk, 16 * fuzz::kChunk, 0});
    }
    o.uid_quota_bytes = 20 * fuzz::kChunk;
    o.session_quota_bytes = 12 * fuzz::kChunk;
    o.reclaim_timeout = absl::Milliseconds(1);
    o.max_sessions = 16;
    o.fd_socket_path = "/nonexistent/fd.sock";
    absl::StatusOr<std::unique_ptr<Lake>> lake = Lake::Create(backend, o);
    FUZZ_CHECK(lake.ok(), "Lake::Create: %s", lake.status().ToString().c_str());
    fuzz::FuzzInput in(data, size);
    fuzz::Script(&in, lake->get()).Run();
  }
  const int after = fuzz::OpenFdCount();
  FUZZ_CHECK(after == before, "%d descriptors open after the input, %d before",
             after, before);
  return 0;
}
