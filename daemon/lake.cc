// Copyright 2026 The GMLake Authors.

#include "daemon/lake.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/bytes.h"
#include "common/mutex.h"
#include "daemon/fd_usage.h"
#include "daemon/log.h"

namespace gmlake {
namespace {

constexpr size_t kTokenBytes = 16;
constexpr size_t kMaxNameBytes = 128;

std::string NewToken() {
  std::string token(kTokenBytes, '\0');
  size_t done = 0;
  while (done < token.size()) {
    const ssize_t n = ::getrandom(&token[done], token.size() - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // no entropy source: handled below
    done += static_cast<size_t>(n);
  }
  if (done < token.size()) {
    // getrandom is in every kernel gmlaked supports; this is only a guard
    // against a sandbox that forbids it, and the token still differs per
    // session and per run.
    const uint64_t mix = static_cast<uint64_t>(absl::GetCurrentTimeNanos()) ^
                         (static_cast<uint64_t>(::getpid()) << 32);
    for (size_t i = done; i < token.size(); ++i) {
      token[i] = static_cast<char>((mix >> ((i % 8) * 8)) ^ (i * 131));
    }
  }
  return token;
}

// Compares without an early exit, so timing does not tell how much of a
// guessed token was right.
bool TokenEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

// The start time of a process (field 22 of /proc/<pid>/stat, in clock
// ticks since boot), or 0 if the process does not exist. Together with the
// pid it names a process even after the pid is reused.
uint64_t ProcessStartTime(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text;
  if (!in || !std::getline(in, text)) return 0;
  // The command name (field 2) is in parentheses and may hold spaces.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  // Fields 3.. ; the start time is field 22, the 20th after the name.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

UniqueFd PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) return UniqueFd(static_cast<int>(fd));
#endif
  return UniqueFd();
}

std::string SessionLabel(uint64_t id, absl::string_view name, pid_t pid) {
  if (name.empty()) return absl::StrFormat("session %d (pid %d)", id, pid);
  return absl::StrFormat("session %d (%s, pid %d)", id, name, pid);
}

}  // namespace

absl::StatusOr<ScrubPolicy> ParseScrubPolicy(absl::string_view text) {
  if (text == "always") return ScrubPolicy::kAlways;
  if (text == "cross-uid" || text == "cross_uid") return ScrubPolicy::kCrossUid;
  if (text == "never") return ScrubPolicy::kNever;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown scrub policy '", text, "': use always, cross-uid or never"));
}

absl::string_view ScrubPolicyName(ScrubPolicy policy) {
  switch (policy) {
    case ScrubPolicy::kAlways:
      return "always";
    case ScrubPolicy::kCrossUid:
      return "cross-uid";
    case ScrubPolicy::kNever:
      return "never";
  }
  return "?";
}

void Lake::Aftermath::Run(VmmBackend* backend) {
  for (auto& [sink, pressure] : sends) sink->Send(pressure);
  sends.clear();
  for (auto& [sink, status] : closes) sink->Close(status);
  closes.clear();
  for (auto& hook : hooks) hook();
  hooks.clear();
  for (ChunkHandle h : releases) {
    absl::Status s = backend->ReleaseChunk(h);
    if (!s.ok()) Warnf("releasing chunk handle %d failed: %s", h, s.ToString());
  }
  releases.clear();
}

Lake::Lake(VmmBackend* backend, LakeOptions options)
    : backend_(backend), options_(std::move(options)), started_(absl::Now()) {}

absl::StatusOr<std::unique_ptr<Lake>> Lake::Create(VmmBackend* backend,
                                                   LakeOptions options) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("Lake::Create needs a backend");
  }
  if (!backend->has_memory()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend '", backend->name(),
        "' has no memory to share: gmlaked needs --backend=cuda or host"));
  }
  if (options.devices.size() != static_cast<size_t>(backend->device_count())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d device configurations for a backend with %d devices",
        options.devices.size(), backend->device_count()));
  }
  for (size_t i = 0; i < options.devices.size(); ++i) {
    const LakeDeviceConfig& d = options.devices[i];
    const size_t gran = backend->granularity(static_cast<int>(i));
    if (d.chunk_size == 0 || gran == 0 || d.chunk_size % gran != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chunk size %s on device %d is not a positive multiple of the "
          "device's granularity %s (--chunk_size)",
          FormatBytes(d.chunk_size), i, FormatBytes(gran)));
    }
    if (d.capacity_bytes < d.chunk_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "capacity %s on device %d is less than one chunk of %s "
          "(--capacity)",
          FormatBytes(d.capacity_bytes), i, FormatBytes(d.chunk_size)));
    }
    if (d.precreate_bytes > d.capacity_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "precreate %s on device %d is more than its capacity %s "
          "(--precreate)",
          FormatBytes(d.precreate_bytes), i, FormatBytes(d.capacity_bytes)));
    }
  }
  if (options.max_sessions == 0) {
    return absl::InvalidArgumentError("--max_sessions must be positive");
  }
  if (options.max_sessions_per_uid == 0) {
    return absl::InvalidArgumentError(
        "--max_sessions_per_uid must be positive");
  }
  if (options.max_waiting_leases == 0 ||
      options.max_waiting_leases_per_uid == 0) {
    return absl::InvalidArgumentError(
        "--max_waiting_leases and --max_waiting_leases_per_uid must be "
        "positive");
  }
  if (options.max_unbound_sessions == 0) {
    return absl::InvalidArgumentError(
        "--max_unbound_sessions must be positive");
  }
  std::unique_ptr<Lake> lake(new Lake(backend, std::move(options)));
  {
    MutexLock lock(&lake->mu_);
    for (const LakeDeviceConfig& c : lake->options_.devices) {
      Device d;
      d.config = c;
      d.capacity_chunks = c.capacity_bytes / c.chunk_size;
      lake->devices_.push_back(std::move(d));
    }
  }
  absl::Status s = lake->Precreate();
  if (!s.ok()) return s;
  return lake;
}

absl::Status Lake::Precreate() {
  for (size_t i = 0; i < options_.devices.size(); ++i) {
    const LakeDeviceConfig& c = options_.devices[i];
    const uint64_t n = c.precreate_bytes / c.chunk_size;
    if (n == 0) continue;
    std::vector<std::unique_ptr<ChunkRec>> made;
    absl::Status s = CreateChunks(static_cast<int>(i), n, &made);
    if (!s.ok() && OutOfDescriptors(CurrentFdUsage())) {
      s = absl::ResourceExhaustedError(absl::StrCat(
          DescribeOutOfDescriptors(CurrentFdUsage()), " (", s.message(), ")"));
    }
    MutexLock lock(&mu_);
    Device& d = devices_[i];
    const absl::Time now = absl::Now();
    for (auto& c : made) {
      c->id = next_chunk_++;
      c->state = ChunkState::kFree;
      c->free_since = now;
      d.free_by_uid[kNoUid].push_back(c->id);
      ++d.free;
      ++d.created;
      chunks_[c->id] = std::move(c);
    }
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrFormat("creating %d chunks ahead of time on "
                                          "device %d (--precreate): %s",
                                          n, i, s.message()));
    }
  }
  return absl::OkStatus();
}

Lake::~Lake() {
  Shutdown();
  std::vector<std::unique_ptr<ChunkRec>> all;
  {
    MutexLock lock(&mu_);
    for (auto& [id, c] : chunks_) all.push_back(std::move(c));
    chunks_.clear();
  }
  for (auto& c : all) {
    // Chunks still leased live on in their clients' imports: releasing our
    // handle only drops the daemon's reference, as with the driver.
    absl::Status s = backend_->ReleaseChunk(c->handle);
    if (!s.ok()) Warnf("releasing chunk %d failed: %s", c->id, s.ToString());
  }
}

void Lake::Shutdown() {
  Aftermath after;
  {
    MutexLock lock(&mu_);
    shutting_down_ = true;
    std::vector<uint64_t> ids;
    for (const auto& [id, s] : sessions_) ids.push_back(id);
    for (uint64_t id : ids) {
      EndSessionLocked(id, "gmlaked is shutting down", EndKind::kShutdown,
                       &after);
    }
    for (auto& [id, s] : orphans_) ReleaseSessionChunksLocked(s.get());
    orphans_.clear();
    freed_.SignalAll();
  }
  after.Run(backend_);
}

