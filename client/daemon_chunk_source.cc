// Copyright 2026 The GMLake Authors.

#include "client/daemon_chunk_source.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/chunk_sizing.h"
#include "client/daemon_link.h"
#include "common/bytes.h"
#include "common/fd_passing.h"
#include "common/fd_usage.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/gmlake.grpc.pb.h"
#include "proto/protocol.h"

namespace gmlake {

namespace {

// The source whose pressure request this thread is answering, if any:
// chunks it gives back meanwhile count as given for pressure.
thread_local const DaemonChunkSource* tls_answering_pressure = nullptr;

// The usage figures every request to gmlaked carries.
template <typename Figures>
void AddUsage(const Figures& usage,
              google::protobuf::RepeatedPtrField<v1::DeviceUsage>* out) {
  for (const auto& u : usage) {
    v1::DeviceUsage* du = out->Add();
    du->set_device(u.device);
    du->set_used_bytes(u.used);
    du->set_cached_bytes(u.cached);
  }
}

// Largest FdReply payload accepted (a batch of 253 ids is ~2.6 KiB).
constexpr size_t kMaxReplyBytes = 64 * 1024;
// A reply on the fd socket must come within this, or the daemon is stuck.
constexpr absl::Duration kFdSocketTimeout = absl::Seconds(15);

void SetDeadline(grpc::ClientContext* ctx, absl::Duration d) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
}

absl::Status WithContext(absl::string_view what, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

absl::StatusOr<v1::FdReply> ReadReply(int sock, std::vector<UniqueFd>* fds) {
  absl::StatusOr<ReceivedMessage> msg =
      RecvFds(sock, kMaxReplyBytes, kMaxFdsPerGroup);
  if (!msg.ok()) return msg.status();
  v1::FdReply reply;
  if (!reply.ParseFromString(msg->payload)) {
    return absl::DataLossError(
        "gmlaked's fd socket sent something that is not an FdReply");
  }
  *fds = std::move(msg->fds);
  return reply;
}

}  // namespace

DaemonChunkSource::DaemonChunkSource(const DaemonSourceOptions& options)
    : options_(options) {}

std::shared_ptr<DaemonChunkSource::Rpc> DaemonChunkSource::link() const {
  MutexLock l(&mu_);
  return rpc_;
}

absl::StatusOr<std::shared_ptr<DaemonChunkSource::Rpc>>
DaemonChunkSource::NewLink(absl::Duration timeout) {
  auto link = std::make_shared<Rpc>();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  args.SetMaxSendMessageSize(8 << 20);
  // A channel of its own each time, without gRPC's reconnect backoff
  // (which grows to minutes, shared by every channel to the same socket):
  // a restarted gmlaked is found as soon as it listens.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  link->channel =
      grpc::CreateCustomChannel(absl::StrCat("unix:", options_.socket_path),
                                grpc::InsecureChannelCredentials(), args);
  if (!link->channel->WaitForConnected(
          absl::ToChronoTime(absl::Now() + timeout))) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to gmlaked at ", options_.socket_path,
                     " within ", absl::FormatDuration(timeout),
                     " (a stale socket of a gmlaked that is gone?)"));
  }
  link->stub = v1::Lake::NewStub(link->channel);
  return link;
}

absl::StatusOr<std::unique_ptr<DaemonChunkSource>> DaemonChunkSource::Connect(
    const DaemonSourceOptions& options) {
  if (options.socket_path.empty()) {
    return absl::InvalidArgumentError(
        "DaemonSourceOptions.socket_path is empty");
  }
  struct stat st;
  if (::stat(options.socket_path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(
          "no gmlaked socket at ", options.socket_path,
          ": gmlaked is not running on this node (start it with `systemctl "
          "start gmlaked`), or the socket path is wrong"));
    }
    return absl::UnavailableError(absl::StrCat("cannot reach gmlaked's socket ",
                                               options.socket_path, ": ",
                                               std::strerror(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.socket_path, " exists but is not a socket"));
  }
  std::unique_ptr<DaemonChunkSource> src(new DaemonChunkSource(options));
  absl::StatusOr<std::shared_ptr<Rpc>> link =
      src->NewLink(options.connect_timeout);
  if (!link.ok()) return link.status();
  if (absl::Status s = src->Open(link->get(), /*first=*/true); !s.ok()) {
    return s;
  }
  absl::StatusOr<UniqueFd> sock = src->Bind(**link);
  if (!sock.ok()) return sock.status();
  {
    MutexLock l(&src->fd_mu_);
    src->fd_sock_ = *std::move(sock);
  }
  {
    MutexLock l(&src->mu_);
    (*link)->epoch = src->epoch_;
    src->rpc_ = *link;
  }
  src->session_id_ = (*link)->session;
  if (absl::Status s = src->StartWatch(*link); !s.ok()) return s;
  DaemonChunkSource* p = src.get();
  if (options.usage_report_interval > absl::ZeroDuration()) {
    src->report_thread_ = std::thread([p] { p->ReportLoop(); });
  }
  if (options.reconnect_interval > absl::ZeroDuration()) {
    src->relink_thread_ = std::thread([p] { p->RelinkLoop(); });
  }
  return src;
}

