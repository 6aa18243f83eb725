// Copyright 2026 The GMLake Authors.
//
// The Lake's lease path: admission (with pressure rounds while a lease
// waits for memory), the slow work without the lock, the grant or the
// rollback; claims and returns.

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/bytes.h"
#include "common/mutex.h"
#include "daemon/lake.h"
#include "daemon/log.h"
#include "daemon/pressure_policy.h"

namespace gmlake {

absl::StatusOr<LeaseGrant> Lake::Lease(uint64_t session,
                                       absl::string_view token, int device,
                                       uint64_t count, uint64_t chunk_bytes,
                                       bool no_pressure) {
  const absl::Time start = absl::Now();
  LeaseWait wait;
  wait.deadline = absl::Now() + options_.reclaim_timeout;
  wait.reclaim_first = options_.prefer_reclaim;
  // A lease ahead of need takes what no one holds, or nothing (with
  // prefer_reclaim: free chunks only, the lake does not grow for it).
  wait.no_pressure = no_pressure;
  ChunkBooks::Reservation r;
  // Every step holds the lock in its own scope; pressure requests and
  // session hooks run between steps, without it.
  for (;;) {
    Aftermath after;
    absl::StatusOr<bool> reserved;
    {
      MutexLock lock(&mu_);
      reserved = AdmitLeaseLocked(session, token, device, count, chunk_bytes,
                                  &wait, &r, &after);
      if (!reserved.ok()) {
        ++leases_failed_;
        NotePressureWaitLocked(wait.pressure_since);
      }
      if (!reserved.ok() || *reserved) StopWaitingLocked(&wait);
    }
    after.Run();
    if (!reserved.ok()) return reserved.status();
    if (*reserved) break;
  }

  // The slow work, without the lock: the chunks are the lease's alone
  // (reserved or scrubbing), so nothing else touches them meanwhile.
  // Free chunks of other sizes go first, to make room for the new ones.
  ReleaseToDriver(std::move(r.recycled));
  if (!r.dirty.empty() && options_.testonly_before_lease_scrub) {
    options_.testonly_before_lease_scrub();
  }
  absl::Status scrubbed = Scrub(r.device, r.chunk_bytes, r.dirty_handles);
  std::vector<ChunkBooks::MadeChunk> made;
  absl::Status created = absl::OkStatus();
  if (scrubbed.ok()) {
    created = CreateChunks(r.device, r.to_create, r.chunk_bytes, &made);
  }
  // A driver that cannot export says little (CUDA_ERROR_OPERATING_SYSTEM):
  // when the daemon is out of descriptors, that is the cause to name.
  const FdUsage fds = created.ok() ? FdUsage{} : CurrentFdUsage();

  MutexLock lock(&mu_);
  absl::StatusOr<LeaseGrant> grant =
      FinishLeaseLocked(&r, scrubbed, created, fds, std::move(made));
  NotePressureWaitLocked(wait.pressure_since);
  // A hand-off: memory that other sessions gave back, now this one's.
  if (grant.ok() && wait.pressure_since != absl::InfiniteFuture()) {
    handoff_.Observe(absl::ToDoubleSeconds(absl::Now() - start));
  }
  return grant;
}

absl::Status Lake::CheckLeaseLocked(const Session& s, int device,
                                    uint64_t count,
                                    uint64_t chunk_bytes) const {
  if (!s.bound) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "session %d is not bound: connect to the fd socket %s and bind it "
        "before leasing",
        s.id, options_.fd_socket_path));
  }
  if (device < 0 || device >= books_.device_count()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device %d does not exist: gmlaked serves devices 0..%d", device,
        books_.device_count() - 1));
  }
  if (count == 0) return absl::InvalidArgumentError("a lease of 0 chunks");
  const uint64_t unit = books_.chunk_size(device);
  if (chunk_bytes % unit != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a lease of chunks of %d bytes on device %d: chunk sizes there are "
        "multiples of %s (gmlaked's --chunk_size)",
        chunk_bytes, device, FormatBytes(unit)));
  }
  const uint64_t size = chunk_bytes == 0 ? unit : chunk_bytes;
  const uint64_t capacity = books_.capacity_bytes(device);
  // Divided, not multiplied: a count and a size from the client may
  // overflow.
  if (size > capacity || count > capacity / size) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "lease of %d chunks of %s on device %d is more than the lake's whole "
        "capacity there, %s (--capacity)",
        count, FormatBytes(size), device, FormatBytes(capacity)));
  }
  // Quotas count what the session and uid hold, including leases of
  // theirs still in flight.
  const uint64_t bytes = count * size;
  const ChunkBooks::Holding h = books_.holding(s.id);
  const uint64_t session_bytes = h.leased_bytes + h.in_flight_bytes;
  if (options_.session_quota_bytes > 0 &&
      session_bytes + bytes > options_.session_quota_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "lease of %s would put %s at %s, over its quota of %s "
        "(--session_quota)",
        FormatBytes(bytes), s.Label(), FormatBytes(session_bytes + bytes),
        FormatBytes(options_.session_quota_bytes)));
  }
  const uint64_t uid_bytes = books_.uid_bytes(s.peer.uid);
  if (options_.uid_quota_bytes > 0 &&
      uid_bytes + bytes > options_.uid_quota_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "lease of %s would put uid %d at %s, over its quota of %s "
        "(--uid_quota)",
        FormatBytes(bytes), s.peer.uid, FormatBytes(uid_bytes + bytes),
        FormatBytes(options_.uid_quota_bytes)));
  }
  return absl::OkStatus();
}

