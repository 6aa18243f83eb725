// Copyright 2026 The GMLake Authors.

#include "daemon/lake_service.h"

#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/mutex.h"
#include "daemon/log.h"
#include "proto/protocol.h"

namespace gmlake {
namespace {

// The most chunks one lease may ask for: bounds the response size (ids are
// 1-10 bytes each; the default gRPC message limit is 4 MiB).
constexpr uint64_t kMaxChunksPerLease = 256 * 1024;

std::vector<DeviceUsageReport> ToReports(
    const google::protobuf::RepeatedPtrField<v1::DeviceUsage>& usage) {
  std::vector<DeviceUsageReport> out;
  out.reserve(usage.size());
  for (const v1::DeviceUsage& u : usage) {
    out.push_back({u.device(), u.used_bytes(), u.cached_bytes()});
  }
  return out;
}

// One session's Watch stream, and the PressureSink the Lake sends to.
//
// Lifetime: gRPC holds it until OnDone; the Lake may hold it longer (as a
// shared_ptr sink), so `self_` keeps it alive until OnDone and the Lake's
// reference after that. Every gRPC call on it (StartWrite, Finish) is made
// without `mu_` held, and Finish is deferred while a write is in flight, so
// OnDone (after which nothing may touch the stream) cannot come while a
// call is being made.
class WatchStream final : public grpc::ServerWriteReactor<v1::PressureRequest>,
                          public PressureSink,
                          public std::enable_shared_from_this<WatchStream> {
 public:
  WatchStream(Lake* lake, uint64_t session) : lake_(lake), session_(session) {}

  // Registers with the Lake and sends the hello, or finishes with
  // `caller` (not OK: the caller may not watch this session) or the Lake's
  // error. Returns the reactor for gRPC.
  grpc::ServerWriteReactor<v1::PressureRequest>* Start(
      absl::string_view token, const absl::Status& caller) {
    self_ = shared_from_this();
    absl::Status s =
        caller.ok() ? lake_->AttachWatcher(session_, token, self_) : caller;
    if (!s.ok()) {
      {
        MutexLock l(&mu_);
        finished_ = true;
        attached_ = false;
      }
      Finish(ToGrpc(s));
      return this;
    }
    Pressure hello;
    hello.device = -1;
    hello.reason = "watching";
    Send(hello);
    return this;
  }

  void Send(const Pressure& p) override {
    v1::PressureRequest* next = nullptr;
    {
      MutexLock l(&mu_);
      if (finished_) return;
      v1::PressureRequest req;
      req.set_device(p.device);
      req.set_bytes_wanted(p.bytes);
      req.set_reason(p.reason);
      queue_.push_back(std::move(req));
      if (writing_) return;
      writing_ = true;
      next = &queue_.front();
    }
    StartWrite(next);
  }

  void Close(const absl::Status& why) override {
    {
      MutexLock l(&mu_);
      attached_ = false;  // the Lake let go of the session
      if (finished_ || finish_pending_) return;
      if (writing_) {
        finish_pending_ = true;
        pending_status_ = ToGrpc(why);
        return;
      }
      finished_ = true;
    }
    Finish(ToGrpc(why));
  }

  void OnWriteDone(bool ok) override {
    v1::PressureRequest* next = nullptr;
    bool finish = false;
    grpc::Status status;
    {
      MutexLock l(&mu_);
      writing_ = false;
      queue_.pop_front();
      if (!ok && !finish_pending_) {
        finish_pending_ = true;
        pending_status_ =
            grpc::Status(grpc::StatusCode::CANCELLED, "the stream broke");
      }
      if (finish_pending_) {
        if (!finished_) {
          finished_ = true;
          finish = true;
          status = pending_status_;
        }
      } else if (!queue_.empty()) {
        writing_ = true;
        next = &queue_.front();
      }
    }
    if (finish) Finish(status);
    if (next != nullptr) StartWrite(next);
  }

  void OnCancel() override {
    {
      MutexLock l(&mu_);
      if (finished_ || finish_pending_) return;
      if (writing_) {
        finish_pending_ = true;
        pending_status_ =
            grpc::Status(grpc::StatusCode::CANCELLED, "the client left");
        return;
      }
      finished_ = true;
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client left"));
  }

  void OnDone() override {
    bool attached;
    {
      MutexLock l(&mu_);
      attached = attached_;
    }
    // The stream is over: if the Lake still routes this session here, the
    // session ends with it.
    if (attached) lake_->WatcherGone(session_, this);
    std::shared_ptr<WatchStream> keep = std::move(self_);
    // `keep` may be the last reference: this object dies here.
  }

 private:
  Lake* const lake_;
  const uint64_t session_;
  std::shared_ptr<WatchStream> self_;
  Mutex mu_;
  std::deque<v1::PressureRequest> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool attached_ ABSL_GUARDED_BY(mu_) = true;
  grpc::Status pending_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::Status LakeService::OpenSession(grpc::ServerContext* context,
                                      const v1::OpenSessionRequest* request,
                                      v1::OpenSessionResponse* response) {
  if (request->protocol_version() != ProtocolVersion()) {
    return ToGrpc(
        VersionMismatch(request->protocol_version(), ProtocolVersion()));
  }
  const Caller caller = CallerOf(*context);
  absl::StatusOr<SessionTicket> t = lake_->OpenSession(
      request->pid(), request->name(),
      caller.has_value() ? std::optional<uid_t>(caller->uid) : std::nullopt);
  if (!t.ok()) return ToGrpc(t.status());
  response->set_session_id(t->id);
  response->set_token(t->token);
  const LakeOptions& o = lake_->options();
  for (size_t i = 0; i < o.devices.size(); ++i) {
    v1::DeviceInfo* d = response->add_devices();
    d->set_device(static_cast<int>(i));
    d->set_chunk_size(o.devices[i].chunk_size);
    d->set_capacity_bytes(o.devices[i].capacity_bytes /
                          o.devices[i].chunk_size * o.devices[i].chunk_size);
    d->set_granularity(lake_->backend()->granularity(static_cast<int>(i)));
    d->set_uuid(lake_->backend()->device_uuid(static_cast<int>(i)));
  }
  response->set_fd_socket(o.fd_socket_path);
  response->set_backend(std::string(lake_->backend()->name()));
  response->set_protocol_version(ProtocolVersion());
  response->set_daemon_description(lake_->backend()->Describe());
  return grpc::Status::OK;
}

grpc::Status LakeService::Lease(grpc::ServerContext* context,
                                const v1::LeaseRequest* request,
                                v1::LeaseResponse* response) {
  if (absl::Status c = CheckCaller(*context, request->session_id()); !c.ok()) {
    return ToGrpc(c);
  }
  if (request->usage_size() > 0) {
    absl::Status s = lake_->ReportUsage(request->session_id(), request->token(),
                                        ToReports(request->usage()),
                                        /*answers_pressure=*/false);
    if (!s.ok()) return ToGrpc(s);
  }
  const int device = request->device();
  uint64_t count = request->chunk_count();
  if (count != 0 && request->bytes() != 0) {
    return ToGrpc(absl::InvalidArgumentError(
        "a lease gives chunk_count or bytes, not both"));
  }
  if (count == 0) {
    if (request->bytes() == 0) {
      return ToGrpc(
          absl::InvalidArgumentError("a lease needs chunk_count or bytes"));
    }
    const LakeOptions& o = lake_->options();
    if (device < 0 || device >= static_cast<int>(o.devices.size())) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
          "device %d does not exist: gmlaked serves devices 0..%d", device,
          o.devices.size() - 1)));
    }
    // In chunks of the size asked for (the lease checks it), else the
    // device's unit.
    const uint64_t size = request->chunk_bytes() != 0
                              ? request->chunk_bytes()
                              : o.devices[device].chunk_size;
    count = request->bytes() / size + (request->bytes() % size != 0);
  }
  if (count > kMaxChunksPerLease) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrFormat("a lease of %d chunks; at most %d per lease", count,
                        kMaxChunksPerLease)));
  }
  absl::StatusOr<LeaseGrant> g = lake_->Lease(
      request->session_id(), request->token(), device, count,
      request->chunk_bytes(), request->no_pressure(), request->client_makes());
  if (!g.ok()) return ToGrpc(g.status());
  if (context->IsCancelled()) {
    // The client gave up (deadline, or it is gone): it will never know
    // these chunk ids, so they go straight back.
    lake_->Return(request->session_id(), request->token(), g->chunk_ids)
        .IgnoreError();
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the client cancelled the lease; its chunks went "
                        "back to the lake");
  }
  response->set_lease_id(g->lease_id);
  response->set_device(g->device);
  response->set_chunk_size(g->chunk_size);
  response->set_client_makes(g->client_makes);
  response->mutable_chunk_ids()->Add(g->chunk_ids.begin(), g->chunk_ids.end());
  return grpc::Status::OK;
}

