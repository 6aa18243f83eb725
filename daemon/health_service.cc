// Copyright 2026 The GMLake Authors.

#include "daemon/health_service.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gmlake {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {
constexpr uid_t kUnknownUid = static_cast<uid_t>(-1);
}  // namespace

// One Watch stream. gRPC holds it until OnDone, the service (as a
// shared_ptr) until it is Gone; `self_` keeps it alive until OnDone. Every
// gRPC call on it is made without `mu_` held, and at most one write is in
// flight: a change that comes meanwhile is sent after it (only the latest
// status, as a watcher wants the present).
class HealthWatch final : public grpc::ServerWriteReactor<HealthCheckResponse>,
                          public std::enable_shared_from_this<HealthWatch> {
 public:
  HealthWatch(HealthService* service, std::string name, uid_t uid)
      : service_(service), name_(std::move(name)), uid_(uid) {}

  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }

  void Start(HealthService::Status status) {
    self_ = shared_from_this();
    Update(status);
  }

  // Refused before it started: finishes with `why`.
  void Refuse(const grpc::Status& why) {
    self_ = shared_from_this();
    {
      MutexLock l(&mu_);
      finished_ = true;
    }
    Finish(why);
  }

  void Update(HealthService::Status status) {
    {
      MutexLock l(&mu_);
      if (finished_ || (has_sent_ && status == sent_ && !writing_)) return;
      latest_ = status;
      if (writing_) return;
      writing_ = true;
      sent_ = status;
      has_sent_ = true;
      out_.set_status(status);
    }
    StartWrite(&out_);
  }

  void OnWriteDone(bool ok) override {
    bool finish = false, write = false;
    {
      MutexLock l(&mu_);
      writing_ = false;
      if (!ok || cancelled_) {
        if (!finished_) finished_ = finish = true;
      } else if (latest_ != sent_) {
        writing_ = write = true;
        sent_ = latest_;
        out_.set_status(latest_);
      }
    }
    if (finish) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "ended"));
    if (write) StartWrite(&out_);
  }

  void OnCancel() override {
    {
      MutexLock l(&mu_);
      cancelled_ = true;
      if (finished_ || writing_) return;  // OnWriteDone finishes
      finished_ = true;
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client left"));
  }

  void OnDone() override {
    service_->Gone(this);
    std::shared_ptr<HealthWatch> keep = std::move(self_);
  }

 private:
  HealthService* const service_;
  const std::string name_;
  const uid_t uid_;
  std::shared_ptr<HealthWatch> self_;
  Mutex mu_;
  HealthCheckResponse out_;  // the message in flight
  HealthService::Status latest_ ABSL_GUARDED_BY(mu_) =
      HealthCheckResponse::UNKNOWN;
  HealthService::Status sent_ ABSL_GUARDED_BY(mu_) =
      HealthCheckResponse::UNKNOWN;
  bool has_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

HealthService::HealthService(CallerLookup identify, size_t max_watches_per_uid)
    : identify_(std::move(identify)),
      max_watches_per_uid_(max_watches_per_uid) {
  MutexLock l(&mu_);
  services_[""] = HealthCheckResponse::SERVING;
}

HealthService::~HealthService() = default;

HealthService::Status HealthService::StatusOfLocked(
    const std::string& service) const {
  auto it = services_.find(service);
  return it == services_.end() ? HealthCheckResponse::SERVICE_UNKNOWN
                               : it->second;
}

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  std::vector<std::shared_ptr<HealthWatch>> told;
  const Status status =
      serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  {
    MutexLock l(&mu_);
    services_[service] = status;
    for (const auto& w : watches_) {
      if (w.second->name() == service) told.push_back(w.second);
    }
  }
  for (const auto& w : told) w->Update(status);
}

void HealthService::SetServingStatus(bool serving) {
  std::vector<std::string> names;
  {
    MutexLock l(&mu_);
    for (const auto& [name, status] : services_) names.push_back(name);
  }
  for (const std::string& name : names) SetServingStatus(name, serving);
}

size_t HealthService::watches() const {
  MutexLock l(&mu_);
  return watches_.size();
}

uint64_t HealthService::watches_refused() const {
  MutexLock l(&mu_);
  return refused_;
}

grpc::ServerUnaryReactor* HealthService::Check(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request,
    HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Status status;
  {
    MutexLock l(&mu_);
    status = StatusOfLocked(request->service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 "unknown service: " + request->service()));
  } else {
    response->set_status(status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  std::optional<PeerCredentials> caller;
  if (identify_) caller = identify_(*context);
  const uid_t uid = caller.has_value() ? caller->uid : kUnknownUid;
  auto watch = std::make_shared<HealthWatch>(this, request->service(), uid);
  Status status = grpc::health::v1::HealthCheckResponse::UNKNOWN;
  size_t open = 0;
  {
    MutexLock l(&mu_);
    open = per_uid_[uid];
    if (open < max_watches_per_uid_) {
      ++per_uid_[uid];
      watches_.emplace(watch.get(), watch);
      status = StatusOfLocked(request->service());
    } else {
      ++refused_;
    }
  }
  if (open >= max_watches_per_uid_) {
    watch->Refuse(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(uid == kUnknownUid ? std::string("an unknown caller")
                                        : absl::StrCat("uid ", uid),
                     " has ", open,
                     " health Watch streams open, the limit "
                     "(--max_health_watches_per_uid); close some")));
    return watch.get();
  }
  watch->Start(status);
  return watch.get();
}

void HealthService::Gone(HealthWatch* watch) {
  MutexLock l(&mu_);
  auto it = watches_.find(watch);
  if (it == watches_.end()) return;  // refused: never counted
  watches_.erase(it);
  auto u = per_uid_.find(watch->uid());
  if (u != per_uid_.end() && --u->second == 0) per_uid_.erase(u);
}

}  // namespace gmlake
