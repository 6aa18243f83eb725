// Copyright 2026 The GMLake Authors.
//
// DaemonChunkSource after gmlaked restarted: reconnecting by itself, showing
// the new daemon the chunks this process still holds (re-adoption), and
// leases that wait for the daemon to come back, and the descriptors kept
// to show it. See daemon/adopt_policy.h for what the daemon does with the
// chunks.

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/daemon_chunk_source.h"
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

// An adopt reply is small (ids only); a batch of 253 is ~2.6 KiB.
constexpr size_t kMaxAdoptReplyBytes = 64 * 1024;
// The longest pause between two attempts to reconnect.
constexpr absl::Duration kMaxReconnectBackoff = absl::Seconds(1);
// How often "not back yet" is said.
constexpr absl::Duration kReconnectLogEvery = absl::Seconds(10);

}  // namespace

absl::Status DaemonChunkSource::WaitForLink(absl::Time deadline) {
  MutexLock l(&mu_);
  while (!lost_.ok() && !closing_ &&
         options_.reconnect_interval > absl::ZeroDuration()) {
    if (link_changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
  return lost_;
}

absl::Status DaemonChunkSource::LeaseWhenLinked(int device, size_t count,
                                                uint64_t size,
                                                std::vector<LeasedChunk>* out,
                                                uint64_t* epoch,
                                                bool no_pressure) {
  const absl::Time deadline = absl::Now() + options_.reconnect_wait;
  for (;;) {
    if (absl::Status s = WaitForLink(deadline); !s.ok()) return s;
    absl::Status s =
        LeaseAndImport(device, count, size, out, epoch, no_pressure);
    // Unavailable: gmlaked went away during the lease; lease again from the
    // restarted one.
    if (s.ok() || s.code() != absl::StatusCode::kUnavailable ||
        options_.reconnect_interval <= absl::ZeroDuration() ||
        absl::Now() >= deadline) {
      return s;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::Status DaemonChunkSource::CheckSameDevices(
    const std::vector<const v1::DeviceInfo*>& served) {
  MutexLock l(&mu_);
  std::vector<int> renumbered(devices_.size(), -1);
  for (size_t i = 0; i < devices_.size(); ++i) {
    const DeviceState& d = devices_[i];
    if (d.daemon_device < 0) continue;
    const v1::DeviceInfo* same = nullptr;
    for (const v1::DeviceInfo* info : served) {
      if (d.uuid.empty() || info->uuid().empty()
              ? info->device() == d.daemon_device
              : info->uuid() == d.uuid) {
        same = info;
      }
    }
    if (same == nullptr || same->chunk_size() != d.chunk_size) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "gmlaked at %s came back %s device %d (%s) with %s chunks: this "
          "process's chunks of it cannot be shown to it; restart gmlaked "
          "with the flags it had (--chunk_size, devices)",
          options_.socket_path, same == nullptr ? "without" : "serving",
          static_cast<int>(i), d.uuid,
          same == nullptr ? "its" : FormatBytes(same->chunk_size())));
    }
    renumbered[i] = same->device();
  }
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (renumbered[i] >= 0) devices_[i].daemon_device = renumbered[i];
  }
  return absl::OkStatus();
}

void DaemonChunkSource::RelinkLoop() {
  absl::Duration backoff = options_.reconnect_interval;
  absl::Time last_said = absl::InfinitePast();
  for (;;) {
    {
      MutexLock l(&mu_);
      while (!closing_ && lost_.ok()) link_changed_.Wait(&mu_);
      if (closing_) return;
      link_changed_.WaitWithTimeout(&mu_, backoff);
      if (closing_) return;
    }
    const absl::Status s = Relink();
    if (s.ok()) {
      backoff = options_.reconnect_interval;
      continue;
    }
    backoff = std::min(backoff * 2, kMaxReconnectBackoff);
    if (absl::Now() - last_said >= kReconnectLogEvery) {
      last_said = absl::Now();
      std::fprintf(
          stderr, "gmlake: gmlaked at %s is not back yet (%s); retrying\n",
          options_.socket_path.c_str(), std::string(s.message()).c_str());
    }
  }
}

absl::Status DaemonChunkSource::Relink() {
  absl::StatusOr<std::shared_ptr<Rpc>> link =
      NewLink(std::min(options_.connect_timeout, absl::Seconds(1)));
  if (!link.ok()) return link.status();
  if (absl::Status s = Open(link->get(), /*first=*/false); !s.ok()) return s;
  absl::StatusOr<UniqueFd> sock = Bind(**link);
  if (!sock.ok()) return sock.status();
  absl::flat_hash_map<ChunkHandle, uint64_t> renamed;
  if (absl::Status s = Readopt(**link, sock->get(), &renamed); !s.ok()) {
    return s;
  }
  // The old Watch stream is over, or ends now.
  if (const std::shared_ptr<Rpc> old = this->link(); old != nullptr) {
    old->watch_ctx.TryCancel();
  }
  if (watch_thread_.joinable()) watch_thread_.join();
  if (absl::Status s = StartWatch(*link); !s.ok()) return s;
  {
    MutexLock l(&fd_mu_);
    fd_sock_ = *std::move(sock);
  }
  std::vector<uint64_t> let_go;
  size_t kept = 0;
  {
    MutexLock l(&mu_);
    let_go = RenameLocked(renamed);
    for (const DeviceState& d : devices_) kept += d.held.size() + d.idle.size();
    (*link)->epoch = ++epoch_;
    rpc_ = *link;
    session_id_ = (*link)->session;
    lost_ = absl::OkStatus();
    link_changed_.SignalAll();
  }
  if (!let_go.empty()) {
    // Given back while they were being shown: the new daemon has them.
    v1::ReturnRequest req;
    req.set_session_id((*link)->session);
    req.set_token((*link)->token);
    for (uint64_t id : let_go) req.add_chunk_ids(id);
    v1::ReturnResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    (*link)->stub->Return(&ctx, req, &resp);
  }
  reconnections_.fetch_add(1);
  chunks_readopted_.fetch_add(renamed.size() - let_go.size());
  std::fprintf(stderr,
               "gmlake: reconnected to gmlaked at %s after it restarted: "
               "session %llu; it adopted %zu of the %zu chunks this process "
               "holds\n",
               options_.socket_path.c_str(),
               static_cast<unsigned long long>((*link)->session),
               renamed.size() - let_go.size(), kept);
  return absl::OkStatus();
}

size_t DaemonChunkSource::ReadoptBatch() {
  // Each descriptor shown is open until its batch is sent: half of what
  // the process has left under its limit, so nothing else runs out.
  const FdUsage u = CurrentFdUsage();
  if (u.limit == 0) return kMaxFdsPerGroup;
  const uint64_t left = u.limit > u.open ? u.limit - u.open : 0;
  return std::clamp<size_t>(left / 2, 1, kMaxFdsPerGroup);
}

std::vector<UniqueFd> DaemonChunkSource::ShowableFdsLocked(
    int device, absl::Span<const LeasedChunk> chunks,
    std::vector<LeasedChunk>* shown, size_t* failures,
    absl::Status* first_failure) {
  const DeviceState& d = devices_[device];
  absl::flat_hash_set<ChunkHandle> idle;
  for (const LeasedChunk& c : d.idle) idle.insert(c.handle);
  std::vector<UniqueFd> fds;
  for (const LeasedChunk& c : chunks) {
    // Given back since the list was made (its handle may even name a chunk
    // imported since): not shown.
    auto held = d.held.find(c.handle);
    const bool still = (held != d.held.end() && held->second.id == c.id) ||
                       idle.contains(c.handle);
    if (!still) continue;
    absl::StatusOr<UniqueFd> fd = ShowableFd(c.handle);
    if (!fd.ok()) {  // kept, uncounted
      if ((*failures)++ == 0) *first_failure = fd.status();
      continue;
    }
    shown->push_back(c);
    fds.push_back(*std::move(fd));
  }
  return fds;
}

absl::Status DaemonChunkSource::Readopt(
    const Rpc& link, int sock,
    absl::flat_hash_map<ChunkHandle, uint64_t>* renamed) {
  size_t devices;
  {
    MutexLock l(&mu_);
    devices = devices_.size();
  }
  for (size_t dev = 0; dev < devices; ++dev) {
    std::vector<LeasedChunk> all;
    int daemon_device;
    {
      MutexLock l(&mu_);
      const DeviceState& d = devices_[dev];
      daemon_device = d.daemon_device;
      if (daemon_device < 0) continue;
      all = d.idle;
      for (const auto& [h, c] : d.held) all.push_back({h, c.id, c.size});
    }
    absl::Status first_failure;
    size_t failures = 0;
    for (size_t at = 0; at < all.size();) {
      const size_t n = std::min(ReadoptBatch(), all.size() - at);
      std::vector<LeasedChunk> shown;
      std::vector<UniqueFd> fds;
      {
        // Exported (or the kept descriptor copied) under the lock, so that
        // no chunk is released meanwhile.
        MutexLock l(&mu_);
        fds = ShowableFdsLocked(static_cast<int>(dev),
                                absl::MakeConstSpan(all).subspan(at, n), &shown,
                                &failures, &first_failure);
      }
      at += n;
      if (shown.empty()) continue;
      if (absl::Status s = ShowChunks(link, sock, dev, daemon_device, shown,
                                      std::move(fds), renamed);
          !s.ok()) {
        return s;
      }
    }
    if (failures != 0) {
      std::fprintf(stderr,
                   "gmlake: could not export %zu of the %zu chunks held on "
                   "device %zu to show them to the restarted gmlaked (%s); "
                   "this process keeps them, uncounted by gmlaked\n",
                   failures, all.size(), dev,
                   std::string(first_failure.message()).c_str());
    }
  }
  return absl::OkStatus();
}

absl::Status DaemonChunkSource::ShowChunks(
    const Rpc& link, int sock, size_t dev, int daemon_device,
    const std::vector<LeasedChunk>& shown, std::vector<UniqueFd> fds,
    absl::flat_hash_map<ChunkHandle, uint64_t>* renamed) {
  v1::FdRequest req;
  req.set_session_id(link.session);
  req.set_token(link.token);
  req.mutable_adopt()->set_device(daemon_device);
  std::vector<int> raw;
  for (size_t i = 0; i < shown.size(); ++i) {
    req.mutable_adopt()->add_previous_chunk_ids(shown[i].id);
    req.mutable_adopt()->add_chunk_bytes(shown[i].size);
    raw.push_back(fds[i].get());
  }
  if (absl::Status s = SendFds(sock, req.SerializeAsString(), raw); !s.ok()) {
    return s;
  }
  fds.clear();  // sent: the daemon has its own
  absl::StatusOr<ReceivedMessage> msg = RecvFds(sock, kMaxAdoptReplyBytes, 0);
  if (!msg.ok()) return msg.status();
  v1::FdReply reply;
  if (!reply.ParseFromString(msg->payload)) {
    return absl::DataLossError(
        "gmlaked's fd socket sent something that is not an FdReply");
  }
  if (reply.code() != 0) {
    std::fprintf(stderr,
                 "gmlake: gmlaked refused to adopt %zu chunks of device "
                 "%zu: %s; this process keeps them, uncounted\n",
                 shown.size(), dev, reply.message().c_str());
    return absl::OkStatus();
  }
  if (static_cast<size_t>(reply.chunk_ids_size()) != shown.size()) {
    return absl::DataLossError(
        absl::StrFormat("gmlaked adopted %d chunks of %d shown",
                        reply.chunk_ids_size(), shown.size()));
  }
  for (size_t i = 0; i < shown.size(); ++i) {
    (*renamed)[shown[i].handle] = reply.chunk_ids(i);
  }
  return absl::OkStatus();
}

std::vector<uint64_t> DaemonChunkSource::RenameLocked(
    const absl::flat_hash_map<ChunkHandle, uint64_t>& renamed) {
  absl::flat_hash_map<ChunkHandle, uint64_t> unused = renamed;
  auto rename = [&](ChunkHandle h, uint64_t* id) {
    auto it = unused.find(h);
    if (it == unused.end()) {
      *id = 0;  // not adopted: kept, uncounted, released here alone
      return;
    }
    *id = it->second;
    unused.erase(it);
  };
  for (DeviceState& d : devices_) {
    for (auto& [h, c] : d.held) rename(h, &c.id);
    for (LeasedChunk& c : d.idle) rename(c.handle, &c.id);
  }
  std::vector<uint64_t> let_go;
  for (const auto& [h, id] : unused) let_go.push_back(id);
  return let_go;
}

// --- Descriptors kept for re-adoption (DaemonSourceOptions::keep_descriptors)

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

}  // namespace gmlake
