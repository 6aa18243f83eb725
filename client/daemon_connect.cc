// Copyright 2026 The GMLake Authors.
//
// DaemonChunkSource's session setup, for Connect and for Relink: the gRPC
// channel, OpenSession, the backend chunks are imported through, the
// pairing of devices by UUID, the fd socket's bind, the Watch stream.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
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
#include "client/daemon_chunk_source.h"
#include "client/daemon_link.h"
#include "common/bytes.h"
#include "common/fd_passing.h"
#include "common/mutex.h"
#include "common/vmm.h"
#include "grpcpp/grpcpp.h"
#include "proto/gmlake.grpc.pb.h"
#include "proto/protocol.h"

namespace gmlake {

using daemon_link::kFdSocketTimeout;
using daemon_link::ReadReply;
using daemon_link::SetDeadline;
using daemon_link::WithContext;

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

}  // namespace gmlake