absl::Status DaemonChunkSource::Open(Rpc* link, bool first) {
  const uint32_t version = options_.protocol_version != 0
                               ? options_.protocol_version
                               : ProtocolVersion();
  v1::OpenSessionRequest req;
  req.set_pid(::getpid());
  for (int d : options_.devices) req.add_devices(d);
  req.set_name(options_.name);
  req.set_protocol_version(version);
  v1::OpenSessionResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  absl::Status s = FromGrpc(link->stub->OpenSession(&ctx, req, &resp));
  if (!s.ok()) {
    return WithContext(absl::StrCat("opening a session with gmlaked at ",
                                    options_.socket_path),
                       s);
  }
  if (resp.protocol_version() != version) {
    // The daemon should have refused; refuse here in its stead.
    return VersionMismatch(version, resp.protocol_version());
  }
  link->session = resp.session_id();
  link->token = resp.token();
  fd_socket_path_ = resp.fd_socket();
  if (!first && resp.backend() != daemon_backend_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gmlaked at ", options_.socket_path, " came back with the ",
        resp.backend(), " backend instead of ", daemon_backend_,
        ": this process's chunks cannot be shown to it"));
  }
  daemon_backend_ = resp.backend();
  if (first) daemon_description_ = resp.daemon_description();
  if (resp.devices_size() == 0) {
    return absl::FailedPreconditionError("gmlaked reports no devices");
  }
  std::vector<const v1::DeviceInfo*> served(resp.devices_size(), nullptr);
  for (const v1::DeviceInfo& d : resp.devices()) {
    if (d.device() < 0 || d.device() >= resp.devices_size() ||
        d.chunk_size() == 0 || served[d.device()] != nullptr) {
      return absl::DataLossError("gmlaked sent a bad device list");
    }
    served[d.device()] = &d;
  }
  if (!first) return CheckSameDevices(served);
  if (absl::Status s = ChooseBackend(served); !s.ok()) return s;
  if (options_.keep_descriptors.value_or(!backend_->can_export_imports())) {
    // One descriptor per chunk held: raise the soft limit to the hard one
    // (as a process with many sockets would), and keep at most half of it
    // for chunks, so that the rest of the process is not starved.
    rlimit lim;
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
      if (lim.rlim_cur < lim.rlim_max) {
        rlimit raised = lim;
        raised.rlim_cur = lim.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
      }
      max_kept_fds_ = static_cast<size_t>(
          std::min<rlim_t>(lim.rlim_cur / 2, size_t{1} << 24));
    }
  }
  return MatchDevices(served);
}

size_t DaemonChunkSource::KeepRoom(size_t in_hand, size_t pending,
                                   size_t wanted) const {
  if (max_kept_fds_ == 0 || wanted == 0) return 0;
  size_t kept;
  {
    MutexLock l(&kept_mu_);
    kept = kept_fds_.size();
  }
  const size_t budget_left =
      max_kept_fds_ > kept + pending ? max_kept_fds_ - kept - pending : 0;
  size_t room = std::min(wanted, budget_left);
  const FdUsage u = CurrentFdUsage();
  if (u.limit != 0) {
    // Without the descriptors in hand, which close unless kept, the process
    // stays at or under half its limit: the rest of it (its sockets and
    // files; on the host backend the imports themselves) has the other
    // half.
    const uint64_t without = u.open > in_hand ? u.open - in_hand : 0;
    const uint64_t half = u.limit / 2;
    room = std::min<uint64_t>(room, half > without ? half - without : 0);
  }
  return room;
}

void DaemonChunkSource::KeepFd(ChunkHandle h, UniqueFd fd) {
  MutexLock l(&kept_mu_);
  // Past the budget the descriptor closes: that chunk cannot be shown to
  // a restarted gmlaked (Readopt says so).
  if (kept_fds_.size() < max_kept_fds_) kept_fds_[h] = std::move(fd);
}

void DaemonChunkSource::DropKeptFd(ChunkHandle h) {
  MutexLock l(&kept_mu_);
  kept_fds_.erase(h);
}

absl::StatusOr<UniqueFd> DaemonChunkSource::ShowableFd(ChunkHandle h) {
  {
    MutexLock l(&kept_mu_);
    auto it = kept_fds_.find(h);
    if (it != kept_fds_.end()) {
      const int fd = ::fcntl(it->second.get(), F_DUPFD_CLOEXEC, 0);
      if (fd < 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "duplicating a kept chunk descriptor: ", std::strerror(errno)));
      }
      return UniqueFd(fd);
    }
  }
  return backend_->ExportChunk(h);
}

