// Copyright 2026 The GMLake Authors.
//
// The Lake's construction, sessions and liveness, and operator calls. The
// lease path is in lake_lease.cc.

#include "daemon/lake.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/bytes.h"
#include "common/mutex.h"
#include "daemon/log.h"
#include "daemon/session_token.h"

namespace gmlake {
namespace {

std::vector<ChunkBooksDevice> BooksDevices(const LakeOptions& options) {
  std::vector<ChunkBooksDevice> out;
  for (const LakeDeviceConfig& c : options.devices) {
    // Capacity in whole units.
    out.push_back(
        {c.chunk_size, c.capacity_bytes / c.chunk_size * c.chunk_size});
  }
  return out;
}

SessionLimits Limits(const LakeOptions& o) {
  SessionLimits l;
  l.max_sessions = o.max_sessions;
  l.max_per_uid = o.max_sessions_per_uid;
  l.max_unbound = o.max_unbound_sessions;
  l.unbound_eviction_age = o.unbound_eviction_age;
  l.bind_timeout = o.bind_timeout;
  l.claim_timeout = o.claim_timeout;
  l.check_claimed_pid = o.check_claimed_pid;
  return l;
}

void FillHistogram(const Histogram& h, v1::Histogram* out) {
  for (double b : h.upper_bounds()) out->add_upper_bounds(b);
  for (uint64_t c : h.CumulativeCounts()) out->add_cumulative_counts(c);
  out->set_sum(h.sum());
  out->set_count(h.count());
}

}  // namespace

void Lake::Aftermath::Run() {
  for (auto& [sink, pressure] : sends) sink->Send(pressure);
  sends.clear();
  for (auto& [sink, status] : closes) sink->Close(status);
  closes.clear();
  for (auto& hook : hooks) hook();
  hooks.clear();
}

Lake::Lake(VmmBackend* backend, LakeOptions options)
    : backend_(backend),
      options_(std::move(options)),
      started_(absl::Now()),
      books_(BooksDevices(options_), options_.scrub),
      sessions_(Limits(options_)) {}

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
  absl::Status s = lake->Precreate();
  if (!s.ok()) return s;
  return lake;
}