grpc::Status LakeService::Return(grpc::ServerContext* context,
                                 const v1::ReturnRequest* request,
                                 v1::ReturnResponse* response) {
  if (absl::Status c = CheckCaller(*context, request->session_id()); !c.ok()) {
    return ToGrpc(c);
  }
  std::vector<uint64_t> ids(request->chunk_ids().begin(),
                            request->chunk_ids().end());
  absl::StatusOr<uint64_t> bytes =
      lake_->Return(request->session_id(), request->token(), ids);
  if (!bytes.ok()) return ToGrpc(bytes.status());
  response->set_returned_bytes(*bytes);
  if (request->usage_size() > 0) {
    absl::Status s = lake_->ReportUsage(request->session_id(), request->token(),
                                        ToReports(request->usage()),
                                        /*answers_pressure=*/false);
    if (!s.ok()) return ToGrpc(s);
  }
  return grpc::Status::OK;
}

grpc::Status LakeService::ReportUsage(grpc::ServerContext* context,
                                      const v1::ReportUsageRequest* request,
                                      v1::ReportUsageResponse* /*response*/) {
  if (absl::Status c = CheckCaller(*context, request->session_id()); !c.ok()) {
    return ToGrpc(c);
  }
  return ToGrpc(lake_->ReportUsage(
      request->session_id(), request->token(), ToReports(request->usage()),
      /*answers_pressure=*/!request->unsolicited()));
}