absl::Status DaemonChunkSource::ChooseBackend(
    const std::vector<const v1::DeviceInfo*>& served) {
  if (options_.backend != nullptr) {
    if (options_.backend->name() != daemon_backend_) {
      return absl::FailedPreconditionError(
          absl::StrCat("gmlaked serves ", daemon_backend_,
                       " chunks but the given backend is ",
                       options_.backend->name(), ": they cannot be imported"));
    }
    backend_ = options_.backend;
    return absl::OkStatus();
  }
  BackendOptions bo;
  bo.kind = daemon_backend_;
  uint64_t max_capacity = 0;
  bool all_have_uuids = true;
  for (const v1::DeviceInfo* d : served) {
    max_capacity = std::max<uint64_t>(max_capacity, d->capacity_bytes());
    all_have_uuids = all_have_uuids && !d->uuid().empty();
  }
  // Emulated devices: by default this process sees what gmlaked serves
  // (GMLAKE_HOST_VISIBLE_DEVICES decides over it, as CUDA_VISIBLE_DEVICES
  // does for GPUs).
  bo.host_devices = static_cast<int>(served.size());
  if (all_have_uuids) {
    for (const v1::DeviceInfo* d : served) bo.host_uuids.push_back(d->uuid());
  }
  bo.host_granularity = served[0]->granularity();
  bo.host_capacity_bytes = max_capacity;
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(bo);
  if (!b.ok()) {
    return WithContext(absl::StrCat("creating a ", daemon_backend_,
                                    " backend to import gmlaked's chunks"),
                       b.status());
  }
  owned_backend_ = *std::move(b);
  backend_ = owned_backend_.get();
  return absl::OkStatus();
}

absl::Status DaemonChunkSource::MatchDevices(
    const std::vector<const v1::DeviceInfo*>& served) {
  // By UUID: this process's device numbers are not gmlaked's when
  // CUDA_VISIBLE_DEVICES differs. A daemon that sends no UUIDs predates
  // them: by number then.
  bool by_uuid = true;
  for (const v1::DeviceInfo* d : served)
    by_uuid = by_uuid && !d->uuid().empty();
  std::vector<DeviceState> devices(backend_->device_count());
  bool any = false;
  for (int i = 0; i < backend_->device_count(); ++i) {
    DeviceState& state = devices[i];
    state.uuid = backend_->device_uuid(i);
    for (const v1::DeviceInfo* d : served) {
      if (by_uuid ? d->uuid() == state.uuid : d->device() == i) {
        state.daemon_device = d->device();
        state.chunk_size = d->chunk_size();
        state.lake_capacity = d->capacity_bytes();
      }
    }
    if (state.daemon_device < 0) {
      // Never 0: the allocator divides by it.
      state.chunk_size = backend_->granularity(i);
    }
    any = any || state.daemon_device >= 0;
  }
  for (const v1::DeviceInfo* d : served) daemon_uuids_.push_back(d->uuid());
  if (!any) {
    std::vector<std::string> mine;
    for (const DeviceState& d : devices) mine.push_back(d.uuid);
    return absl::FailedPreconditionError(absl::StrCat(
        "gmlaked at ", options_.socket_path,
        " serves none of this process's devices: it serves ",
        absl::StrJoin(daemon_uuids_, ", "), "; this process sees ",
        absl::StrJoin(mine, ", "),
        " (CUDA_VISIBLE_DEVICES, or GMLAKE_HOST_VISIBLE_DEVICES on the host "
        "backend, names others than gmlaked's)"));
  }
  MutexLock l(&mu_);
  devices_ = std::move(devices);
  return absl::OkStatus();
}

int DaemonChunkSource::LocalDevice(int daemon_device) const {
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i].daemon_device == daemon_device) return static_cast<int>(i);
  }
  return -1;
}

bool DaemonChunkSource::serves(int device) const {
  MutexLock l(&mu_);
  return device >= 0 && static_cast<size_t>(device) < devices_.size() &&
         devices_[device].daemon_device >= 0;
}