// --- Sessions ----------------------------------------------------------------

absl::StatusOr<Lake::Session*> Lake::FindLocked(uint64_t session,
                                                absl::string_view token) const {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrFormat(
        "session %d does not exist (it ended, or was never opened): open a "
        "new one",
        session));
  }
  if (!TokenEquals(it->second->token, token)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("wrong token for session %d", session));
  }
  return it->second.get();
}

absl::StatusOr<SessionTicket> Lake::OpenSession(pid_t claimed_pid,
                                                absl::string_view name) {
  if (claimed_pid <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pid ", claimed_pid, " is not a process id"));
  }
  Aftermath after;
  absl::StatusOr<SessionTicket> ticket;
  {
    MutexLock lock(&mu_);
    ticket = OpenSessionLocked(claimed_pid, name, &after);
  }
  after.Run(backend_);
  return ticket;
}

absl::StatusOr<SessionTicket> Lake::OpenSessionLocked(pid_t claimed_pid,
                                                      absl::string_view name,
                                                      Aftermath* after) {
  if (shutting_down_) {
    return absl::UnavailableError("gmlaked is shutting down");
  }
  const absl::Time now = absl::Now();
  // Unbound sessions have no uid yet: they are capped apart, and the one
  // that waited longest makes room once it is clearly not binding.
  size_t unbound = 0;
  Session* oldest = nullptr;
  for (const auto& [id, s] : sessions_) {
    if (s->bound) continue;
    ++unbound;
    if (oldest == nullptr || s->opened < oldest->opened) oldest = s.get();
  }
  if (unbound >= options_.max_unbound_sessions) {
    if (oldest == nullptr ||
        now - oldest->opened < options_.unbound_eviction_age) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%d sessions are waiting to be bound on the fd socket, gmlaked's "
          "limit (--max_unbound_sessions); retry in a moment",
          unbound));
    }
    EndSessionLocked(
        oldest->id,
        absl::StrFormat("evicted unbound after %s: %d sessions were waiting "
                        "to be bound (--max_unbound_sessions)",
                        absl::FormatDuration(now - oldest->opened), unbound),
        EndKind::kOther, after);
  }
  if (sessions_.size() >= options_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "gmlaked already serves %d sessions, its limit (--max_sessions)",
        sessions_.size()));
  }
  auto s = std::make_unique<Session>();
  s->id = next_session_++;
  s->token = NewToken();
  s->claimed_pid = claimed_pid;
  s->name = std::string(name.substr(0, kMaxNameBytes));
  s->opened = now;
  SessionTicket ticket{s->id, s->token};
  VLogf("%s opened", SessionLabel(s->id, s->name, claimed_pid));
  sessions_[s->id] = std::move(s);
  return ticket;
}

absl::Status Lake::Authenticate(uint64_t session,
                                absl::string_view token) const {
  MutexLock lock(&mu_);
  return FindLocked(session, token).status();
}

absl::Status Lake::BindSession(uint64_t session, absl::string_view token,
                               const PeerIdentity& peer,
                               std::function<void()> on_end) {
  Aftermath after;
  absl::Status bound;
  {
    MutexLock lock(&mu_);
    bound = BindSessionLocked(session, token, peer, std::move(on_end), &after);
  }
  after.Run(backend_);
  return bound;
}

absl::Status Lake::BindSessionLocked(uint64_t session, absl::string_view token,
                                     const PeerIdentity& peer,
                                     std::function<void()> on_end,
                                     Aftermath* after) {
  absl::StatusOr<Session*> found = FindLocked(session, token);
  if (!found.ok()) return found.status();
  Session* s = *found;
  if (s->bound) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "session %d is bound already (to pid %d)", session, s->peer.pid));
  }
  if (options_.check_claimed_pid && peer.pid != s->claimed_pid) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "session %d was opened for pid %d but the fd-socket peer is pid %d: "
        "bind from the process that opened the session (clients in another "
        "pid namespace need gmlaked --nocheck_claimed_pid)",
        session, s->claimed_pid, peer.pid));
  }
  // Ended sessions still holding chunks count: they hold the uid's memory.
  size_t of_uid = 0;
  for (const auto* table : {&sessions_, &orphans_}) {
    for (const auto& [id, other] : *table) {
      if (other->bound && other->peer.uid == peer.uid) ++of_uid;
    }
  }
  if (of_uid >= options_.max_sessions_per_uid) {
    const absl::Status refused = absl::ResourceExhaustedError(absl::StrFormat(
        "uid %d already has %d sessions, gmlaked's limit per uid "
        "(--max_sessions_per_uid): close sessions it no longer uses",
        peer.uid, of_uid));
    EndSessionLocked(session, refused.message(), EndKind::kOther, after);
    return refused;
  }
  s->bound = true;
  s->peer = peer;
  s->pidfd = PidfdOpen(peer.pid);
  if (!s->pidfd.valid()) s->pid_start_time = ProcessStartTime(peer.pid);
  s->on_end = std::move(on_end);
  VLogf("%s bound: uid %d gid %d", SessionLabel(s->id, s->name, peer.pid),
        peer.uid, peer.gid);
  return absl::OkStatus();
}

absl::Status Lake::AttachWatcher(uint64_t session, absl::string_view token,
                                 std::shared_ptr<PressureSink> sink) {
  std::shared_ptr<PressureSink> old;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<Session*> found = FindLocked(session, token);
    if (!found.ok()) return found.status();
    old = std::exchange((*found)->sink, std::move(sink));
    // Requests sent down the old stream will not be answered on this one.
    (*found)->pressure_outstanding = 0;
  }
  if (old != nullptr) {
    old->Close(absl::AbortedError("another Watch stream replaced this one"));
  }
  return absl::OkStatus();
}

void Lake::WatcherGone(uint64_t session, const PressureSink* sink) {
  Aftermath after;
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(session);
    if (it == sessions_.end() || it->second->sink.get() != sink) return;
    // The stream is gone: nothing to close.
    it->second->sink.reset();
    EndSessionLocked(session, "its Watch stream broke", EndKind::kOther,
                     &after);
  }
  after.Run(backend_);
}

absl::Status Lake::ReportUsage(uint64_t session, absl::string_view token,
                               absl::Span<const DeviceUsageReport> usage,
                               bool answers_pressure) {
  MutexLock lock(&mu_);
  absl::StatusOr<Session*> found = FindLocked(session, token);
  if (!found.ok()) return found.status();
  Session* s = *found;
  for (const DeviceUsageReport& u : usage) {
    if (u.device < 0 || u.device >= static_cast<int>(devices_.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "usage for device %d, which gmlaked does not serve (devices 0..%d)",
          u.device, devices_.size() - 1));
    }
  }
  for (const DeviceUsageReport& u : usage) s->usage[u.device] = u;
  if (answers_pressure) {
    ++s->reports;
    if (s->pressure_outstanding > 0) --s->pressure_outstanding;
    // A lease waiting for answers to its pressure requests may go on.
    freed_.SignalAll();
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Lake::CloseSession(uint64_t session,
                                            absl::string_view token) {
  Aftermath after;
  uint64_t bytes = 0;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<Session*> found = FindLocked(session, token);
    if (!found.ok()) return found.status();
    bytes = EndSessionLocked(session, "closed by its client", EndKind::kClosed,
                             &after);
  }
  after.Run(backend_);
  return bytes;
}

uint64_t Lake::EndSession(uint64_t session, absl::string_view reason) {
  Aftermath after;
  uint64_t bytes = 0;
  {
    MutexLock lock(&mu_);
    bytes = EndSessionLocked(session, reason, EndKind::kOther, &after);
  }
  after.Run(backend_);
  return bytes;
}