grpc::ServerWriteReactor<v1::PressureRequest>* LakeService::Watch(
    grpc::CallbackServerContext* context, const v1::WatchRequest* request) {
  auto stream = std::make_shared<WatchStream>(lake_, request->session_id());
  return stream->Start(request->token(),
                       CheckCaller(*context, request->session_id()));
}

grpc::Status LakeService::CloseSession(grpc::ServerContext* context,
                                       const v1::CloseSessionRequest* request,
                                       v1::CloseSessionResponse* response) {
  if (absl::Status c = CheckCaller(*context, request->session_id()); !c.ok()) {
    return ToGrpc(c);
  }
  absl::StatusOr<uint64_t> bytes =
      lake_->CloseSession(request->session_id(), request->token());
  if (!bytes.ok()) return ToGrpc(bytes.status());
  response->set_returned_bytes(*bytes);
  return grpc::Status::OK;
}

Caller LakeService::CallerOf(const grpc::ServerContextBase& context) const {
  if (!identify_) return std::nullopt;
  return identify_(context);
}

absl::Status LakeService::CheckCaller(const grpc::ServerContextBase& context,
                                      uint64_t session) const {
  const Caller caller = CallerOf(context);
  return lake_->CheckCaller(session, caller.has_value()
                                         ? std::optional<uid_t>(caller->uid)
                                         : std::nullopt);
}

grpc::Status LakeService::Status(grpc::ServerContext* context,
                                 const v1::StatusRequest* /*request*/,
                                 v1::StatusResponse* response) {
  lake_->FillStatus(response);
  response->set_protocol_version(ProtocolVersion());
  access_.ShowTo(CallerOf(*context), response);
  return grpc::Status::OK;
}

grpc::Status LakeService::Trim(grpc::ServerContext* context,
                               const v1::TrimRequest* request,
                               v1::TrimResponse* response) {
  const Caller caller = CallerOf(*context);
  if (absl::Status s = access_.MayTrim(caller); !s.ok()) {
    Logf("refused a trim from %s",
         caller.has_value()
             ? absl::StrFormat("uid %d (pid %d)", caller->uid, caller->pid)
             : std::string("an unknown caller"));
    return ToGrpc(s);
  }
  const int devices = static_cast<int>(lake_->options().devices.size());
  if (request->device() < -1 || request->device() >= devices) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
        "device %d does not exist: gmlaked serves devices 0..%d (-1: all)",
        request->device(), devices - 1)));
  }
  auto [bytes, chunks] = lake_->Trim(request->device(), request->bytes());
  response->set_released_bytes(bytes);
  response->set_released_chunks(chunks);
  return grpc::Status::OK;
}

}  // namespace gmlake