absl::StatusOr<UniqueFd> DaemonChunkSource::Bind(const Rpc& link) {
  absl::StatusOr<UniqueFd> sock =
      ConnectUnix(fd_socket_path_, "gmlaked's fd socket");
  if (!sock.ok()) return sock.status();
  const timeval tv = absl::ToTimeval(kFdSocketTimeout);
  ::setsockopt(sock->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(sock->get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  v1::FdRequest req;
  req.set_session_id(link.session);
  req.set_token(link.token);
  req.mutable_bind();
  if (absl::Status s = SendFds(sock->get(), req.SerializeAsString(), {});
      !s.ok()) {
    return WithContext("binding the session on gmlaked's fd socket", s);
  }
  std::vector<UniqueFd> fds;
  absl::StatusOr<v1::FdReply> reply = ReadReply(sock->get(), &fds);
  if (!reply.ok()) {
    return WithContext("binding the session on gmlaked's fd socket",
                       reply.status());
  }
  if (reply->code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(reply->code()),
                        absl::StrCat("gmlaked refused to bind the session: ",
                                     reply->message()));
  }
  return sock;
}

absl::Status DaemonChunkSource::StartWatch(std::shared_ptr<Rpc> link) {
  watch_thread_ = std::thread([this, link] { WatchLoop(link); });
  if (!link->watching.WaitForNotificationWithTimeout(
          options_.connect_timeout)) {
    link->watch_ctx.TryCancel();
    return absl::UnavailableError(
        absl::StrCat("gmlaked at ", options_.socket_path,
                     " did not start the Watch "
                     "stream within ",
                     absl::FormatDuration(options_.connect_timeout)));
  }
  if (!link->hello) {
    return absl::UnavailableError(
        absl::StrCat("gmlaked at ", options_.socket_path,
                     " ended the Watch stream at once"));
  }
  return absl::OkStatus();
}

void DaemonChunkSource::WatchLoop(std::shared_ptr<Rpc> link) {
  v1::WatchRequest req;
  req.set_session_id(link->session);
  req.set_token(link->token);
  std::unique_ptr<grpc::ClientReader<v1::PressureRequest>> reader =
      link->stub->Watch(&link->watch_ctx, req);
  v1::PressureRequest p;
  while (reader->Read(&p)) {
    if (!link->hello) {
      link->hello = true;  // the session is live
      link->watching.Notify();
      continue;
    }
    if (p.bytes_wanted() == 0) continue;
    HandlePressure(p.device(), p.bytes_wanted());
  }
  const absl::Status s = FromGrpc(reader->Finish());
  bool closing;
  {
    MutexLock l(&mu_);
    closing = closing_;
  }
  if (!closing) {
    MarkLost(
        s.ok() ? absl::UnavailableError("gmlaked ended the Watch stream") : s,
        link.get())
        .IgnoreError();
  }
  if (!link->watching.HasBeenNotified()) link->watching.Notify();
}

void DaemonChunkSource::HandlePressure(int daemon_device, uint64_t bytes) {
  pressure_requests_.fetch_add(1);
  int device;
  {
    MutexLock l(&mu_);
    device = LocalDevice(daemon_device);
  }
  if (device >= 0) {
    // Counted where chunks go back (GiveBack), also those that the
    // handler's Return sends straight back past the watermark.
    tls_answering_pressure = this;
    // Idle chunks first: nobody uses them.
    uint64_t freed = TrimIdle(device, 0, bytes);
    if (freed < bytes) {
      // Held through the call: SetReclaimHandler waits for it.
      MutexLock l(&reclaim_mu_);
      if (reclaim_) {
        // The allocator returns cached chunks through Return, which may
        // keep them idle (below the watermark): give those back too.
        reclaim_(device, bytes - freed);
        TrimIdle(device, 0, bytes - freed);
      }
    }
    tls_answering_pressure = nullptr;
  }
  // The report tells the daemon this request has been answered, with the
  // allocator's figures as they are now.
  PollUsage();
  SendUsage().IgnoreError();
}

void DaemonChunkSource::SetUsageProvider(UsageProvider provider) {
  MutexLock l(&provider_mu_);
  provider_ = std::move(provider);
}

void DaemonChunkSource::PollUsage() {
  size_t n;
  {
    MutexLock l(&mu_);
    n = devices_.size();
  }
  std::vector<AllocatorUsage> got;
  {
    MutexLock l(&provider_mu_);
    if (!provider_) return;
    for (size_t d = 0; d < n; ++d)
      got.push_back(provider_(static_cast<int>(d)));
  }
  for (size_t d = 0; d < got.size(); ++d) {
    NoteUsage(static_cast<int>(d), got[d].used_bytes, got[d].cached_bytes);
  }
}

bool DaemonChunkSource::ReportWorthyLocked() const {
  for (const UsageFigures& now : UsageLocked()) {
    UsageFigures was{now.device, 0, 0};
    for (const UsageFigures& sent : last_sent_) {
      if (sent.device == now.device) was = sent;
    }
    const int local = LocalDevice(now.device);
    if (local < 0) continue;
    const DeviceState& d = devices_[local];
    // A chunk's worth, and a sixteenth of what is held: a process that
    // churns within its cache does not report at every period.
    const uint64_t held = d.held_bytes + d.idle_bytes;
    const uint64_t step = std::max<uint64_t>(d.chunk_size, held / 16);
    auto moved = [step](uint64_t a, uint64_t b) {
      return (a > b ? a - b : b - a) >= step;
    };
    if (moved(now.used, was.used) || moved(now.cached, was.cached)) {
      return true;
    }
  }
  return false;
}

void DaemonChunkSource::ReportLoop() {
  while (!stop_reports_.WaitForNotificationWithTimeout(
      options_.usage_report_interval)) {
    if (!Lost().ok()) continue;  // until the daemon is back
    PollUsage();
    bool worthy;
    {
      MutexLock l(&mu_);
      worthy = ReportWorthyLocked();
    }
    if (worthy) SendUsage(/*unsolicited=*/true).IgnoreError();
  }
}

size_t DaemonChunkSource::chunk_size(int device) const {
  MutexLock l(&mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return 0;
  return devices_[device].chunk_size;
}

uint64_t DaemonChunkSource::capacity_bytes(int device) const {
  MutexLock l(&mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return 0;
  const DeviceState& d = devices_[device];
  return d.limit != 0 ? d.limit : d.lake_capacity;
}

absl::Status DaemonChunkSource::SetCapacity(int device, uint64_t bytes) {
  MutexLock l(&mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device %d: gmlaked serves devices 0..%d", device,
                        devices_.size() - 1));
  }
  devices_[device].limit = bytes;
  return absl::OkStatus();
}

void DaemonChunkSource::SetReclaimHandler(ReclaimHandler handler) {
  MutexLock l(&reclaim_mu_);
  reclaim_ = std::move(handler);
}

void DaemonChunkSource::NoteUsage(int device, uint64_t used_bytes,
                                  uint64_t cached_bytes) {
  MutexLock l(&mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return;
  DeviceState& d = devices_[device];
  d.noted = true;
  d.noted_used = used_bytes;
  d.noted_cached = cached_bytes;
}

std::vector<DaemonChunkSource::UsageFigures> DaemonChunkSource::UsageLocked()
    const {
  std::vector<UsageFigures> out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const DeviceState& d = devices_[i];
    if (d.daemon_device < 0) continue;
    const uint64_t held = d.held_bytes;
    const uint64_t idle = d.idle_bytes;
    // Under gmlaked's number for the device.
    UsageFigures u{d.daemon_device, held, idle};
    if (d.noted) {
      u.used = std::min(d.noted_used, held);
      u.cached = idle + std::min(d.noted_cached, held - u.used);
    }
    out.push_back(u);
  }
  return out;
}

absl::Status DaemonChunkSource::ReportUsage() { return SendUsage(); }

absl::Status DaemonChunkSource::SendUsage(bool unsolicited) {
  if (absl::Status lost = Lost(); !lost.ok()) return lost;
  const std::shared_ptr<Rpc> r = link();
  v1::ReportUsageRequest req;
  req.set_session_id(r->session);
  req.set_token(r->token);
  req.set_unsolicited(unsolicited);
  if (unsolicited) usage_reports_.fetch_add(1);
  {
    MutexLock l(&mu_);
    AddUsage(last_sent_ = UsageLocked(), req.mutable_usage());
  }
  v1::ReportUsageResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  absl::Status s = FromGrpc(r->stub->ReportUsage(&ctx, req, &resp));
  if (s.code() == absl::StatusCode::kUnavailable ||
      s.code() == absl::StatusCode::kNotFound) {
    return MarkLost(s, r.get());
  }
  return s;
}

absl::StatusOr<std::vector<ChunkHandle>> DaemonChunkSource::Acquire(
    int device, size_t count) {
  const uint64_t unit = chunk_size(device);
  absl::StatusOr<std::vector<LeasedChunk>> got =
      Obtain(device, count * unit, /*any_size=*/false);
  if (!got.ok()) return got.status();
  std::vector<ChunkHandle> handles;
  handles.reserve(got->size());
  for (const LeasedChunk& c : *got) handles.push_back(c.handle);
  return handles;
}

absl::StatusOr<std::vector<SizedChunk>> DaemonChunkSource::AcquireBytes(
    int device, uint64_t bytes) {
  const uint64_t unit = chunk_size(device);
  if (unit == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device %d does not exist in this process", device));
  }
  absl::StatusOr<std::vector<LeasedChunk>> got =
      Obtain(device, (bytes + unit - 1) / unit * unit, /*any_size=*/true);
  if (!got.ok()) return got.status();
  std::vector<SizedChunk> out;
  out.reserve(got->size());
  for (const LeasedChunk& c : *got) out.push_back({c.handle, c.size});
  return out;
}

absl::StatusOr<std::vector<DaemonChunkSource::LeasedChunk>>
DaemonChunkSource::Obtain(int device, uint64_t bytes, bool any_size) {
  bool short_while_lost;
  {
    MutexLock l(&mu_);
    short_while_lost = device >= 0 &&
                       static_cast<size_t>(device) < devices_.size() &&
                       devices_[device].idle_bytes < bytes && !lost_.ok();
  }
  if (short_while_lost) {
    // gmlaked is away and the idle chunks do not do: wait for it holding
    // nothing (idle chunks taken now would miss its adoption).
    WaitForLink(absl::Now() + options_.reconnect_wait).IgnoreError();
  }
  std::vector<LeasedChunk> got;
  uint64_t missing = 0;
  uint64_t unit = 0;
  uint64_t idle_epoch = 0;
  {
    MutexLock l(&mu_);
    if (device < 0 || static_cast<size_t>(device) >= devices_.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "device %d does not exist: this process has devices 0..%d", device,
          devices_.size() - 1));
    }
    if (bytes == 0) return got;
    DeviceState& d = devices_[device];
    if (d.daemon_device < 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "gmlaked at %s does not serve this process's device %d (%s); it "
          "serves %s",
          options_.socket_path, device, d.uuid,
          absl::StrJoin(daemon_uuids_, ", ")));
    }
    unit = d.chunk_size;
    const uint64_t after = d.held_bytes + bytes;
    if (d.limit != 0 && after > d.limit) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "acquiring %s on device %d would put this process at %s, over its "
          "limit of %s (SetCapacity)",
          FormatBytes(bytes), device, FormatBytes(after),
          FormatBytes(d.limit)));
    }
    // Idle chunks: of the unit only, or any that fit, largest first.
    const uint64_t have =
        TakeKeptChunks(&d.idle, bytes, any_size ? 0 : unit, &got);
    d.idle_bytes -= have;
    missing = bytes - have;
    idle_epoch = epoch_;
  }
  const size_t from_idle = got.size();
  // The rest in runs of one size each: one lease per run.
  std::vector<ChunkRun> runs;
  if (any_size) {
    runs = PlanChunks(missing, {unit, unit, options_.large_chunk});
  } else if (missing > 0) {
    runs.push_back({unit, missing / unit});
  }
  std::vector<uint64_t> epochs(from_idle, idle_epoch);
  absl::Status s = absl::OkStatus();
  for (const ChunkRun& run : runs) {
    uint64_t lease_epoch = 0;
    s = LeaseWhenLinked(device, run.count, run.size, &got, &lease_epoch);
    if (!s.ok()) break;
    epochs.resize(got.size(), lease_epoch);
  }
  uint64_t keep = 0;
  {
    MutexLock l(&mu_);
    // Ids of another daemon than the current one (it restarted meanwhile,
    // and these were not in the maps it was shown): kept, uncounted.
    for (size_t i = 0; i < got.size(); ++i) {
      if (i >= epochs.size() || epochs[i] != epoch_) got[i].id = 0;
    }
    DeviceState& d = devices_[device];
    if (s.ok()) {
      for (const LeasedChunk& c : got) d.Hold(c);
      return got;
    }
    // All or nothing: the idle chunks taken, and those of runs leased
    // before the one that failed, are idle (the watermark decides below
    // which stay).
    for (const LeasedChunk& c : got) d.Idle(c);
    keep = options_.idle_watermark_bytes;
  }
  if (got.size() > from_idle) TrimIdle(device, keep, 0);
  return s;
}