uint64_t Lake::EndSessionLocked(uint64_t session, absl::string_view reason,
                                EndKind kind, Aftermath* after) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return 0;
  Session* s = it->second.get();
  // Leases never claimed were never delivered: they go back whatever
  // happens to the rest.
  uint64_t returned = 0;
  for (auto& [lease, pending] : s->unclaimed) {
    lease_owner_.erase(lease);
    for (uint64_t cid : pending.chunk_ids) {
      auto c = chunks_.find(cid);
      if (c == chunks_.end() || c->second->session != session ||
          c->second->state != ChunkState::kLeased) {
        continue;
      }
      returned += devices_[c->second->device].config.chunk_size;
      FreeChunkLocked(c->second.get(), c->second->last_uid);
    }
  }
  s->unclaimed.clear();
  std::unique_ptr<Session> owned = std::move(it->second);
  sessions_.erase(it);
  ++sessions_ended_;
  if (s->sink != nullptr) {
    after->closes.emplace_back(
        std::move(s->sink),
        absl::CancelledError(absl::StrCat("session ended: ", reason)));
  }
  if (s->on_end) after->hooks.push_back(std::move(s->on_end));
  freed_.SignalAll();
  const std::string label =
      SessionLabel(s->id, s->name, s->bound ? s->peer.pid : s->claimed_pid);

  // Its leases in flight are not its chunks yet: they put theirs back
  // themselves when they find the session gone.
  const uint64_t delivered = s->chunks.size();
  if (kind == EndKind::kOther && s->bound && delivered > 0 &&
      ProcessAliveLocked(*s)) {
    // The process may still have these chunks mapped: leasing them to
    // another session would share its memory. They wait for its exit.
    s->ended = true;
    s->end_reason = std::string(reason);
    Noticef(
        "%s ended: %s; its %d chunks stay leased until process %d exits "
        "(it may still use them)",
        label, reason, delivered, s->peer.pid);
    orphans_[session] = std::move(owned);
    return returned;
  }
  returned += ReleaseSessionChunksLocked(s);
  if (returned > 0 || !s->bound || VerboseLog()) {
    Logf("%s ended: %s; %s back in the lake", label, reason,
         FormatBytes(returned));
  }
  return returned;
}

uint64_t Lake::ReleaseSessionChunksLocked(Session* s) {
  uint64_t returned = 0;
  for (uint64_t id : s->chunks) {
    ChunkRec* c = FindChunkLocked(id);
    if (c == nullptr || c->state != ChunkState::kLeased ||
        c->session != s->id) {
      Errorf(
          "internal error: chunk %d listed under session %d is not leased "
          "to it; left alone",
          id, s->id);
      continue;
    }
    Device& d = devices_[c->device];
    --d.leased;
    ++d.free;
    d.free_by_uid[c->last_uid].push_back(id);
    c->state = ChunkState::kFree;
    c->session = 0;
    c->free_since = absl::Now();
    returned += d.config.chunk_size;
  }
  reclaimed_bytes_ += returned;
  s->chunks.clear();
  s->leased_chunks_by_device.clear();
  // The granted bytes leave its uid's account; a lease still in flight
  // takes its own off when it finishes.
  if (s->bound) UnchargeUidLocked(s->peer.uid, s->leased_bytes);
  s->leased_bytes = 0;
  freed_.SignalAll();
  return returned;
}