std::string Lake::DescribeShortLocked(const Session& s, int device,
                                      uint64_t count,
                                      uint64_t chunk_bytes) const {
  const ChunkBooks::Counts c = books_.counts(device);
  return absl::StrFormat(
      "lease of %d chunks of %s (%s) on device %d for %s: the lake has %s "
      "free (%s in chunks of that size) and %s of capacity left (%s in all, "
      "%s leased to %d sessions)",
      count, FormatBytes(chunk_bytes), FormatBytes(count * chunk_bytes), device,
      s.Label(), FormatBytes(c.free.bytes),
      FormatBytes(books_.free_bytes_of_size(device, chunk_bytes)),
      FormatBytes(books_.room(device)),
      FormatBytes(books_.capacity_bytes(device)),
      FormatBytes(c.leased.bytes + c.reserved.bytes), books_.holders(device));
}

absl::StatusOr<bool> Lake::AdmitLeaseLocked(
    uint64_t session, absl::string_view token, int device, uint64_t count,
    uint64_t chunk_bytes, LeaseWait* wait, ChunkBooks::Reservation* r,
    Aftermath* after) {
  for (;;) {
    if (shutting_down_) {
      return absl::UnavailableError("gmlaked is shutting down");
    }
    absl::StatusOr<Session*> found = sessions_.Find(session, token);
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
    if (absl::Status ok = CheckLeaseLocked(*s, device, count, chunk_bytes);
        !ok.ok()) {
      return ok;
    }
    const uint64_t size =
        chunk_bytes != 0 ? chunk_bytes : books_.chunk_size(device);
    // With reclaim_first the lake does not grow: free chunks of the size,
    // or of others released to make room, only.
    const bool may_grow = !wait->reclaim_first;
    uint64_t short_bytes = 0;
    if (books_.CanReserve(device, count, size, may_grow, &short_bytes)) {
      *r = books_.Reserve(next_lease_++, session, s->peer.uid, device, count,
                          size, may_grow);
      for (const ChunkBooks::Released& c : r->recycled) {
        recycled_bytes_ += c.size;
      }
      return true;
    }
    if (wait->no_pressure) {
      return absl::ResourceExhaustedError(
          absl::StrCat(DescribeShortLocked(*s, device, count, size),
                       "; a lease ahead of need (no_pressure) asks no one"));
    }
    // Ask sessions for memory: first round at once, and another round
    // (sessions not asked yet) whenever everyone asked so far has answered
    // (reported usage after handling the request, or ended) and it is
    // still not enough.
    if (AllAnsweredLocked(*wait)) {
      absl::StatusOr<bool> asked =
          AskForMemoryLocked(*s, device, count, size, short_bytes, wait, after);
      if (!asked.ok()) return asked.status();
      if (*asked) {
        ++pressure_rounds_;
        if (wait->pressure_since == absl::InfiniteFuture()) {
          wait->pressure_since = absl::Now();
        }
        return false;  // send without the lock, then look again
      }
      continue;  // nobody (else) to ask and prefer_reclaim: create the rest
    }
    if (absl::Now() >= wait->deadline) {
      if (wait->reclaim_first) {  // they gave what they gave: create the rest
        wait->reclaim_first = false;
        continue;
      }
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s; asked %d other sessions to return memory and they did not "
          "return enough within %s (--reclaim_timeout)",
          DescribeShortLocked(*s, device, count, size), wait->asked.size(),
          absl::FormatDuration(options_.reclaim_timeout)));
    }
    freed_.WaitWithDeadline(&mu_, wait->deadline);
  }
}