absl::Status DaemonChunkSource::LeaseAndImport(int device, size_t count,
                                               uint64_t size,
                                               std::vector<LeasedChunk>* out,
                                               uint64_t* epoch) {
  const std::shared_ptr<Rpc> r = link();
  *epoch = r->epoch;
  v1::LeaseRequest req;
  req.set_session_id(r->session);
  req.set_token(r->token);
  req.set_chunk_count(count);
  {
    MutexLock l(&mu_);
    // gmlaked's number for the device; the chunks are imported on ours.
    req.set_device(devices_[device].daemon_device);
    // The unit needs no size (a gmlaked before chunk sizes serves it too).
    if (size != devices_[device].chunk_size) req.set_chunk_bytes(size);
    AddUsage(last_sent_ = UsageLocked(), req.mutable_usage());
  }
  v1::LeaseResponse resp;
  {
    grpc::ClientContext ctx;
    // Creating and exporting a fresh chunk costs ~0.6 ms on an H200: a
    // large lease of new chunks gets time for it.
    SetDeadline(&ctx, options_.lease_timeout +
                          absl::Milliseconds(2) * static_cast<int64_t>(count));
    absl::Status s = FromGrpc(r->stub->Lease(&ctx, req, &resp));
    if (s.code() == absl::StatusCode::kUnavailable ||
        s.code() == absl::StatusCode::kNotFound) {
      return MarkLost(s, r.get());
    }
    if (!s.ok()) return WithContext("gmlaked", s);
  }
  if (static_cast<size_t>(resp.chunk_ids_size()) != count) {
    return absl::DataLossError(
        absl::StrFormat("gmlaked granted %d chunks for a lease of %d",
                        resp.chunk_ids_size(), count));
  }
  std::vector<uint64_t> lease_ids(resp.chunk_ids().begin(),
                                  resp.chunk_ids().end());
  std::vector<LeasedChunk> imported;
  std::vector<std::pair<ChunkHandle, UniqueFd>> kept;
  absl::Status failure;
  bool socket_broken = false;
  if (resp.chunk_size() != size) {
    // Given back unclaimed below.
    failure = absl::FailedPreconditionError(absl::StrFormat(
        "gmlaked leased chunks of %s for a lease of chunks of %s: it "
        "predates chunk sizes; upgrade gmlaked, or set GMLAKE_CONF "
        "large_chunk:0",
        FormatBytes(resp.chunk_size()), FormatBytes(size)));
  } else {
    MutexLock l(&fd_mu_);
    v1::FdRequest claim;
    claim.set_session_id(r->session);
    claim.set_token(r->token);
    claim.mutable_claim()->set_lease_id(resp.lease_id());
    failure = SendFds(fd_sock_.get(), claim.SerializeAsString(), {});
    socket_broken = !failure.ok();
    size_t next = 0;
    while (failure.ok()) {
      std::vector<UniqueFd> fds;
      absl::StatusOr<v1::FdReply> reply = ReadReply(fd_sock_.get(), &fds);
      if (!reply.ok()) {
        failure = reply.status();
        socket_broken = true;
        break;
      }
      if (reply->code() != 0) {
        failure = absl::Status(static_cast<absl::StatusCode>(reply->code()),
                               absl::StrCat("claiming lease ", resp.lease_id(),
                                            ": ", reply->message()));
        break;
      }
      if (reply->lease_id() != resp.lease_id() ||
          static_cast<size_t>(reply->chunk_ids_size()) != fds.size() ||
          next + fds.size() > lease_ids.size()) {
        failure = absl::DataLossError(absl::StrFormat(
            "gmlaked sent %d descriptors for %d chunk ids of lease %d",
            fds.size(), reply->chunk_ids_size(), reply->lease_id()));
        socket_broken = true;  // out of step
        break;
      }
      const size_t batch_start = imported.size();
      for (size_t i = 0; i < fds.size() && failure.ok(); ++i) {
        if (reply->chunk_ids(i) != lease_ids[next]) {
          failure = absl::DataLossError("gmlaked sent chunks out of order");
          break;
        }
        absl::StatusOr<ChunkHandle> h =
            backend_->ImportChunk(fds[i].get(), device, size);
        // The descriptor closes with `fds` (the import holds the chunk),
        // unless it is kept for re-adoption.
        if (!h.ok()) {
          failure = WithContext("importing a chunk from gmlaked", h.status());
          break;
        }
        imported.push_back({*h, lease_ids[next], size});
        ++next;
      }
      // Descriptors kept for re-adoption, as many as leave the process
      // room; the others close with `fds`.
      const size_t keep =
          KeepRoom(fds.size(), kept.size(), imported.size() - batch_start);
      for (size_t i = 0; i < keep; ++i) {
        kept.push_back({imported[batch_start + i].handle, std::move(fds[i])});
      }
      if (reply->last()) {
        if (failure.ok() && next != lease_ids.size()) {
          failure = absl::DataLossError(absl::StrFormat(
              "gmlaked sent %d of the %d descriptors of lease %d", next,
              lease_ids.size(), resp.lease_id()));
        }
        break;
      }
    }
  }
  if (failure.ok()) {
    for (auto& [h, fd] : kept) KeepFd(h, std::move(fd));
    out->insert(out->end(), imported.begin(), imported.end());
    return absl::OkStatus();
  }
  // Undo: drop what was imported and give the whole lease back.
  for (const LeasedChunk& c : imported) {
    backend_->ReleaseChunk(c.handle).IgnoreError();
  }
  if (socket_broken) {
    // Without the fd socket the session is over (the daemon ends it when
    // the connection closes).
    return MarkLost(WithContext("gmlaked's fd socket failed", failure),
                    r.get());
  }
  v1::ReturnRequest ret;
  ret.set_session_id(r->session);
  ret.set_token(r->token);
  for (uint64_t id : lease_ids) ret.add_chunk_ids(id);
  v1::ReturnResponse ret_resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  r->stub->Return(&ctx, ret, &ret_resp);
  return failure;
}