bool Lake::ProcessAliveLocked(const Session& s) const {
  if (s.pidfd.valid()) {
    // A pidfd becomes readable when its process exits.
    pollfd p{s.pidfd.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }
  const uint64_t start = ProcessStartTime(s.peer.pid);
  return start != 0 && start == s.pid_start_time;
}

Lake::Session* Lake::AnySessionLocked(uint64_t id) const {
  auto it = sessions_.find(id);
  if (it != sessions_.end()) return it->second.get();
  auto o = orphans_.find(id);
  return o == orphans_.end() ? nullptr : o->second.get();
}

int Lake::CheckLiveness() {
  Aftermath after;
  int ended = 0;
  {
    MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    std::vector<std::pair<uint64_t, std::string>> to_end;
    std::vector<pollfd> polls;
    std::vector<uint64_t> poll_ids;
    for (const auto& [id, s] : sessions_) {
      if (!s->bound) {
        if (now - s->opened > options_.bind_timeout) {
          to_end.emplace_back(
              id, absl::StrCat("it was not bound on the fd socket within ",
                               absl::FormatDuration(options_.bind_timeout)));
        }
        continue;
      }
      if (s->pidfd.valid()) {
        polls.push_back(pollfd{s->pidfd.get(), POLLIN, 0});
        poll_ids.push_back(id);
      } else if (!ProcessAliveLocked(*s)) {
        to_end.emplace_back(id,
                            absl::StrCat("process ", s->peer.pid, " is gone"));
      }
    }
    // A pidfd becomes readable when its process exits.
    if (!polls.empty() && ::poll(polls.data(), polls.size(), 0) > 0) {
      for (size_t i = 0; i < polls.size(); ++i) {
        auto it = sessions_.find(poll_ids[i]);
        if (polls[i].revents != 0 && it != sessions_.end()) {
          to_end.emplace_back(
              poll_ids[i],
              absl::StrCat("process ", it->second->peer.pid, " exited"));
        }
      }
    }
    for (const auto& [id, why] : to_end) {
      // An unbound session has no process to wait for; a bound one here
      // has none left.
      EndSessionLocked(id, why, EndKind::kProcessGone, &after);
      ++ended;
    }
    // Ended sessions whose process has exited since: their chunks go back.
    std::vector<uint64_t> done;
    for (const auto& [id, s] : orphans_) {
      if (s->chunks.empty() || !ProcessAliveLocked(*s)) done.push_back(id);
    }
    for (uint64_t id : done) {
      auto it = orphans_.find(id);
      if (it == orphans_.end()) continue;
      std::unique_ptr<Session> s = std::move(it->second);
      orphans_.erase(it);
      const uint64_t bytes = ReleaseSessionChunksLocked(s.get());
      Logf("%s: process %d exited; %s of its ended session back in the lake",
           SessionLabel(id, s->name, s->peer.pid), s->peer.pid,
           FormatBytes(bytes));
    }
    // Leases nobody claimed: their chunks go back.
    for (auto& [id, s] : sessions_) {
      std::vector<uint64_t> expired;
      for (const auto& [lease, pending] : s->unclaimed) {
        if (now - pending.granted > options_.claim_timeout) {
          expired.push_back(lease);
        }
      }
      for (uint64_t lease : expired) {
        uint64_t bytes = 0;
        auto pending = s->unclaimed.find(lease);
        if (pending == s->unclaimed.end()) continue;
        for (uint64_t cid : pending->second.chunk_ids) {
          ChunkRec* c = FindChunkLocked(cid);
          if (c == nullptr || c->session != id ||
              c->state != ChunkState::kLeased) {
            continue;
          }
          bytes += devices_[c->device].config.chunk_size;
          FreeChunkLocked(c, c->last_uid);
        }
        s->unclaimed.erase(pending);
        lease_owner_.erase(lease);
        Warnf("%s: lease %d was not claimed within %s; %s back in the lake",
              SessionLabel(id, s->name, s->peer.pid), lease,
              absl::FormatDuration(options_.claim_timeout), FormatBytes(bytes));
      }
    }
  }
  after.Run(backend_);
  return ended;
}

// --- Chunks ------------------------------------------------------------------

void Lake::FreeChunkLocked(ChunkRec* c, int64_t last_uid) {
  // Only a granted chunk: one in flight belongs to its lease, a free one is
  // free already.
  if (c->state != ChunkState::kLeased) return;
  Device& d = devices_[c->device];
  --d.leased;
  if (Session* s = AnySessionLocked(c->session); s != nullptr) {
    s->chunks.erase(c->id);
    const size_t size = d.config.chunk_size;
    s->leased_bytes -= std::min<uint64_t>(s->leased_bytes, size);
    auto& n = s->leased_chunks_by_device[c->device];
    if (n > 0) --n;
    UnchargeUidLocked(s->peer.uid, size);
  }
  c->state = ChunkState::kFree;
  c->session = 0;
  c->last_uid = last_uid;
  c->free_since = absl::Now();
  ++d.free;
  d.free_by_uid[last_uid].push_back(c->id);
  freed_.SignalAll();
}

bool Lake::NeedsScrub(int64_t last_uid, int64_t next_uid) const {
  if (last_uid == kNoUid) return false;  // never leased: fresh memory
  switch (options_.scrub) {
    case ScrubPolicy::kAlways:
      return true;
    case ScrubPolicy::kCrossUid:
      return last_uid != next_uid;
    case ScrubPolicy::kNever:
      return false;
  }
  return true;
}

void Lake::TakeFreeLocked(int device, int64_t uid, uint64_t n,
                          std::vector<uint64_t>* clean,
                          std::vector<uint64_t>* dirty) {
  Device& d = devices_[device];
  auto take_from = [&](int64_t from_uid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = d.free_by_uid.find(from_uid);
    if (it == d.free_by_uid.end()) return;
    std::vector<uint64_t>& list = it->second;
    const bool scrub = NeedsScrub(from_uid, uid);
    while (!list.empty() && clean->size() + dirty->size() < n) {
      const uint64_t id = list.back();
      list.pop_back();
      const ChunkRec* c = FindChunkLocked(id);
      if (c == nullptr || c->state != ChunkState::kFree) {
        Errorf(
            "internal error: chunk %d on a free list is not free; dropped "
            "from the list",
            id);
        continue;
      }
      (scrub ? dirty : clean)->push_back(id);
      --d.free;
    }
    if (list.empty()) d.free_by_uid.erase(it);
  };
  // Chunks that need no zeroing first: fresh ones, then this uid's own.
  take_from(kNoUid);
  take_from(uid);
  std::vector<int64_t> others;
  for (const auto& [other, list] : d.free_by_uid) others.push_back(other);
  for (int64_t other : others) {
    if (clean->size() + dirty->size() >= n) break;
    take_from(other);
  }
}

absl::Status Lake::Scrub(int device, absl::Span<const ChunkHandle> handles) {
  if (handles.empty()) return absl::OkStatus();
  const size_t size = options_.devices[device].chunk_size;
  // Map them side by side into one scratch range, fill with zeros, unmap.
  absl::StatusOr<VirtualRange> range =
      VirtualRange::Reserve(backend_, size * handles.size());
  if (!range.ok()) return range.status();
  std::vector<Mapping> maps;
  maps.reserve(handles.size());
  const int devices[] = {device};
  for (size_t i = 0; i < handles.size(); ++i) {
    absl::StatusOr<Mapping> m = Mapping::Map(backend_, range->base() + i * size,
                                             size, handles[i], devices);
    if (!m.ok()) return m.status();
    maps.push_back(*std::move(m));
  }
  absl::Status s = backend_->Fill(range->base(), 0, size * handles.size());
  for (Mapping& m : maps) {
    absl::Status u = m.Reset();
    if (s.ok() && !u.ok()) s = u;
  }
  return s;
}

absl::Status Lake::CreateChunks(int device, uint64_t n,
                                std::vector<std::unique_ptr<ChunkRec>>* out) {
  const size_t size = options_.devices[device].chunk_size;
  for (uint64_t i = 0; i < n; ++i) {
    absl::StatusOr<ChunkHandle> h = backend_->CreateChunk(device, size);
    if (!h.ok()) return h.status();
    absl::StatusOr<UniqueFd> fd = backend_->ExportChunk(*h);
    if (!fd.ok()) {
      backend_->ReleaseChunk(*h).IgnoreError();
      return fd.status();
    }
    auto c = std::make_unique<ChunkRec>();
    c->device = device;
    c->handle = *h;
    // With export on demand this first export (the costly one on a GPU)
    // only proves the chunk can be shared, and is closed here.
    if (!options_.export_on_demand) c->fd = *std::move(fd);
    out->push_back(std::move(c));
  }
  return absl::OkStatus();
}

uint64_t Lake::UidBytesLocked(int64_t uid) const {
  auto it = uid_bytes_.find(uid);
  return it == uid_bytes_.end() ? 0 : it->second;
}

size_t Lake::HoldersLocked(int device) const {
  size_t n = 0;
  for (const auto& [id, s] : sessions_) {
    auto it = s->leased_chunks_by_device.find(device);
    if (it != s->leased_chunks_by_device.end() && it->second > 0) ++n;
  }
  return n;
}

std::vector<uint64_t> Lake::SendPressureLocked(
    const Session& asker, int device, uint64_t bytes,
    absl::Span<const uint64_t> exclude, Aftermath* after) {
  struct Candidate {
    Session* s;
    uint64_t cached;  // reported cached bytes on the device
    uint64_t leased;  // bytes leased on the device
  };
  const size_t size = devices_[device].config.chunk_size;
  std::vector<Candidate> cands;
  for (auto& [id, s] : sessions_) {
    if (id == asker.id || s->sink == nullptr) continue;
    if (std::find(exclude.begin(), exclude.end(), id) != exclude.end()) {
      continue;
    }
    auto n = s->leased_chunks_by_device.find(device);
    if (n == s->leased_chunks_by_device.end() || n->second == 0) continue;
    auto u = s->usage.find(device);
    cands.push_back({s.get(), u == s->usage.end() ? 0 : u->second.cached_bytes,
                     n->second * size});
  }
  // Largest cached first; among equals, the largest holder.
  std::sort(cands.begin(), cands.end(),
            [](const Candidate& a, const Candidate& b) {
              if (a.cached != b.cached) return a.cached > b.cached;
              return a.leased > b.leased;
            });
  const std::string reason =
      absl::StrFormat("%s needs %s on device %d",
                      SessionLabel(asker.id, asker.name, asker.peer.pid),
                      FormatBytes(bytes), device);
  std::vector<uint64_t> asked;
  std::vector<uint64_t> asked_bytes;
  uint64_t remaining = bytes;
  // First what sessions say they hold unused; then, if that is not enough,
  // the rest of the holders (their allocators may free more on request).
  for (int pass = 0; pass < 2 && remaining > 0; ++pass) {
    for (Candidate& c : cands) {
      if (remaining == 0) break;
      const uint64_t offer =
          pass == 0 ? std::min(c.cached, c.leased) : c.leased;
      if (offer == 0 || (pass == 1 && c.cached >= c.leased)) continue;
      const uint64_t ask = std::min(remaining, offer);
      remaining -= ask;
      c.leased -= std::min(c.leased, ask);
      c.cached = 0;
      auto prev = std::find(asked.begin(), asked.end(), c.s->id);
      if (prev == asked.end()) {
        asked.push_back(c.s->id);
        asked_bytes.push_back(ask);
      } else {
        asked_bytes[prev - asked.begin()] += ask;
      }
    }
  }
  for (size_t i = 0; i < asked.size(); ++i) {
    auto it = sessions_.find(asked[i]);
    if (it == sessions_.end()) continue;
    Session* s = it->second.get();
    after->sends.emplace_back(s->sink,
                              Pressure{device, asked_bytes[i], reason});
    ++s->pressure_outstanding;
    ++pressure_sent_;
    VLogf("asking %s for %s on device %d: %s",
          SessionLabel(s->id, s->name, s->peer.pid),
          FormatBytes(asked_bytes[i]), device, reason);
  }
  return asked;
}

// --- Leases ------------------------------------------------------------------

absl::StatusOr<LeaseGrant> Lake::Lease(uint64_t session,
                                       absl::string_view token, int device,
                                       uint64_t count) {
  LeaseWait wait;
  wait.deadline = absl::Now() + options_.reclaim_timeout;
  wait.reclaim_first = options_.prefer_reclaim;
  InFlightLease lease;
  // Every step holds the lock in its own scope; pressure requests and
  // session hooks run between steps, without it.
  for (;;) {
    Aftermath after;
    absl::StatusOr<bool> reserved;
    {
      MutexLock lock(&mu_);
      reserved = AdmitLeaseLocked(session, token, device, count, &wait, &lease,
                                  &after);
      if (!reserved.ok()) {
        ++leases_failed_;
        NotePressureWaitLocked(wait.pressure_since);
      }
      if (!reserved.ok() || *reserved) StopWaitingLocked(&wait);
    }
    after.Run(backend_);
    if (!reserved.ok()) return reserved.status();
    if (*reserved) break;
  }

  // The slow work, without the lock: the chunks are the lease's alone
  // (reserved or scrubbing), so nothing else touches them meanwhile.
  if (!lease.dirty.empty() && options_.testonly_before_lease_scrub) {
    options_.testonly_before_lease_scrub();
  }
  absl::Status scrubbed = Scrub(lease.device, lease.dirty_handles);
  std::vector<std::unique_ptr<ChunkRec>> made;
  absl::Status created = absl::OkStatus();
  if (scrubbed.ok()) {
    created = CreateChunks(lease.device, lease.to_create, &made);
  }
  // A driver that cannot export says little (CUDA_ERROR_OPERATING_SYSTEM):
  // when the daemon is out of descriptors, that is the cause to name.
  const FdUsage fds = created.ok() ? FdUsage{} : CurrentFdUsage();

  MutexLock lock(&mu_);
  absl::StatusOr<LeaseGrant> grant =
      FinishLeaseLocked(&lease, scrubbed, created, fds, std::move(made));
  NotePressureWaitLocked(wait.pressure_since);
  return grant;
}

absl::StatusOr<bool> Lake::AdmitLeaseLocked(uint64_t session,
                                            absl::string_view token, int device,
                                            uint64_t count, LeaseWait* wait,
                                            InFlightLease* lease,
                                            Aftermath* after) {
  for (;;) {
    if (shutting_down_)
      return absl::UnavailableError("gmlaked is shutting down");
    absl::StatusOr<Session*> found = FindLocked(session, token);
    if (!found.ok()) {
      if (wait->admitted_once &&
          found.status().code() == absl::StatusCode::kNotFound) {
        return absl::AbortedError(absl::StrFormat(
            "session %d ended while its lease waited", session));
      }
      return found.status();
    }
    wait->admitted_once = true;
    Session* s = *found;
    if (!s->bound) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "session %d is not bound: connect to the fd socket %s and bind it "
          "before leasing",
          session, options_.fd_socket_path));
    }
    if (device < 0 || device >= static_cast<int>(devices_.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "device %d does not exist: gmlaked serves devices 0..%d", device,
          devices_.size() - 1));
    }
    if (count == 0) return absl::InvalidArgumentError("a lease of 0 chunks");
    Device& d = devices_[device];
    const size_t size = d.config.chunk_size;
    const std::string label = SessionLabel(session, s->name, s->peer.pid);
    if (count > d.capacity_chunks) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "lease of %d chunks (%s) on device %d is more than the lake's whole "
          "capacity there, %d chunks (%s, --capacity)",
          count, FormatBytes(count * size), device, d.capacity_chunks,
          FormatBytes(d.capacity_chunks * size)));
    }
    const uint64_t bytes = count * size;
    const int64_t uid = s->peer.uid;
    // Quotas count what the session and uid hold, including leases of
    // theirs still in flight.
    const uint64_t session_bytes = s->leased_bytes + s->in_flight_bytes;
    if (options_.session_quota_bytes > 0 &&
        session_bytes + bytes > options_.session_quota_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "lease of %s would put %s at %s, over its quota of %s "
          "(--session_quota)",
          FormatBytes(bytes), label, FormatBytes(session_bytes + bytes),
          FormatBytes(options_.session_quota_bytes)));
    }
    if (options_.uid_quota_bytes > 0 &&
        UidBytesLocked(uid) + bytes > options_.uid_quota_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "lease of %s would put uid %d at %s, over its quota of %s "
          "(--uid_quota)",
          FormatBytes(bytes), uid, FormatBytes(UidBytesLocked(uid) + bytes),
          FormatBytes(options_.uid_quota_bytes)));
    }
    const uint64_t room = d.capacity_chunks - d.created - d.creating;
    const uint64_t available = d.free + (wait->reclaim_first ? 0 : room);
    if (available >= count) {
      lease->session = session;
      lease->uid = uid;
      lease->device = device;
      lease->count = count;
      lease->label = label;
      ReserveLocked(s, lease);
      return true;
    }
    const uint64_t short_bytes = (count - available) * size;
    auto describe = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return absl::StrFormat(
          "lease of %d chunks (%s) on device %d for %s: the lake has %s "
          "free and %s of capacity left (%s in all, %s leased to %d "
          "sessions)",
          count, FormatBytes(bytes), device, label, FormatBytes(d.free * size),
          FormatBytes(room * size), FormatBytes(d.capacity_chunks * size),
          FormatBytes((d.leased + d.reserved) * size), HoldersLocked(device));
    };
    // Ask sessions for memory: first round at once, and another round
    // (sessions not asked yet) whenever everyone asked so far has answered
    // (reported usage after handling the request, or ended) and it is
    // still not enough.
    bool all_answered = true;
    for (size_t i = 0; i < wait->asked.size(); ++i) {
      auto a = sessions_.find(wait->asked[i]);
      if (a != sessions_.end() && a->second->reports < wait->answer_due[i]) {
        all_answered = false;
      }
    }
    if (all_answered) {
      // From here the lease waits for answers, holding its thread.
      if (absl::Status may = StartWaitingLocked(uid, wait); !may.ok()) {
        if (wait->reclaim_first) {  // do not wait: create what is missing
          wait->reclaim_first = false;
          continue;
        }
        return absl::ResourceExhaustedError(
            absl::StrCat(describe(), "; ", may.message()));
      }
      std::vector<uint64_t> more =
          SendPressureLocked(*s, device, short_bytes, wait->asked, after);
      if (more.empty()) {
        if (wait->reclaim_first) {  // nobody (else) to ask: create the rest
          wait->reclaim_first = false;
          continue;
        }
        return absl::ResourceExhaustedError(
            wait->asked.empty()
                ? absl::StrCat(describe(),
                               "; no other session holds memory there to "
                               "ask for")
                : absl::StrFormat("%s; asked %d other sessions to return "
                                  "memory and they returned less",
                                  describe(), wait->asked.size()));
      }
      for (uint64_t id : more) {
        auto a = sessions_.find(id);
        wait->asked.push_back(id);
        // Its answers to requests sent earlier (maybe for other leases)
        // come first; they are not this lease's.
        wait->answer_due.push_back(a == sessions_.end()
                                       ? 0
                                       : a->second->reports +
                                             a->second->pressure_outstanding);
      }
      ++pressure_rounds_;
      if (wait->pressure_since == absl::InfiniteFuture()) {
        wait->pressure_since = absl::Now();
      }
      return false;  // send without the lock, then look again
    }
    if (absl::Now() >= wait->deadline) {
      if (wait->reclaim_first) {  // they gave what they gave: create the rest
        wait->reclaim_first = false;
        continue;
      }
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s; asked %d other sessions to return memory and they did not "
          "return enough within %s (--reclaim_timeout)",
          describe(), wait->asked.size(),
          absl::FormatDuration(options_.reclaim_timeout)));
    }
    freed_.WaitWithDeadline(&mu_, wait->deadline);
  }
}