absl::Status Lake::Precreate() {
  for (size_t i = 0; i < options_.devices.size(); ++i) {
    const LakeDeviceConfig& c = options_.devices[i];
    const uint64_t n = c.precreate_bytes / c.chunk_size;
    if (n == 0) continue;
    std::vector<ChunkBooks::MadeChunk> made;
    absl::Status s = CreateChunks(static_cast<int>(i), n, c.chunk_size,
                                  /*for_delivery=*/false, &made);
    if (!s.ok() && OutOfDescriptors(CurrentFdUsage())) {
      s = absl::ResourceExhaustedError(absl::StrCat(
          DescribeOutOfDescriptors(CurrentFdUsage()), " (", s.message(), ")"));
    }
    {
      MutexLock lock(&mu_);
      for (ChunkBooks::MadeChunk& m : made) {
        books_.AddFree(static_cast<int>(i), m.handle, c.chunk_size,
                       std::move(m.fd), m.identity);
      }
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
  std::vector<ChunkBooks::Released> all;
  {
    MutexLock lock(&mu_);
    all = books_.TakeAll();
  }
  for (const ChunkBooks::Released& c : all) {
    // Chunks still leased live on in their clients' imports: releasing our
    // handle only drops the daemon's reference, as with the driver.
    absl::Status s = backend_->ReleaseChunk(c.handle);
    if (!s.ok()) Warnf("releasing chunk %d failed: %s", c.id, s.ToString());
  }
}

void Lake::Shutdown() {
  Aftermath after;
  {
    MutexLock lock(&mu_);
    shutting_down_ = true;
    std::vector<uint64_t> ids;
    for (const auto& [id, s] : sessions_.live()) ids.push_back(id);
    for (uint64_t id : ids) {
      EndSessionLocked(id, "gmlaked is shutting down", EndKind::kShutdown,
                       &after);
    }
    std::vector<uint64_t> ended;
    for (const auto& [id, s] : sessions_.ended()) ended.push_back(id);
    for (uint64_t id : ended) {
      reclaimed_bytes_ += books_.FreeAll(id);
      sessions_.RemoveEnded(id);
    }
    freed_.SignalAll();
  }
  after.Run();
  ReleaseDropped();
}

// --- Sessions ----------------------------------------------------------------

absl::StatusOr<SessionTicket> Lake::OpenSession(
    pid_t claimed_pid, absl::string_view name,
    std::optional<uid_t> opener_uid) {
  if (claimed_pid <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pid ", claimed_pid, " is not a process id"));
  }
  // Drawn before the lock: it may wait for the kernel's entropy at boot.
  absl::StatusOr<std::string> token = NewSessionToken();
  if (!token.ok()) return token.status();
  Aftermath after;
  absl::StatusOr<SessionTicket> ticket;
  {
    MutexLock lock(&mu_);
    ticket = OpenSessionLocked(claimed_pid, name, opener_uid, *std::move(token),
                               &after);
  }
  after.Run();
  return ticket;
}

absl::StatusOr<SessionTicket> Lake::OpenSessionLocked(
    pid_t claimed_pid, absl::string_view name, std::optional<uid_t> opener_uid,
    std::string token, Aftermath* after) {
  if (shutting_down_) {
    return absl::UnavailableError("gmlaked is shutting down");
  }
  const absl::Time now = absl::Now();
  uint64_t evict = 0;
  if (absl::Status s = sessions_.CheckOpen(now, &evict); !s.ok()) return s;
  if (const Session* old = sessions_.Live(evict); old != nullptr) {
    EndSessionLocked(
        evict,
        absl::StrFormat("evicted unbound after %s: too many sessions were "
                        "waiting to be bound (--max_unbound_sessions)",
                        absl::FormatDuration(now - old->opened)),
        EndKind::kOther, after);
  }
  Session* s =
      sessions_.Add(claimed_pid, name, std::move(token), now, opener_uid);
  VLogf("%s opened", s->Label());
  return SessionTicket{s->id, s->token};
}

absl::Status Lake::CheckCaller(uint64_t session,
                               std::optional<uid_t> caller_uid) const {
  MutexLock lock(&mu_);
  const Session* s = sessions_.Live(session);
  return s == nullptr ? absl::OkStatus()
                      : SessionTable::CheckCaller(*s, caller_uid);
}

absl::Status Lake::Authenticate(uint64_t session,
                                absl::string_view token) const {
  MutexLock lock(&mu_);
  return sessions_.Find(session, token).status();
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
  after.Run();
  ReleaseDropped();
  return bound;
}

absl::Status Lake::BindSessionLocked(uint64_t session, absl::string_view token,
                                     const PeerIdentity& peer,
                                     std::function<void()> on_end,
                                     Aftermath* after) {
  absl::StatusOr<Session*> found = sessions_.Find(session, token);
  if (!found.ok()) return found.status();
  Session* s = *found;
  absl::Status may = sessions_.CheckBind(*s, peer);
  if (may.code() == absl::StatusCode::kResourceExhausted) {
    // Over the uid's cap: the session is of no use to anyone.
    EndSessionLocked(session, may.message(), EndKind::kOther, after);
  }
  if (!may.ok()) return may;
  sessions_.Bind(s, peer, std::move(on_end));
  VLogf("%s bound: uid %d gid %d", s->Label(), peer.uid, peer.gid);
  return absl::OkStatus();
}

absl::Status Lake::AttachWatcher(uint64_t session, absl::string_view token,
                                 std::shared_ptr<PressureSink> sink) {
  std::shared_ptr<PressureSink> old;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<Session*> found = sessions_.Find(session, token);
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
    Session* s = sessions_.Live(session);
    if (s == nullptr || s->sink.get() != sink) return;
    // The stream is gone: nothing to close.
    s->sink.reset();
    EndSessionLocked(session, "its Watch stream broke", EndKind::kOther,
                     &after);
  }
  after.Run();
  ReleaseDropped();
}

absl::Status Lake::ReportUsage(uint64_t session, absl::string_view token,
                               absl::Span<const DeviceUsageReport> usage,
                               bool answers_pressure) {
  MutexLock lock(&mu_);
  absl::StatusOr<Session*> found = sessions_.Find(session, token);
  if (!found.ok()) return found.status();
  Session* s = *found;
  for (const DeviceUsageReport& u : usage) {
    if (u.device < 0 || u.device >= books_.device_count()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "usage for device %d, which gmlaked does not serve (devices 0..%d)",
          u.device, books_.device_count() - 1));
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
    absl::StatusOr<Session*> found = sessions_.Find(session, token);
    if (!found.ok()) return found.status();
    bytes = EndSessionLocked(session, "closed by its client", EndKind::kClosed,
                             &after);
  }
  after.Run();
  ReleaseDropped();
  return bytes;
}