void DaemonChunkSource::Return(int device,
                               absl::Span<const ChunkHandle> chunks) {
  uint64_t keep;
  {
    MutexLock l(&mu_);
    if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return;
    DeviceState& d = devices_[device];
    for (ChunkHandle h : chunks) {
      auto it = d.held.find(h);
      if (it == d.held.end()) continue;  // not ours: ignored (see header)
      d.Idle({h, it->second.id, it->second.size});
      d.Unhold(it);
    }
    keep = options_.idle_watermark_bytes;
  }
  TrimIdle(device, keep, 0);
}

void DaemonChunkSource::ReturnSized(int device,
                                    absl::Span<const SizedChunk> chunks) {
  std::vector<ChunkHandle> handles;
  handles.reserve(chunks.size());
  for (const SizedChunk& c : chunks) handles.push_back(c.handle);
  Return(device, handles);
}

uint64_t DaemonChunkSource::ReleaseIdle(int device) {
  return TrimIdle(device, 0, 0);
}

uint64_t DaemonChunkSource::TrimIdle(int device, uint64_t keep_bytes,
                                     uint64_t max_bytes) {
  std::vector<LeasedChunk> give;
  uint64_t bytes = 0;
  uint64_t epoch = 0;
  {
    MutexLock l(&mu_);
    if (device < 0 || static_cast<size_t>(device) >= devices_.size()) {
      return 0;
    }
    DeviceState& d = devices_[device];
    while (!d.idle.empty() && d.idle_bytes > keep_bytes &&
           (max_bytes == 0 || bytes < max_bytes)) {
      give.push_back(d.idle.back());
      d.idle.pop_back();
      d.idle_bytes -= give.back().size;
      bytes += give.back().size;
    }
    epoch = epoch_;
  }
  if (!give.empty()) GiveBack(device, give, epoch);
  return bytes;
}