absl::Status Lake::StartWaitingLocked(int64_t uid, LeaseWait* wait) {
  if (wait->waiting) return absl::OkStatus();
  auto it = waiting_by_uid_.find(uid);
  const size_t of_uid = it == waiting_by_uid_.end() ? 0 : it->second;
  if (of_uid >= options_.max_waiting_leases_per_uid) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%d leases of uid %d already wait for memory, gmlaked's limit per "
        "uid (--max_waiting_leases_per_uid): retry once some are served",
        of_uid, uid));
  }
  if (waiting_leases_ >= options_.max_waiting_leases) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d leases already wait for memory, gmlaked's limit "
                        "(--max_waiting_leases): retry once some are served",
                        waiting_leases_));
  }
  ++waiting_by_uid_[uid];
  ++waiting_leases_;
  wait->waiting = true;
  wait->waiting_uid = uid;
  return absl::OkStatus();
}

void Lake::StopWaitingLocked(LeaseWait* wait) {
  if (!wait->waiting) return;
  wait->waiting = false;
  --waiting_leases_;
  auto it = waiting_by_uid_.find(wait->waiting_uid);
  if (it != waiting_by_uid_.end() && --it->second == 0) {
    waiting_by_uid_.erase(it);
  }
}

void Lake::ReserveLocked(Session* s, InFlightLease* lease) {
  Device& d = devices_[lease->device];
  lease->id = next_lease_++;
  TakeFreeLocked(lease->device, lease->uid, lease->count, &lease->clean,
                 &lease->dirty);
  lease->to_create = lease->count - lease->clean.size() - lease->dirty.size();
  d.creating += lease->to_create;
  for (uint64_t id : lease->clean) {
    ChunkRec* c = FindChunkLocked(id);
    c->state = ChunkState::kReserved;
    c->lease = lease->id;
    ++d.reserved;
  }
  for (uint64_t id : lease->dirty) {
    ChunkRec* c = FindChunkLocked(id);
    c->state = ChunkState::kScrubbing;
    c->lease = lease->id;
    ++d.scrubbing;
    lease->dirty_handles.push_back(c->handle);
  }
  // The session and its uid are charged for the whole lease now, so that
  // concurrent leases see it against their quotas.
  const uint64_t bytes = lease->count * d.config.chunk_size;
  s->in_flight_bytes += bytes;
  uid_bytes_[lease->uid] += bytes;
}