uint64_t Lake::EndSession(uint64_t session, absl::string_view reason) {
  Aftermath after;
  uint64_t bytes = 0;
  {
    MutexLock lock(&mu_);
    bytes = EndSessionLocked(session, reason, EndKind::kOther, &after);
  }
  after.Run();
  ReleaseDropped();
  return bytes;
}

uint64_t Lake::FreeChunksLocked(const Session& s,
                                absl::Span<const uint64_t> ids) {
  uint64_t bytes = 0;
  for (uint64_t id : ids) bytes += books_.Free(s.id, id);
  if (bytes > 0) freed_.SignalAll();
  return bytes;
}

uint64_t Lake::EndSessionLocked(uint64_t session, absl::string_view reason,
                                EndKind kind, Aftermath* after) {
  Session* live = sessions_.Live(session);
  if (live == nullptr) return 0;
  // Leases never claimed were never delivered: they go back whatever
  // happens to the rest.
  uint64_t returned = FreeChunksLocked(*live, sessions_.TakeUnclaimed(live));
  std::unique_ptr<Session> s = sessions_.Remove(session);
  ++sessions_ended_;
  if (s->sink != nullptr) {
    after->closes.emplace_back(
        std::move(s->sink),
        absl::CancelledError(absl::StrCat("session ended: ", reason)));
  }
  if (s->on_end) after->hooks.push_back(std::move(s->on_end));
  freed_.SignalAll();
  const std::string label = s->Label();
  // Its leases in flight are not its chunks yet: they put theirs back
  // themselves when they find the session gone.
  const uint64_t delivered = books_.holding(session).leased_chunks;
  if (kind == EndKind::kOther && s->bound && delivered > 0 &&
      s->process.Alive()) {
    // The process may still have these chunks mapped: leasing them to
    // another session would share its memory. They wait for its exit.
    Noticef(
        "%s ended: %s; its %d chunks stay leased until process %d exits "
        "(it may still use them)",
        label, reason, delivered, s->peer.pid);
    sessions_.KeepEnded(std::move(s), reason);
    return returned;
  }
  const uint64_t reclaimed = books_.FreeAll(session);
  reclaimed_bytes_ += reclaimed;
  returned += reclaimed;
  if (returned > 0 || !s->bound || VerboseLog()) {
    Logf("%s ended: %s; %s back in the lake", label, reason,
         FormatBytes(returned));
  }
  return returned;
}

int Lake::CheckLiveness() {
  Aftermath after;
  int ended = 0;
  {
    MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    // An unbound session has no process to wait for; a bound one here has
    // none left.
    for (const auto& [id, why] : sessions_.ToEnd(now)) {
      EndSessionLocked(id, why, EndKind::kProcessGone, &after);
      ++ended;
    }
    // Ended sessions whose process has exited since: their chunks go back.
    // (EndedAndDone calls `holds` before it returns, under this lock.)
    auto holds = [this](uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return books_.holding(id).leased_chunks > 0;
    };
    for (uint64_t id : sessions_.EndedAndDone(holds)) {
      std::unique_ptr<Session> s = sessions_.RemoveEnded(id);
      const uint64_t bytes = books_.FreeAll(id);
      reclaimed_bytes_ += bytes;
      freed_.SignalAll();
      Logf("%s: process %d exited; %s of its ended session back in the lake",
           s->Label(), s->peer.pid, FormatBytes(bytes));
    }
    // Leases nobody claimed: their chunks go back.
    for (const auto& [id, lease] : sessions_.ExpiredUnclaimed(now)) {
      Session* s = sessions_.Live(id);
      if (s == nullptr) continue;
      const uint64_t bytes =
          FreeChunksLocked(*s, sessions_.TakeUnclaimed(s, lease));
      Warnf("%s: lease %d was not claimed within %s; %s back in the lake",
            s->Label(), lease, absl::FormatDuration(options_.claim_timeout),
            FormatBytes(bytes));
    }
  }
  after.Run();
  ReleaseDropped();
  return ended;
}