void DaemonChunkSource::GiveBack(int device,
                                 absl::Span<const LeasedChunk> chunks,
                                 uint64_t epoch) {
  // Our handle goes first, so the daemon never leases a chunk on while
  // this process still holds it.
  uint64_t bytes = 0;
  for (const LeasedChunk& c : chunks) {
    // The kept descriptor first: once released, the handle's value may
    // name a chunk imported next.
    DropKeptFd(c.handle);
    backend_->ReleaseChunk(c.handle).IgnoreError();
    bytes += c.size;
  }
  // Counted before the daemon has them: once it has, the lease that asked
  // goes on, and its caller may read this counter at once.
  if (tls_answering_pressure == this) {
    pressure_bytes_returned_.fetch_add(bytes);
  }
  if (!Lost().ok()) return;
  const std::shared_ptr<Rpc> r = link();
  // Ids of a daemon before a restart: the new one was shown these chunks
  // and got them back from Relink, or never counted them.
  if (r->epoch != epoch) return;
  v1::ReturnRequest req;
  req.set_session_id(r->session);
  req.set_token(r->token);
  // Id 0: kept from before a restart, not adopted by this daemon.
  for (const LeasedChunk& c : chunks) {
    if (c.id != 0) req.add_chunk_ids(c.id);
  }
  if (req.chunk_ids_size() == 0) return;
  {
    MutexLock l(&mu_);
    AddUsage(last_sent_ = UsageLocked(), req.mutable_usage());
  }
  v1::ReturnResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  absl::Status s = FromGrpc(r->stub->Return(&ctx, req, &resp));
  if (s.code() == absl::StatusCode::kUnavailable ||
      s.code() == absl::StatusCode::kNotFound) {
    MarkLost(s, r.get()).IgnoreError();
  }
}