bool Lake::AllAnsweredLocked(const LeaseWait& wait) const {
  for (size_t i = 0; i < wait.asked.size(); ++i) {
    const Session* a = sessions_.Live(wait.asked[i]);
    if (a != nullptr && a->reports < wait.answer_due[i]) return false;
  }
  return true;
}

absl::StatusOr<bool> Lake::AskForMemoryLocked(
    const Session& s, int device, uint64_t count, uint64_t chunk_bytes,
    uint64_t short_bytes, LeaseWait* wait, Aftermath* after) {
  // From here the lease waits for answers, holding its thread.
  if (absl::Status may = StartWaitingLocked(s.peer.uid, wait); !may.ok()) {
    if (wait->reclaim_first) {  // do not wait: create what is missing
      wait->reclaim_first = false;
      return false;
    }
    return absl::ResourceExhaustedError(
        absl::StrCat(DescribeShortLocked(s, device, count, chunk_bytes), "; ",
                     may.message()));
  }
  std::vector<uint64_t> more =
      SendPressureLocked(s, device, short_bytes, wait->asked, after);
  if (more.empty()) {
    if (wait->reclaim_first) {  // nobody (else) to ask: create the rest
      wait->reclaim_first = false;
      return false;
    }
    return absl::ResourceExhaustedError(
        wait->asked.empty()
            ? absl::StrCat(DescribeShortLocked(s, device, count, chunk_bytes),
                           "; no other session holds memory there to ask "
                           "for")
            : absl::StrFormat(
                  "%s; asked %d other sessions to return memory "
                  "and they returned less",
                  DescribeShortLocked(s, device, count, chunk_bytes),
                  wait->asked.size()));
  }
  for (uint64_t id : more) {
    const Session* a = sessions_.Live(id);
    wait->asked.push_back(id);
    // Its answers to requests sent earlier (maybe for other leases) come
    // first; they are not this lease's.
    wait->answer_due.push_back(
        a == nullptr ? 0 : a->reports + a->pressure_outstanding);
  }
  return true;
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

std::vector<uint64_t> Lake::SendPressureLocked(
    const Session& asker, int device, uint64_t bytes,
    absl::Span<const uint64_t> exclude, Aftermath* after) {
  std::vector<PressureCandidate> candidates;
  for (const auto& [id, s] : sessions_.live()) {
    if (id == asker.id || s->sink == nullptr) continue;
    if (std::find(exclude.begin(), exclude.end(), id) != exclude.end()) {
      continue;
    }
    const ChunkBooks::Holding h = books_.holding(id);
    auto n = h.leased_by_device.find(device);
    if (n == h.leased_by_device.end() || n->second.chunks == 0) continue;
    auto u = s->usage.find(device);
    candidates.push_back({id, u == s->usage.end() ? 0 : u->second.cached_bytes,
                          n->second.bytes});
  }
  const std::string reason = absl::StrFormat(
      "%s needs %s on device %d", asker.Label(), FormatBytes(bytes), device);
  std::vector<uint64_t> asked;
  for (const PressureAsk& ask : ChoosePressure(candidates, bytes)) {
    Session* s = sessions_.Live(ask.session);
    if (s == nullptr) continue;
    after->sends.emplace_back(s->sink, Pressure{device, ask.bytes, reason});
    ++s->pressure_outstanding;
    ++pressure_sent_;
    asked.push_back(ask.session);
    VLogf("asking %s for %s on device %d: %s", s->Label(),
          FormatBytes(ask.bytes), device, reason);
  }
  return asked;
}

absl::StatusOr<LeaseGrant> Lake::FinishLeaseLocked(
    ChunkBooks::Reservation* r, const absl::Status& scrubbed,
    const absl::Status& created, const FdUsage& fds,
    std::vector<ChunkBooks::MadeChunk> made) {
  const uint64_t to_create = r->to_create;
  books_.AddMade(r, std::move(made));
  Session* s = sessions_.Live(r->session);
  const std::string label =
      s != nullptr ? s->Label() : absl::StrCat("session ", r->session);
  absl::Status failure = absl::OkStatus();
  if (!scrubbed.ok()) {
    failure = absl::InternalError(
        absl::StrFormat("zeroing %d chunks on device %d for %s failed: %s",
                        r->dirty.size(), r->device, label, scrubbed.message()));
  } else if (!created.ok() && OutOfDescriptors(fds)) {
    failure = absl::ResourceExhaustedError(absl::StrFormat(
        "creating %d chunks on device %d for %s failed: %s (%s)", to_create,
        r->device, label, DescribeOutOfDescriptors(fds), created.message()));
  } else if (!created.ok()) {
    failure = absl::Status(
        created.code(),
        absl::StrFormat("creating %d chunks on device %d for %s failed "
                        "(the device may hold less than --capacity): %s",
                        to_create, r->device, label, created.message()));
  } else if (shutting_down_) {
    failure = absl::UnavailableError("gmlaked is shutting down");
  } else if (s == nullptr) {
    failure = absl::AbortedError(absl::StrFormat(
        "session %d ended while its lease was being served", r->session));
  }
  absl::StatusOr<std::vector<uint64_t>> granted =
      absl::InternalError("not granted");
  if (failure.ok()) {
    granted = books_.Grant(*r);
    if (!granted.ok()) {
      failure = absl::InternalError(
          absl::StrCat("lease for ", label, ": ", granted.status().message(),
                       " (a gmlaked bug; see its log)"));
    }
  }
  if (!failure.ok()) {
    // Back to the lake: the zeroed chunks as fresh, the others as they were.
    books_.PutBack(*r, /*zeroed=*/scrubbed.ok());
    ++leases_failed_;
    freed_.SignalAll();
    Warnf("lease failed: %s", failure.message());
    return failure;
  }
  chunks_scrubbed_ += r->dirty.size();
  zeroed_bytes_ += r->dirty.size() * r->chunk_bytes;
  LeaseGrant grant;
  grant.lease_id = r->lease;
  grant.device = r->device;
  grant.chunk_size = r->chunk_bytes;
  grant.chunk_ids = *std::move(granted);
  sessions_.AddUnclaimed(s, grant.lease_id, grant.chunk_ids, absl::Now());
  ++leases_served_;
  VLogf("lease %d: %d chunks (%s) on device %d to %s (%d zeroed, %d new)",
        grant.lease_id, r->count, FormatBytes(r->count * grant.chunk_size),
        r->device, label, r->dirty.size(), r->made.size());
  return grant;
}

absl::StatusOr<std::vector<uint64_t>> Lake::Claim(uint64_t session,
                                                  absl::string_view token,
                                                  uint64_t lease_id) {
  MutexLock lock(&mu_);
  return sessions_.Claim(session, token, lease_id);
}

absl::StatusOr<std::vector<UniqueFd>> Lake::DupChunkFds(
    uint64_t session, absl::Span<const uint64_t> chunk_ids) {
  if (!options_.export_on_demand) {
    MutexLock lock(&mu_);
    return books_.DupFds(session, chunk_ids);
  }
  // Pinned, so that a Return and a trim or release meanwhile cannot release
  // a handle under its export; exported without the lock.
  absl::StatusOr<std::vector<ChunkHandle>> handles;
  {
    MutexLock lock(&mu_);
    handles = books_.Pin(session, chunk_ids);
  }
  if (!handles.ok()) return handles.status();
  std::vector<UniqueFd> fds;
  fds.reserve(handles->size());
  absl::Status exported = absl::OkStatus();
  for (ChunkHandle h : *handles) {
    absl::StatusOr<UniqueFd> fd = backend_->ExportChunk(h);
    if (!fd.ok()) {
      exported = fd.status();
      break;
    }
    fds.push_back(*std::move(fd));
  }
  const FdUsage usage = exported.ok() ? FdUsage{} : CurrentFdUsage();
  MutexLock lock(&mu_);
  books_.Unpin(chunk_ids);
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
  if (absl::Status ok = books_.CheckDeliverable(session, chunk_ids); !ok.ok()) {
    return ok;
  }
  return fds;
}

absl::StatusOr<uint64_t> Lake::Return(uint64_t session, absl::string_view token,
                                      absl::Span<const uint64_t> chunk_ids) {
  absl::StatusOr<uint64_t> bytes = ReturnChunks(session, token, chunk_ids);
  ReleaseDropped();  // adopted chunks among them
  return bytes;
}

absl::StatusOr<uint64_t> Lake::ReturnChunks(
    uint64_t session, absl::string_view token,
    absl::Span<const uint64_t> chunk_ids) {
  MutexLock lock(&mu_);
  absl::StatusOr<Session*> found = sessions_.Find(session, token);
  if (!found.ok()) return found.status();
  if (absl::Status ok = books_.CheckLeasedTo(session, chunk_ids); !ok.ok()) {
    return absl::Status(ok.code(),
                        absl::StrCat(ok.message(), "; nothing was returned"));
  }
  const uint64_t bytes = FreeChunksLocked(**found, chunk_ids);
  // Returned before being claimed: they leave their pending lease.
  SessionTable::DropFromUnclaimed(
      *found,
      absl::flat_hash_set<uint64_t>(chunk_ids.begin(), chunk_ids.end()));
  return bytes;
}

// --- Backend work, without the lock
// --------------------------------------------

absl::Status Lake::Scrub(int device, uint64_t size,
                         absl::Span<const ChunkHandle> handles) {
  if (handles.empty()) return absl::OkStatus();
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

absl::Status Lake::CreateChunks(int device, uint64_t n, uint64_t size,
                                std::vector<ChunkBooks::MadeChunk>* out) {
  for (uint64_t i = 0; i < n; ++i) {
    absl::StatusOr<ChunkHandle> h = backend_->CreateChunk(device, size);
    if (!h.ok()) return h.status();
    absl::StatusOr<UniqueFd> fd = backend_->ExportChunk(*h);
    if (!fd.ok()) {
      backend_->ReleaseChunk(*h).IgnoreError();
      return fd.status();
    }
    const ChunkIdentity identity = IdentifyDescriptor(fd->get());
    // With export on demand this first export (the costly one on a GPU)
    // only proves the chunk can be shared, and is closed here.
    if (options_.export_on_demand) fd->Reset();
    out->push_back({*h, *std::move(fd), identity});
  }
  return absl::OkStatus();
}

}  // namespace gmlake