absl::StatusOr<LeaseGrant> Lake::FinishLeaseLocked(
    InFlightLease* lease, const absl::Status& scrubbed,
    const absl::Status& created, const FdUsage& fds,
    std::vector<std::unique_ptr<ChunkRec>> made) {
  Device& d = devices_[lease->device];
  const size_t size = d.config.chunk_size;
  const uint64_t bytes = lease->count * size;
  d.creating -= lease->to_create;
  std::vector<uint64_t> made_ids;
  for (auto& c : made) {
    c->id = next_chunk_++;
    c->state = ChunkState::kReserved;
    c->lease = lease->id;
    ++d.created;
    ++d.reserved;
    made_ids.push_back(c->id);
    chunks_[c->id] = std::move(c);
  }
  // The lease's chunks, each still held by it as it left them. Nothing
  // else takes a reserved or scrubbing chunk, so a miss is a bug: it is
  // logged and the chunk left alone, never freed or granted blindly.
  std::vector<ChunkRec*> mine;
  mine.reserve(lease->count);
  for (const std::vector<uint64_t>* ids :
       {&lease->clean, &lease->dirty, &made_ids}) {
    for (uint64_t id : *ids) {
      ChunkRec* c = FindChunkLocked(id);
      if (c == nullptr || c->lease != lease->id ||
          (c->state != ChunkState::kReserved &&
           c->state != ChunkState::kScrubbing)) {
        Errorf(
            "internal error: chunk %d of lease %d is no longer held by the "
            "lease; left alone",
            id, lease->id);
        continue;
      }
      mine.push_back(c);
    }
  }
  auto it = sessions_.find(lease->session);
  Session* s = it == sessions_.end() ? nullptr : it->second.get();
  absl::Status failure = absl::OkStatus();
  if (!scrubbed.ok()) {
    failure = absl::InternalError(absl::StrFormat(
        "zeroing %d chunks on device %d for %s failed: %s", lease->dirty.size(),
        lease->device, lease->label, scrubbed.message()));
  } else if (!created.ok() && OutOfDescriptors(fds)) {
    failure = absl::ResourceExhaustedError(absl::StrFormat(
        "creating %d chunks on device %d for %s failed: %s (%s)",
        lease->to_create, lease->device, lease->label,
        DescribeOutOfDescriptors(fds), created.message()));
  } else if (!created.ok()) {
    failure = absl::Status(
        created.code(),
        absl::StrFormat("creating %d chunks on device %d for %s failed "
                        "(the device may hold less than --capacity): %s",
                        lease->to_create, lease->device, lease->label,
                        created.message()));
  } else if (shutting_down_) {
    failure = absl::UnavailableError("gmlaked is shutting down");
  } else if (s == nullptr) {
    failure = absl::AbortedError(absl::StrFormat(
        "session %d ended while its lease was being served", lease->session));
  } else if (mine.size() != lease->count) {
    failure = absl::InternalError(absl::StrFormat(
        "lease %d for %s lost %d of its %d chunks (a gmlaked bug; see its "
        "log)",
        lease->id, lease->label, lease->count - mine.size(), lease->count));
  }
  // The whole lease leaves the in-flight accounts either way.
  if (s != nullptr) {
    s->in_flight_bytes -= std::min(s->in_flight_bytes, bytes);
  }
  if (!failure.ok()) {
    // Back to free: zeroed chunks as fresh, the others as they were.
    for (ChunkRec* c : mine) {
      const bool zeroed = c->state == ChunkState::kScrubbing && scrubbed.ok();
      (c->state == ChunkState::kScrubbing ? d.scrubbing : d.reserved) -= 1;
      c->state = ChunkState::kFree;
      c->lease = 0;
      c->free_since = absl::Now();
      if (zeroed) c->last_uid = kNoUid;
      ++d.free;
      d.free_by_uid[c->last_uid].push_back(c->id);
    }
    UnchargeUidLocked(lease->uid, bytes);
    ++leases_failed_;
    freed_.SignalAll();
    Warnf("lease failed: %s", failure.message());
    return failure;
  }
  for (ChunkRec* c : mine) {
    (c->state == ChunkState::kScrubbing ? d.scrubbing : d.reserved) -= 1;
    ++d.leased;
    c->state = ChunkState::kLeased;
    c->lease = 0;
    c->session = s->id;
    c->last_uid = lease->uid;
    s->chunks.insert(c->id);
  }
  s->leased_chunks_by_device[lease->device] += mine.size();
  s->leased_bytes += bytes;
  chunks_scrubbed_ += lease->dirty.size();
  zeroed_bytes_ += lease->dirty.size() * size;
  LeaseGrant grant;
  grant.lease_id = lease->id;
  grant.device = lease->device;
  grant.chunk_size = size;
  grant.chunk_ids.reserve(mine.size());
  for (ChunkRec* c : mine) grant.chunk_ids.push_back(c->id);
  s->unclaimed[grant.lease_id] = {grant.chunk_ids, absl::Now()};
  lease_owner_[grant.lease_id] = s->id;
  ++leases_served_;
  VLogf("lease %d: %d chunks (%s) on device %d to %s (%d zeroed, %d new)",
        grant.lease_id, lease->count, FormatBytes(bytes), lease->device,
        lease->label, lease->dirty.size(), made_ids.size());
  return grant;
}

Lake::ChunkRec* Lake::FindChunkLocked(uint64_t id) const {
  auto it = chunks_.find(id);
  return it == chunks_.end() ? nullptr : it->second.get();
}

void Lake::UnchargeUidLocked(int64_t uid, uint64_t bytes) {
  auto u = uid_bytes_.find(uid);
  if (u == uid_bytes_.end()) return;
  u->second -= std::min(u->second, bytes);
  if (u->second == 0) uid_bytes_.erase(u);
}

absl::StatusOr<std::vector<uint64_t>> Lake::Claim(uint64_t session,
                                                  absl::string_view token,
                                                  uint64_t lease_id) {
  MutexLock lock(&mu_);
  absl::StatusOr<Session*> found = FindLocked(session, token);
  if (!found.ok()) return found.status();
  auto owner = lease_owner_.find(lease_id);
  if (owner == lease_owner_.end()) {
    return absl::NotFoundError(absl::StrFormat(
        "lease %d is unknown: never granted, claimed already, or expired "
        "unclaimed (--claim_timeout)",
        lease_id));
  }
  if (owner->second != session) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "lease %d belongs to another session, not to session %d", lease_id,
        session));
  }
  Session* s = *found;
  auto pending = s->unclaimed.find(lease_id);
  if (pending == s->unclaimed.end()) {
    lease_owner_.erase(owner);
    return absl::NotFoundError(
        absl::StrFormat("lease %d was claimed already", lease_id));
  }
  std::vector<uint64_t> ids = std::move(pending->second.chunk_ids);
  s->unclaimed.erase(pending);
  lease_owner_.erase(owner);
  return ids;
}

