// Copyright 2026 The GMLake Authors.
//
// The class core: Connect (the session setup is in daemon_connect.cc),
// the link and its loss, what the source holds, and the destructor. The
// other concerns have files of their own: daemon_lease.cc (leasing and
// giving back), daemon_pressure_answer.cc (the Watch stream and answers to
// pressure), daemon_usage_report.cc (usage reports), daemon_relink.cc
// (reconnecting to a restarted gmlaked, kept descriptors).

#include "client/daemon_chunk_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/daemon_link.h"
#include "common/bytes.h"
#include "common/fd_passing.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/gmlake.grpc.pb.h"

namespace gmlake {

using daemon_link::SetDeadline;

namespace daemon_link {

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

}  // namespace daemon_link

DaemonChunkSource::DaemonChunkSource(const DaemonSourceOptions& options)
    : options_(options) {}

std::shared_ptr<DaemonChunkSource::Rpc> DaemonChunkSource::link() const {
  MutexLock l(&mu_);
  return rpc_;
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
  if (options.lease_ahead_in_background && options.lease_ahead_max > 0) {
    src->refill_thread_ = std::thread([p] { p->RefillLoop(); });
  }
  if (options.reconnect_interval > absl::ZeroDuration()) {
    src->relink_thread_ = std::thread([p] { p->RelinkLoop(); });
  }
  return src;
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
    refill_wanted_.SignalAll();
    for (const DeviceState& d : devices_) held += d.held.size();
  }
  if (refill_thread_.joinable()) refill_thread_.join();
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