absl::Status DaemonChunkSource::MarkLost(const absl::Status& why,
                                         const Rpc* link) {
  MutexLock l(&mu_);
  if (link != nullptr && link != rpc_.get()) {
    // A call on a link already replaced (the daemon restarted meanwhile).
    return absl::UnavailableError(
        absl::StrCat("gmlaked restarted during the call: ", why.message()));
  }
  if (lost_.ok()) {
    size_t held = 0;
    for (const DeviceState& d : devices_) held += d.held.size() + d.idle.size();
    lost_ = absl::UnavailableError(absl::StrFormat(
        "gmlaked at %s is gone for session %d (%s): this process keeps the "
        "%d chunks it holds but cannot lease more %s",
        options_.socket_path, session_id_.load(), why.message(), held,
        options_.reconnect_interval > absl::ZeroDuration()
            ? "until gmlaked is back (it reconnects by itself)"
            : "until it restarts"));
    link_changed_.SignalAll();
  }
  return lost_;
}

absl::Status DaemonChunkSource::Lost() const {
  MutexLock l(&mu_);
  return lost_;
}

absl::Status DaemonChunkSource::daemon_status() const { return Lost(); }

size_t DaemonChunkSource::held_chunks(int device) const {
  MutexLock l(&mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return 0;
  return devices_[device].held.size();
}

std::vector<ChunkHandle> DaemonChunkSource::HeldHandles(int device) const {
  MutexLock l(&mu_);
  std::vector<ChunkHandle> out;
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return out;
  for (const auto& [h, c] : devices_[device].held) out.push_back(h);
  for (const LeasedChunk& c : devices_[device].idle) out.push_back(c.handle);
  return out;
}

size_t DaemonChunkSource::kept_descriptors() const {
  MutexLock l(&kept_mu_);
  return kept_fds_.size();
}

size_t DaemonChunkSource::idle_chunks(int device) const {
  MutexLock l(&mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return 0;
  return devices_[device].idle.size();
}

std::string DaemonChunkSource::Describe() const {
  MutexLock l(&mu_);
  std::vector<std::string> devs;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const DeviceState& d = devices_[i];
    if (d.daemon_device < 0) {
      devs.push_back(absl::StrFormat("device %d (%s): not served", i, d.uuid));
      continue;
    }
    // gmlaked's number for it only where it differs from ours.
    devs.push_back(absl::StrFormat(
        "device %d%s: %s chunks, %s capacity", i,
        d.daemon_device == static_cast<int>(i)
            ? ""
            : absl::StrFormat(" (gmlaked's %d, %s)", d.daemon_device, d.uuid),
        FormatBytes(d.chunk_size), FormatBytes(d.lake_capacity)));
  }
  return absl::StrFormat("gmlaked at %s (session %d, %s backend; %s)%s",
                         options_.socket_path, session_id_.load(),
                         daemon_backend_, absl::StrJoin(devs, "; "),
                         lost_.ok() ? "" : " [gone]");
}

DaemonChunkSource::~DaemonChunkSource() {
  size_t held = 0;
  {
    MutexLock l(&mu_);
    closing_ = true;
    link_changed_.SignalAll();
    for (const DeviceState& d : devices_) held += d.held.size();
  }
  if (relink_thread_.joinable()) relink_thread_.join();
  if (held > 0) {
    std::fprintf(stderr,
                 "gmlake: DaemonChunkSource destroyed while %zu chunks are "
                 "still acquired; the session's end gives them back to "
                 "gmlaked\n",
                 held);
  }
  stop_reports_.Notify();
  if (report_thread_.joinable()) report_thread_.join();
  const std::shared_ptr<Rpc> r = link();
  if (r != nullptr && r->stub != nullptr && Lost().ok()) {
    v1::CloseSessionRequest req;
    req.set_session_id(r->session);
    req.set_token(r->token);
    v1::CloseSessionResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, std::min(options_.rpc_timeout, absl::Seconds(2)));
    r->stub->CloseSession(&ctx, req, &resp);
  }
  if (watch_thread_.joinable()) {
    if (r != nullptr) r->watch_ctx.TryCancel();
    watch_thread_.join();
  }
  {
    MutexLock l(&fd_mu_);
    fd_sock_.Reset();
  }
  MutexLock l(&mu_);
  if (backend_ != nullptr) {
    for (DeviceState& d : devices_) {
      for (const LeasedChunk& c : d.idle) {
        backend_->ReleaseChunk(c.handle).IgnoreError();
      }
      for (const auto& [h, c] : d.held) backend_->ReleaseChunk(h).IgnoreError();
      d.idle.clear();
      d.held.clear();
      d.idle_bytes = d.held_bytes = 0;
    }
  }
  MutexLock k(&kept_mu_);
  kept_fds_.clear();
}

}  // namespace gmlake