absl::Status Lake::CheckLeasedToLocked(
    uint64_t session, absl::Span<const uint64_t> chunk_ids) const {
  for (uint64_t id : chunk_ids) {
    auto it = chunks_.find(id);
    if (it == chunks_.end() || it->second->session != session ||
        it->second->state != ChunkState::kLeased) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "chunk %d is no longer leased to session %d (returned before its "
          "lease was claimed?)",
          id, session));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<UniqueFd>> Lake::DupChunkFds(
    uint64_t session, absl::Span<const uint64_t> chunk_ids) {
  std::vector<UniqueFd> fds;
  fds.reserve(chunk_ids.size());
  if (!options_.export_on_demand) {
    MutexLock lock(&mu_);
    absl::Status leased = CheckLeasedToLocked(session, chunk_ids);
    if (!leased.ok()) return leased;
    for (uint64_t id : chunk_ids) {
      const int fd = ::fcntl(chunks_.at(id)->fd.get(), F_DUPFD_CLOEXEC, 0);
      if (fd < 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "duplicating a chunk descriptor: ", std::strerror(errno),
            " (raise gmlaked's LimitNOFILE)"));
      }
      fds.emplace_back(fd);
    }
    return fds;
  }
  // Pinned (exporting > 0) so that a Return and a Trim meanwhile cannot
  // release the handle under the export; exported without the lock.
  std::vector<ChunkHandle> handles;
  {
    MutexLock lock(&mu_);
    absl::Status leased = CheckLeasedToLocked(session, chunk_ids);
    if (!leased.ok()) return leased;
    for (uint64_t id : chunk_ids) {
      ChunkRec* c = chunks_.at(id).get();
      ++c->exporting;
      handles.push_back(c->handle);
    }
  }
  absl::Status exported = absl::OkStatus();
  for (ChunkHandle h : handles) {
    absl::StatusOr<UniqueFd> fd = backend_->ExportChunk(h);
    if (!fd.ok()) {
      exported = fd.status();
      break;
    }
    fds.push_back(*std::move(fd));
  }
  const FdUsage usage = exported.ok() ? FdUsage{} : CurrentFdUsage();
  MutexLock lock(&mu_);
  for (uint64_t id : chunk_ids) --chunks_.at(id)->exporting;
  if (!exported.ok()) {
    if (OutOfDescriptors(usage)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "exporting chunks for session ", session, ": ",
          DescribeOutOfDescriptors(usage), " (", exported.message(), ")"));
    }
    return absl::Status(exported.code(),
                        absl::StrCat("exporting chunks for session ", session,
                                     ": ", exported.message()));
  }
  // Returned while they were exported: not the session's to have.
  absl::Status leased = CheckLeasedToLocked(session, chunk_ids);
  if (!leased.ok()) return leased;
  return fds;
}

absl::StatusOr<uint64_t> Lake::Return(uint64_t session, absl::string_view token,
                                      absl::Span<const uint64_t> chunk_ids) {
  MutexLock lock(&mu_);
  absl::StatusOr<Session*> found = FindLocked(session, token);
  if (!found.ok()) return found.status();
  Session* s = *found;
  absl::flat_hash_set<uint64_t> seen;
  std::vector<ChunkRec*> returning;
  returning.reserve(chunk_ids.size());
  for (uint64_t id : chunk_ids) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chunk %d is listed twice; nothing was returned", id));
    }
    ChunkRec* c = FindChunkLocked(id);
    if (c == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chunk %d does not exist; nothing was returned", id));
    }
    if (c->state != ChunkState::kLeased || c->session != session) {
      absl::string_view what = "another session's";
      if (c->state == ChunkState::kFree) what = "free";
      if (c->state == ChunkState::kReserved ||
          c->state == ChunkState::kScrubbing) {
        what = "in a lease still being served, not granted yet";
      }
      return absl::InvalidArgumentError(absl::StrFormat(
          "chunk %d is not leased to session %d (it is %s); nothing was "
          "returned",
          id, session, what));
    }
    returning.push_back(c);
  }
  uint64_t bytes = 0;
  for (ChunkRec* c : returning) {
    bytes += devices_[c->device].config.chunk_size;
    FreeChunkLocked(c, c->last_uid);
  }
  // Returned before being claimed: they leave their pending lease.
  for (auto& [lease, pending] : s->unclaimed) {
    auto& ids = pending.chunk_ids;
    ids.erase(std::remove_if(ids.begin(), ids.end(),
                             [&](uint64_t id) { return seen.contains(id); }),
              ids.end());
  }
  return bytes;
}

// --- Operators ---------------------------------------------------------------

std::pair<uint64_t, uint64_t> Lake::Trim(int device, uint64_t bytes) {
  std::vector<std::unique_ptr<ChunkRec>> gone;
  uint64_t released = 0;
  {
    MutexLock lock(&mu_);
    for (int i = 0; i < static_cast<int>(devices_.size()); ++i) {
      if (device >= 0 && i != device) continue;
      Device& d = devices_[i];
      const size_t size = d.config.chunk_size;
      // Chunks that would need zeroing before reuse go first.
      std::vector<int64_t> order;
      for (const auto& [uid, list] : d.free_by_uid) {
        if (uid != kNoUid) order.push_back(uid);
      }
      order.push_back(kNoUid);
      for (int64_t uid : order) {
        auto it = d.free_by_uid.find(uid);
        if (it == d.free_by_uid.end()) continue;
        auto& list = it->second;
        std::vector<uint64_t> busy;  // being exported: not now
        while (!list.empty() && (bytes == 0 || released + size <= bytes)) {
          auto c = chunks_.find(list.back());
          list.pop_back();
          if (c == chunks_.end() || c->second->state != ChunkState::kFree) {
            Errorf(
                "internal error: chunk %d on a free list is not free; "
                "dropped from the list",
                c == chunks_.end() ? 0 : c->first);
            continue;
          }
          if (c->second->exporting > 0) {
            busy.push_back(c->first);
            continue;
          }
          gone.push_back(std::move(c->second));
          chunks_.erase(c);
          --d.free;
          --d.created;
          released += size;
        }
        list.insert(list.end(), busy.rbegin(), busy.rend());
        if (list.empty()) d.free_by_uid.erase(it);
      }
    }
    if (!gone.empty()) freed_.SignalAll();  // capacity to create anew
    trimmed_bytes_ += released;
  }
  const uint64_t chunks = gone.size();
  ReleaseToDriver(std::move(gone));
  if (chunks > 0) {
    Noticef("trim: released %d chunks (%s) to the driver", chunks,
            FormatBytes(released));
  }
  return {released, chunks};
}

void Lake::ReleaseToDriver(std::vector<std::unique_ptr<ChunkRec>> gone) {
  if (options_.scrub != ScrubPolicy::kNever) {
    std::map<int, std::vector<ChunkHandle>> dirty;
    for (const auto& c : gone) {
      if (c->last_uid != kNoUid) dirty[c->device].push_back(c->handle);
    }
    uint64_t zeroed = 0;
    for (const auto& [device, handles] : dirty) {
      absl::Status s = Scrub(device, handles);
      if (!s.ok()) {
        Warnf("zeroing %d chunks on device %d before release: %s",
              handles.size(), device, s.ToString());
      } else {
        zeroed += handles.size() * options_.devices[device].chunk_size;
      }
    }
    if (zeroed > 0) {
      MutexLock lock(&mu_);
      zeroed_bytes_ += zeroed;
    }
  }
  for (auto& c : gone) {
    absl::Status s = backend_->ReleaseChunk(c->handle);
    if (!s.ok()) Warnf("releasing chunk %d: %s", c->id, s.ToString());
  }
}