// --- Operators ---------------------------------------------------------------

std::pair<uint64_t, uint64_t> Lake::Trim(int device, uint64_t bytes) {
  std::vector<ChunkBooks::Released> gone;
  uint64_t released = 0;
  {
    MutexLock lock(&mu_);
    for (int i = 0; i < books_.device_count(); ++i) {
      if (device >= 0 && i != device) continue;
      const uint64_t budget =
          bytes == 0 ? 0 : bytes - std::min(bytes, released);
      if (bytes != 0 && budget < books_.chunk_size(i)) continue;
      for (ChunkBooks::Released& c : books_.TakeFreeForTrim(i, budget)) {
        released += c.size;
        gone.push_back(std::move(c));
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

void Lake::ReleaseToDriver(std::vector<ChunkBooks::Released> gone) {
  if (options_.scrub != ScrubPolicy::kNever && !options_.zero_on_release) {
    // Zeroed when the daemon creates again, if ever: a job's end gives the
    // card back at the release speed (~19 us a 2 MiB chunk on an H200)
    // instead of paying ~90 us a chunk to map, fill and unmap it first.
    std::map<std::pair<int, int64_t>, uint64_t> dirty;
    for (const ChunkBooks::Released& c : gone) {
      if (c.held_data) dirty[{c.device, c.uid}] += c.size;
    }
    if (!dirty.empty()) {
      MutexLock lock(&mu_);
      for (const auto& [where, bytes] : dirty) {
        unzeroed_released_[where.first][where.second] += bytes;
      }
    }
  } else if (options_.scrub != ScrubPolicy::kNever) {
    // By device and size: one scratch mapping each.
    std::map<std::pair<int, uint64_t>, std::vector<ChunkHandle>> dirty;
    for (const ChunkBooks::Released& c : gone) {
      if (c.held_data) dirty[{c.device, c.size}].push_back(c.handle);
    }
    uint64_t zeroed = 0;
    for (const auto& [where, handles] : dirty) {
      const auto [dev, size] = where;
      absl::Status s = Scrub(dev, size, handles);
      if (!s.ok()) {
        Warnf("zeroing %d chunks on device %d before release: %s",
              handles.size(), dev, s.ToString());
      } else {
        zeroed += handles.size() * size;
      }
    }
    if (zeroed > 0) {
      MutexLock lock(&mu_);
      zeroed_bytes_ += zeroed;
    }
  }
  for (const ChunkBooks::Released& c : gone) {
    absl::Status s = backend_->ReleaseChunk(c.handle);
    if (!s.ok()) Warnf("releasing chunk %d: %s", c.id, s.ToString());
  }
}

DeviceHoldings Lake::HoldingsLocked(int device, uint64_t floor_bytes) const {
  DeviceHoldings h = books_.Holdings(device, floor_bytes);
  // A session still open may lease again soon (on any device: its devices
  // are its own to choose): its free chunks stay warm for idle_after.
  h.in_use = h.in_use || !sessions_.live().empty();
  return h;
}

// Takes up to `bytes` from `owed` (uid -> bytes), from the uids `pick`
// accepts; returns what it took, by uid.
template <typename Pick>
static std::map<int64_t, uint64_t> SettleOwed(std::map<int64_t, uint64_t>* owed,
                                              uint64_t bytes, Pick pick) {
  std::map<int64_t, uint64_t> took;
  for (auto it = owed->begin(); it != owed->end() && bytes > 0;) {
    if (!pick(it->first)) {
      ++it;
      continue;
    }
    const uint64_t t = std::min(bytes, it->second);
    took[it->first] = t;
    bytes -= t;
    it->second -= t;
    it = it->second == 0 ? owed->erase(it) : std::next(it);
  }
  return took;
}

absl::Status Lake::ZeroRecreated(
    int device, int64_t uid, uint64_t size,
    const std::vector<ChunkBooks::MadeChunk>& made) {
  size_t n = 0;
  std::map<int64_t, uint64_t> zeroing;
  {
    MutexLock lock(&mu_);
    auto it = unzeroed_released_.find(device);
    if (it == unzeroed_released_.end() || size == 0) return absl::OkStatus();
    const bool any_uid = options_.scrub == ScrubPolicy::kAlways;
    auto other = [&](int64_t u) { return any_uid || u != uid; };
    uint64_t others = 0;
    for (const auto& [u, bytes] : it->second) {
      if (other(u)) others += bytes;
    }
    n = std::min<uint64_t>(made.size(), (others + size - 1) / size);
    zeroing = SettleOwed(&it->second, n * size, other);
    // What else came back can have held only this uid's data.
    SettleOwed(&it->second, (made.size() - n) * size,
               [&](int64_t u) { return u == uid; });
    if (it->second.empty()) unzeroed_released_.erase(it);
  }
  if (n == 0) return absl::OkStatus();
  std::vector<ChunkHandle> handles;
  for (size_t i = 0; i < n; ++i) handles.push_back(made[i].handle);
  absl::Status s = Scrub(device, size, handles);
  MutexLock lock(&mu_);
  if (s.ok()) {
    zeroed_bytes_ += n * size;
    chunks_scrubbed_ += n;
  } else {
    for (const auto& [u, bytes] : zeroing) {
      unzeroed_released_[device][u] += bytes;  // still owed
    }
  }
  return s;
}

std::pair<uint64_t, uint64_t> Lake::ReleaseIdle(absl::Time now,
                                                bool only_without_sessions) {
  if (!options_.release.enabled()) return {0, 0};
  std::vector<ChunkBooks::Released> gone;
  uint64_t released = 0;
  std::vector<std::string> lines;
  {
    MutexLock lock(&mu_);
    if (shutting_down_) return {0, 0};
    if (only_without_sessions && !sessions_.live().empty()) return {0, 0};
    for (int i = 0; i < books_.device_count(); ++i) {
      const ChunkBooks::Counts c = books_.counts(i);
      const uint64_t floor = options_.devices[i].precreate_bytes;
      // Most rounds: nothing free above the floor, nothing to look at.
      if (c.free.chunks == 0 || c.created.bytes <= floor) continue;
      const DeviceHoldings holdings = HoldingsLocked(i, floor);
      const ReleasePlan plan = PlanRelease(options_.release, holdings, now);
      if (plan.release.empty()) continue;
      std::vector<ChunkBooks::Released> taken =
          books_.TakeFree(i, plan.release);
      uint64_t bytes = 0;
      for (const ChunkBooks::Released& r : taken) bytes += r.size;
      released += bytes;
      lines.push_back(absl::StrFormat(
          "device %d: released %d chunks (%s) %s to the driver "
          "(--release_idle); %s still created",
          i, taken.size(), FormatBytes(bytes),
          holdings.in_use
              ? absl::StrCat("free for ",
                             absl::FormatDuration(options_.release.idle_after),
                             " or more")
              : "free, with no session open,",
          FormatBytes(books_.counts(i).created.bytes)));
      for (ChunkBooks::Released& r : taken) gone.push_back(std::move(r));
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
  FillCountersLocked(now, out);
  for (int i = 0; i < books_.device_count(); ++i) {
    FillDeviceLocked(i, now, out->add_devices());
  }
  // Chunks of ended sessions that wait for their process to exit.
  for (const auto& [id, s] : sessions_.ended()) {
    for (const auto& [dev, n] : books_.holding(id).leased_by_device) {
      v1::DeviceStatus* ds = out->mutable_devices(dev);
      ds->set_ending_bytes(ds->ending_bytes() + n.bytes);
    }
  }
  std::vector<const Session*> list;
  for (const auto& [id, s] : sessions_.live()) list.push_back(s.get());
  for (const auto& [id, s] : sessions_.ended()) list.push_back(s.get());
  std::sort(list.begin(), list.end(),
            [](const Session* a, const Session* b) { return a->id < b->id; });
  for (const Session* s : list) FillSessionLocked(*s, now, out->add_sessions());
}

void Lake::FillCountersLocked(absl::Time now, v1::StatusResponse* out) const {
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
  FillHistogram(pressure_wait_, out->mutable_pressure_wait_seconds());
  FillHistogram(handoff_, out->mutable_handoff_seconds());
  out->set_recycled_bytes(recycled_bytes_);
  out->set_leased_chunks_total(leased_chunks_total_);
  out->set_leased_bytes_total(leased_bytes_total_);
  out->set_pressure_asked_bytes(pressure_asked_bytes_);
  out->set_pressure_promised_bytes(pressure_promised_bytes_);
  out->set_pressure_returned_bytes(pressure_returned_bytes_);
  out->set_pressure_undelivered(pressure_undelivered_);
  out->set_client_made_bytes_total(client_made_bytes_);
}

void Lake::FillDeviceLocked(int i, absl::Time now, v1::DeviceStatus* ds) const {
  const ChunkBooks::Counts c = books_.counts(i);
  ds->set_device(i);
  ds->set_chunk_size(books_.chunk_size(i));
  ds->set_capacity_bytes(books_.capacity_bytes(i));
  ds->set_created_bytes(c.created.bytes);
  // Chunks of leases in flight count as leased.
  ds->set_leased_bytes(c.leased.bytes + c.reserved.bytes);
  ds->set_free_bytes(c.free.bytes);
  ds->set_scrubbing_bytes(c.scrubbing.bytes);
  ds->set_creating_bytes(c.creating_bytes);
  ds->set_created_chunks(c.created.chunks);
  ds->set_leased_chunks(c.leased.chunks + c.reserved.chunks);
  ds->set_free_chunks(c.free.chunks);
  ds->set_scrubbing_chunks(c.scrubbing.chunks);
  // Why the free chunks are still held: the floor, or not idle long
  // enough yet.
  const uint64_t floor_bytes = options_.devices[i].precreate_bytes;
  ds->set_floor_bytes(floor_bytes);
  const ReleasePlan plan =
      PlanRelease(options_.release, HoldingsLocked(i, floor_bytes), now);
  ds->set_floor_kept_bytes(plan.floor_kept_bytes);
  ds->set_idle_bytes(plan.release_bytes + plan.later_bytes);
  ds->set_next_release_seconds(
      !plan.release.empty() ? 0
      : plan.next_due == absl::InfiniteFuture()
          ? -1
          : absl::ToDoubleSeconds(plan.next_due - now));
}

void Lake::FillSessionLocked(const Session& s, absl::Time now,
                             v1::SessionStatus* ss) const {
  const ChunkBooks::Holding h = books_.holding(s.id);
  ss->set_session_id(s.id);
  ss->set_pid(s.bound ? s.peer.pid : s.claimed_pid);
  ss->set_uid(s.bound ? static_cast<int64_t>(s.peer.uid) : -1);
  ss->set_gid(s.bound ? static_cast<int64_t>(s.peer.gid) : -1);
  ss->set_name(s.name);
  ss->set_bound(s.bound);
  ss->set_watching(s.sink != nullptr);
  ss->set_leased_chunks(h.leased_chunks);
  ss->set_leased_bytes(h.leased_bytes + h.in_flight_bytes);
  ss->set_age_seconds(absl::ToDoubleSeconds(now - s.opened));
  ss->set_ending(s.ended);
  ss->set_end_reason(s.end_reason);
  for (const auto& [dev, u] : s.usage) {
    v1::DeviceUsage* du = ss->add_usage();
    du->set_device(dev);
    du->set_used_bytes(u.used_bytes);
    du->set_cached_bytes(u.cached_bytes);
  }
  for (const auto& [dev, n] : h.leased_by_device) {
    if (n.chunks == 0) continue;
    v1::DeviceLeased* dl = ss->add_leased();
    dl->set_device(dev);
    dl->set_chunks(n.chunks);
    dl->set_bytes(n.bytes);
  }
}

}  // namespace gmlake