DeviceHoldings Lake::HoldingsLocked(int device) const {
  const Device& d = devices_[device];
  DeviceHoldings h;
  h.created_chunks = d.created;
  h.floor_chunks = d.config.precreate_bytes / d.config.chunk_size;
  h.free.reserve(d.free);
  for (const auto& [uid, list] : d.free_by_uid) {
    for (uint64_t id : list) {
      const ChunkRec& c = *chunks_.at(id);
      // One being exported (returned meanwhile) waits for the next round.
      if (c.exporting == 0) h.free.push_back({id, c.free_since});
    }
  }
  return h;
}

std::pair<uint64_t, uint64_t> Lake::ReleaseIdle(absl::Time now) {
  if (!options_.release.enabled()) return {0, 0};
  std::vector<std::unique_ptr<ChunkRec>> gone;
  uint64_t released = 0;
  std::vector<std::string> lines;
  {
    MutexLock lock(&mu_);
    if (shutting_down_) return {0, 0};
    for (int i = 0; i < static_cast<int>(devices_.size()); ++i) {
      Device& d = devices_[i];
      // Most rounds: nothing free above the floor, nothing to look at.
      if (d.free == 0 ||
          d.created * d.config.chunk_size <= d.config.precreate_bytes) {
        continue;
      }
      const ReleasePlan plan =
          PlanRelease(options_.release, HoldingsLocked(i), now);
      if (plan.release.empty()) continue;
      absl::flat_hash_set<uint64_t> going(plan.release.begin(),
                                          plan.release.end());
      for (auto it = d.free_by_uid.begin(); it != d.free_by_uid.end();) {
        std::vector<uint64_t>& list = it->second;
        list.erase(
            std::remove_if(list.begin(), list.end(),
                           [&](uint64_t id) { return going.contains(id); }),
            list.end());
        if (list.empty()) {
          d.free_by_uid.erase(it++);
        } else {
          ++it;
        }
      }
      for (uint64_t id : plan.release) {
        auto c = chunks_.find(id);
        gone.push_back(std::move(c->second));
        chunks_.erase(c);
      }
      const uint64_t bytes = plan.release.size() * d.config.chunk_size;
      d.free -= plan.release.size();
      d.created -= plan.release.size();
      released += bytes;
      lines.push_back(absl::StrFormat(
          "device %d: released %d chunks (%s) free for %s or more to the "
          "driver (--release_idle); %s still created",
          i, plan.release.size(), FormatBytes(bytes),
          absl::FormatDuration(options_.release.idle_after),
          FormatBytes(d.created * d.config.chunk_size)));
    }
    if (gone.empty()) return {0, 0};
    released_idle_bytes_ += released;
    freed_.SignalAll();  // capacity to create anew
  }
  const uint64_t chunks = gone.size();
  ReleaseToDriver(std::move(gone));
  for (const std::string& line : lines) Noticef("%s", line);
  return {released, chunks};
}

void Lake::NotePressureWaitLocked(absl::Time since) {
  if (since == absl::InfiniteFuture()) return;
  pressure_wait_.Observe(absl::ToDoubleSeconds(absl::Now() - since));
}

void Lake::FillStatus(v1::StatusResponse* out) const {
  MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  out->set_backend(std::string(backend_->name()));
  out->set_backend_description(backend_->Describe());
  out->set_uptime_seconds(absl::ToDoubleSeconds(now - started_));
  out->set_leases_served(leases_served_);
  out->set_leases_failed(leases_failed_);
  out->set_pressure_requests_sent(pressure_sent_);
  out->set_chunks_scrubbed(chunks_scrubbed_);
  out->set_sessions_ended(sessions_ended_);
  out->set_scrub_policy(std::string(ScrubPolicyName(options_.scrub)));
  out->set_uid_quota_bytes(options_.uid_quota_bytes);
  out->set_session_quota_bytes(options_.session_quota_bytes);
  out->set_release_idle_seconds(
      absl::ToDoubleSeconds(options_.release.idle_after));
  out->set_released_idle_bytes(released_idle_bytes_);
  out->set_trimmed_bytes(trimmed_bytes_);
  out->set_zeroed_bytes(zeroed_bytes_);
  out->set_reclaimed_bytes(reclaimed_bytes_);
  out->set_pressure_rounds(pressure_rounds_);
  v1::Histogram* wait = out->mutable_pressure_wait_seconds();
  for (double b : pressure_wait_.upper_bounds()) wait->add_upper_bounds(b);
  for (uint64_t c : pressure_wait_.CumulativeCounts()) {
    wait->add_cumulative_counts(c);
  }
  wait->set_sum(pressure_wait_.sum());
  wait->set_count(pressure_wait_.count());
  for (size_t i = 0; i < devices_.size(); ++i) {
    const Device& d = devices_[i];
    const uint64_t size = d.config.chunk_size;
    v1::DeviceStatus* ds = out->add_devices();
    ds->set_device(static_cast<int>(i));
    ds->set_chunk_size(size);
    ds->set_capacity_bytes(d.capacity_chunks * size);
    ds->set_created_bytes(d.created * size);
    // Chunks of leases in flight count as leased.
    ds->set_leased_bytes((d.leased + d.reserved) * size);
    ds->set_free_bytes(d.free * size);
    ds->set_scrubbing_bytes(d.scrubbing * size);
    ds->set_creating_bytes(d.creating * size);
    ds->set_created_chunks(d.created);
    ds->set_leased_chunks(d.leased + d.reserved);
    ds->set_free_chunks(d.free);
    ds->set_scrubbing_chunks(d.scrubbing);
    // Why the free chunks are still held: the floor, or not idle long
    // enough yet.
    ds->set_floor_bytes(d.config.precreate_bytes);
    const ReleasePlan plan =
        PlanRelease(options_.release, HoldingsLocked(i), now);
    ds->set_floor_kept_bytes(plan.floor_kept_chunks * size);
    ds->set_idle_bytes((plan.release.size() + plan.later_chunks) * size);
    ds->set_next_release_seconds(
        !plan.release.empty() ? 0
        : plan.next_due == absl::InfiniteFuture()
            ? -1
            : absl::ToDoubleSeconds(plan.next_due - now));
  }
  for (const auto& [id, s] : orphans_) {
    for (const auto& [dev, n] : s->leased_chunks_by_device) {
      v1::DeviceStatus* ds = out->mutable_devices(dev);
      ds->set_ending_bytes(ds->ending_bytes() +
                           n * devices_[dev].config.chunk_size);
    }
  }
  std::vector<const Session*> list;
  for (const auto& [id, s] : sessions_) list.push_back(s.get());
  for (const auto& [id, s] : orphans_) list.push_back(s.get());
  std::sort(list.begin(), list.end(),
            [](const Session* a, const Session* b) { return a->id < b->id; });
  for (const Session* s : list) {
    v1::SessionStatus* ss = out->add_sessions();
    ss->set_session_id(s->id);
    ss->set_pid(s->bound ? s->peer.pid : s->claimed_pid);
    ss->set_uid(s->bound ? static_cast<int64_t>(s->peer.uid) : -1);
    ss->set_gid(s->bound ? static_cast<int64_t>(s->peer.gid) : -1);
    ss->set_name(s->name);
    ss->set_bound(s->bound);
    ss->set_watching(s->sink != nullptr);
    ss->set_leased_chunks(s->chunks.size());
    ss->set_leased_bytes(s->leased_bytes + s->in_flight_bytes);
    ss->set_age_seconds(absl::ToDoubleSeconds(now - s->opened));
    ss->set_ending(s->ended);
    ss->set_end_reason(s->end_reason);
    for (const auto& [dev, u] : s->usage) {
      v1::DeviceUsage* du = ss->add_usage();
      du->set_device(dev);
      du->set_used_bytes(u.used_bytes);
      du->set_cached_bytes(u.cached_bytes);
    }
    for (const auto& [dev, n] : s->leased_chunks_by_device) {
      if (n == 0) continue;
      v1::DeviceLeased* dl = ss->add_leased();
      dl->set_device(dev);
      dl->set_chunks(n);
      dl->set_bytes(n * devices_[dev].config.chunk_size);
    }
  }
}

}  // namespace gmlake
