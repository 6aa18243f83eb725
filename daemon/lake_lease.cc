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
                                       bool no_pressure, bool client_makes) {
  const absl::Time start = absl::Now();
  LeaseWait wait;
  wait.started = start;
  wait.reclaim_first = options_.prefer_reclaim;
  // A lease ahead of need takes what no one holds, or nothing (with
  // prefer_reclaim: free chunks only, the lake does not grow for it).
  wait.no_pressure = no_pressure;
  wait.client_makes = client_makes;
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
        // A lease ahead of need that finds no free room is refused at once
        // and the client leases just its shortfall: nobody saw a failure.
        if (!wait.no_pressure) ++leases_failed_;
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
  // A lease of capacity has nothing to make here: its client makes them.
  if (scrubbed.ok() && !r.client_makes) {
    created = CreateChunks(r.device, r.to_create, r.chunk_bytes,
                           /*for_delivery=*/true, &made);
  }
  // New chunks may be memory the daemon released unzeroed.
  if (scrubbed.ok() && created.ok() && !r.client_makes) {
    scrubbed = ZeroRecreated(r.device, r.uid, r.chunk_bytes, made);
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
    Session* s = *found;
    if (!wait->admitted_once) {
      wait->last_progress = absl::Now();
      wait->returned_seen = wait->returned_at_start = pressure_returned_bytes_;
    }
    wait->admitted_once = true;
    if (absl::Status ok = CheckLeaseLocked(*s, device, count, chunk_bytes);
        !ok.ok()) {
      return ok;
    }
    const uint64_t size =
        chunk_bytes != 0 ? chunk_bytes : books_.chunk_size(device);
    // With reclaim_first the lake does not grow: free chunks of the size,
    // or of others released to make room, and the room others gave back
    // for this session as capacity (chunks their clients made), only.
    const uint64_t grow_limit = wait->reclaim_first
                                    ? RoomCreditLocked(*s, device)
                                    : ChunkBooks::kAnyGrowth;
    uint64_t short_bytes = 0;
    if (books_.CanReserve(device, count, size, grow_limit, &short_bytes,
                          wait->client_makes)) {
      *r = books_.Reserve(next_lease_++, session, s->peer.uid, device, count,
                          size, grow_limit, wait->client_makes);
      if (wait->reclaim_first) {
        uint64_t& credit = s->reclaimed_room[device];
        credit -= std::min(credit, r->to_create * size);
      }
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
    absl::StatusOr<bool> step =
        PressureStepLocked(*s, device, count, size, short_bytes, wait, after);
    if (!step.ok()) return step.status();
    if (*step) return false;  // send without the lock, then look again
  }
}

absl::StatusOr<bool> Lake::PressureStepLocked(
    const Session& s, int device, uint64_t count, uint64_t chunk_bytes,
    uint64_t short_bytes, LeaseWait* wait, Aftermath* after) {
  const absl::Time now = absl::Now();
  SettleDebtsLocked(now);
  if (pressure_returned_bytes_ != wait->returned_seen) {
    wait->returned_seen = pressure_returned_bytes_;
    wait->last_progress = now;  // bytes are still coming
  }
  const Owed owed = OwedLocked(s.id, device);
  // What nobody owes yet: ask for the whole need once, then for what is
  // still missing.
  std::vector<PressureAsk> asks;
  if (owed.pending_bytes < short_bytes) {
    const uint64_t want =
        PressureWantLocked(sessions_.Live(s.id), device, short_bytes, now);
    asks = ChooseAsksLocked(s, device, short_bytes - owed.pending_bytes,
                            want - std::min(want, owed.pending_bytes),
                            wait->started);
  }
  LeaseStepInput in;
  in.short_bytes = short_bytes;
  in.pending_bytes = owed.pending_bytes;
  in.overdue = owed.overdue;
  in.can_ask = !asks.empty();
  in.since_progress = now - wait->last_progress;
  in.reclaim_timeout = options_.reclaim_timeout;
  const LeaseStep step = NextLeaseStep(in);
  if (step == LeaseStep::kGiveUp) {
    if (wait->reclaim_first) {  // they gave what they gave: create the rest
      wait->reclaim_first = false;
      return false;
    }
    if (wait->requests == 0 && !owed.overdue && owed.pending_bytes == 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat(DescribeShortLocked(s, device, count, chunk_bytes),
                       "; no other session holds memory there to ask for"));
    }
    return absl::ResourceExhaustedError(
        DescribeGiveUpLocked(s, device, count, chunk_bytes, *wait,
                             in.since_progress >= options_.reclaim_timeout));
  }
  // From here the lease waits for memory, holding its thread.
  if (absl::Status may = StartWaitingLocked(s.peer.uid, wait); !may.ok()) {
    if (wait->reclaim_first) {  // do not wait: create what is missing
      wait->reclaim_first = false;
      return false;
    }
    return absl::ResourceExhaustedError(
        absl::StrCat(DescribeShortLocked(s, device, count, chunk_bytes), "; ",
                     may.message()));
  }
  if (wait->pressure_since == absl::InfiniteFuture()) {
    wait->pressure_since = now;
  }
  if (step == LeaseStep::kAsk) {
    SendAsksLocked(s, device, asks, now, wait, after);
    ++pressure_rounds_;
    return true;
  }
  freed_.WaitWithDeadline(
      &mu_, std::min(owed.next_expiry,
                     wait->last_progress + options_.reclaim_timeout));
  return false;
}

std::string Lake::DescribeGiveUpLocked(const Session& s, int device,
                                       uint64_t count, uint64_t chunk_bytes,
                                       const LeaseWait& wait,
                                       bool timed_out) const {
  const uint64_t came = pressure_returned_bytes_ - wait.returned_at_start;
  return absl::StrFormat(
      "%s; asked other sessions to return memory (%d requests for %s, %s came "
      "back) and they returned less: %s",
      DescribeShortLocked(s, device, count, chunk_bytes), wait.requests,
      FormatBytes(wait.asked_bytes), FormatBytes(came),
      timed_out
          ? absl::StrFormat("nothing more came within %s (--reclaim_timeout)",
                            absl::FormatDuration(options_.reclaim_timeout))
          : "nobody else holds more there to ask for (a lease waits up to "
            "--reclaim_timeout while memory still comes)");
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

void Lake::SettleDebtsLocked(absl::Time now) {
  const absl::Duration patience =
      std::min(options_.pressure_patience, options_.reclaim_timeout);
  std::vector<uint64_t> clear;
  for (uint64_t id : debtors_) {
    Session* s = sessions_.Live(id);
    if (s == nullptr) {  // ended: its debts went with it
      clear.push_back(id);
      continue;
    }
    auto& debts = s->debts;
    for (auto it = debts.begin(); it != debts.end();) {
      PressureDebtView v;
      v.asked_bytes = it->asked;
      v.promised_bytes = it->promised;
      v.returned_bytes = it->returned;
      v.answered = s->reports >= it->answer_due;
      v.since_progress = now - it->last_progress;
      const DebtState state = JudgeDebt(v, patience);
      const bool undelivered = Undelivered(v);
      if (state == DebtState::kPending) {
        ++it;
        continue;
      }
      if (state == DebtState::kOverdue) {
        if (!it->overdue) {
          it->overdue = true;
          if (undelivered) ++s->undelivered, ++pressure_undelivered_;
          s->short_for[it->beneficiary] = now;
          VLogf("%s did not answer a request for %s within %s: asking others",
                s->Label(), FormatBytes(it->asked),
                absl::FormatDuration(patience));
        }
        // Late bytes are still welcome, up to the reclaim timeout.
        if (v.since_progress < options_.reclaim_timeout) {
          ++it;
          continue;
        }
      } else if (state == DebtState::kShort) {
        if (undelivered && !it->overdue)
          ++s->undelivered, ++pressure_undelivered_;
        s->short_for[it->beneficiary] = now;
      }
      if (!undelivered) s->undelivered = 0;
      it = debts.erase(it);
    }
    if (debts.empty()) clear.push_back(id);
  }
  for (uint64_t id : clear) debtors_.erase(id);
}

Lake::Owed Lake::OwedLocked(uint64_t asker, int device) const {
  const absl::Duration patience =
      std::min(options_.pressure_patience, options_.reclaim_timeout);
  Owed owed;
  for (uint64_t id : debtors_) {
    const Session* s = sessions_.Live(id);
    if (s == nullptr) continue;
    for (const Session::PressureDebt& d : s->debts) {
      if (d.beneficiary != asker || d.device != device) continue;
      if (d.overdue) {
        owed.overdue = true;
        continue;
      }
      owed.pending_bytes += d.asked - std::min(d.asked, d.returned);
      owed.next_expiry = std::min(owed.next_expiry, d.last_progress + patience);
    }
  }
  return owed;
}

uint64_t Lake::PressureWantLocked(Session* s, int device, uint64_t short_bytes,
                                  absl::Time now) {
  PressureNeedInput in;
  in.short_bytes = short_bytes;
  if (s == nullptr) return short_bytes;
  Session::Growth& g = s->growth[device];
  const absl::Time since = now - options_.pressure_growth_window;
  g.grants.erase(
      g.grants.begin(),
      std::find_if(g.grants.begin(), g.grants.end(),
                   [&](const auto& grant) { return grant.first >= since; }));
  for (const auto& grant : g.grants) in.growth_bytes += grant.second;
  const ChunkBooks::Holding h = books_.holding(s->id);
  auto n = h.leased_by_device.find(device);
  const uint64_t held = n == h.leased_by_device.end() ? 0 : n->second.bytes;
  // This lease is part of the deficit.
  in.peak_bytes = g.peak;
  in.held_bytes = held;
  in.margin_divisor = options_.pressure_peak_margin_divisor;
  // Quotas bound what it could still hold (this lease included): no use
  // reclaiming past them.
  const uint64_t session_bytes = h.leased_bytes + h.in_flight_bytes;
  if (options_.session_quota_bytes > 0) {
    in.room_bytes = options_.session_quota_bytes -
                    std::min(options_.session_quota_bytes, session_bytes);
  }
  if (options_.uid_quota_bytes > 0) {
    const uint64_t uid_bytes = books_.uid_bytes(s->peer.uid);
    in.room_bytes = std::min(in.room_bytes,
                             options_.uid_quota_bytes -
                                 std::min(options_.uid_quota_bytes, uid_bytes));
  }
  return PressureWant(in);
}

std::vector<PressureAsk> Lake::ChooseAsksLocked(const Session& asker,
                                                int device,
                                                uint64_t short_bytes,
                                                uint64_t want_bytes,
                                                absl::Time since) const {
  std::vector<PressureCandidate> candidates;
  for (const auto& [id, s] : sessions_.live()) {
    if (id == asker.id || s->sink == nullptr) continue;
    // It owes this asker already, or came up short for it lately.
    if (std::any_of(s->debts.begin(), s->debts.end(),
                    [&](const Session::PressureDebt& d) {
                      return d.beneficiary == asker.id && d.device == device;
                    })) {
      continue;
    }
    if (auto it = s->short_for.find(asker.id);
        it != s->short_for.end() && it->second >= since) {
      continue;
    }
    const ChunkBooks::Holding h = books_.holding(id);
    auto n = h.leased_by_device.find(device);
    if (n == h.leased_by_device.end() || n->second.chunks == 0) continue;
    auto u = s->usage.find(device);
    candidates.push_back({id, u == s->usage.end() ? 0 : u->second.cached_bytes,
                          n->second.bytes, s->undelivered});
  }
  return ChoosePressure(candidates, short_bytes, want_bytes);
}

void Lake::SendAsksLocked(const Session& asker, int device,
                          absl::Span<const PressureAsk> asks, absl::Time now,
                          LeaseWait* wait, Aftermath* after) {
  for (const PressureAsk& ask : asks) {
    Session* s = sessions_.Live(ask.session);
    if (s == nullptr) continue;
    const std::string reason =
        absl::StrFormat("%s needs %s on device %d", asker.Label(),
                        FormatBytes(ask.bytes), device);
    after->sends.emplace_back(s->sink, Pressure{device, ask.bytes, reason});
    ++s->pressure_outstanding;
    Session::PressureDebt d;
    d.device = device;
    d.beneficiary = asker.id;
    d.asked = ask.bytes;
    d.promised = ask.promised_bytes;
    // It answers its requests in order: this one's answer is the last.
    d.answer_due = s->reports + s->pressure_outstanding;
    d.last_progress = now;
    s->debts.push_back(d);
    debtors_.insert(s->id);
    ++pressure_sent_;
    ++wait->requests;
    wait->asked_bytes += ask.bytes;
    pressure_asked_bytes_ += ask.bytes;
    pressure_promised_bytes_ += ask.promised_bytes;
    VLogf("asking %s for %s on device %d (%s of it cached): %s", s->Label(),
          FormatBytes(ask.bytes), device, FormatBytes(ask.promised_bytes),
          reason);
  }
  wait->last_progress = now;
}

void Lake::NoteReturnedLocked(Session* s, const ChunkBooks::Holding& before,
                              absl::Time now,
                              std::map<int, uint64_t> gone_bytes) {
  const ChunkBooks::Holding after = books_.holding(s->id);
  for (const auto& [device, was] : before.leased_by_device) {
    auto n = after.leased_by_device.find(device);
    const uint64_t now_held =
        n == after.leased_by_device.end() ? 0 : n->second.bytes;
    uint64_t gone = was.bytes - std::min(was.bytes, now_held);
    if (gone == 0) continue;
    // Giving back, it is growing no more: room others gave it is spent.
    s->reclaimed_room.erase(device);
    bool owed = false;
    for (Session::PressureDebt& d : s->debts) {
      if (d.device != device) continue;
      owed = true;
      const uint64_t take =
          std::min(gone, d.asked - std::min(d.asked, d.returned));
      d.returned += take;
      d.last_progress = now;
      pressure_returned_bytes_ += take;
      // Returned as capacity: room for the lease that asked.
      uint64_t& as_room = gone_bytes[device];
      const uint64_t credit = std::min(take, as_room);
      as_room -= credit;
      if (Session* b = sessions_.Live(d.beneficiary);
          b != nullptr && credit > 0) {
        b->reclaimed_room[device] += credit;
      }
      gone -= take;
      if (gone == 0) break;
    }
    // Given back of its own accord at its peak: it needs no more than it
    // keeps. Below its peak, the rest of its working set is with others
    // (reclaimed) and the peak stands: a trainer returning, mid-turn, chunks
    // it had leased ahead then asked for its next need by growth, in two
    // rounds on an H100 when its peak had fallen to what it held.
    uint64_t& peak = s->growth[device].peak;
    if (!owed && s->pressure_outstanding == 0 && was.bytes >= peak)
      peak = now_held;
  }
}

uint64_t Lake::RoomCreditLocked(const Session& s, int device) const {
  auto it = s.reclaimed_room.find(device);
  return it == s.reclaimed_room.end() ? 0 : it->second;
}

void Lake::NoteGrantLocked(Session* s, int device, uint64_t bytes,
                           absl::Time now) {
  Session::Growth& g = s->growth[device];
  g.grants.emplace_back(now, bytes);
  const ChunkBooks::Holding h = books_.holding(s->id);
  auto n = h.leased_by_device.find(device);
  if (n != h.leased_by_device.end()) g.peak = std::max(g.peak, n->second.bytes);
}

absl::StatusOr<LeaseGrant> Lake::FinishLeaseLocked(
    ChunkBooks::Reservation* r, const absl::Status& scrubbed,
    const absl::Status& created, const FdUsage& fds,
    std::vector<ChunkBooks::MadeChunk> made) {
  const uint64_t to_create = r->to_create;
  if (r->client_makes) {
    books_.AddClientMade(r);
  } else {
    books_.AddMade(r, std::move(made));
  }
  Session* s = sessions_.Live(r->session);
  const std::string label =
      s != nullptr ? s->Label() : absl::StrCat("session ", r->session);
  absl::Status failure =
      LeaseFailureLocked(*r, s, label, to_create, scrubbed, created, fds);
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
  return BookGrantLocked(*r, s, label, *std::move(granted));
}

absl::Status Lake::LeaseFailureLocked(
    const ChunkBooks::Reservation& r, const Session* s,
    const std::string& label, uint64_t to_create, const absl::Status& scrubbed,
    const absl::Status& created, const FdUsage& fds) const {
  if (!scrubbed.ok()) {
    return absl::InternalError(
        absl::StrFormat("zeroing %d chunks on device %d for %s failed: %s",
                        r.dirty.size(), r.device, label, scrubbed.message()));
  }
  if (!created.ok() && OutOfDescriptors(fds)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "creating %d chunks on device %d for %s failed: %s (%s)", to_create,
        r.device, label, DescribeOutOfDescriptors(fds), created.message()));
  }
  if (!created.ok()) {
    return absl::Status(
        created.code(),
        absl::StrFormat("creating %d chunks on device %d for %s failed "
                        "(the device may hold less than --capacity): %s",
                        to_create, r.device, label, created.message()));
  }
  if (shutting_down_) return absl::UnavailableError("gmlaked is shutting down");
  if (s == nullptr) {
    return absl::AbortedError(absl::StrFormat(
        "session %d ended while its lease was being served", r.session));
  }
  return absl::OkStatus();
}

LeaseGrant Lake::BookGrantLocked(const ChunkBooks::Reservation& r, Session* s,
                                 const std::string& label,
                                 std::vector<uint64_t> chunk_ids) {
  chunks_scrubbed_ += r.dirty.size();
  zeroed_bytes_ += r.dirty.size() * r.chunk_bytes;
  LeaseGrant grant;
  grant.lease_id = r.lease;
  grant.device = r.device;
  grant.chunk_size = r.chunk_bytes;
  grant.chunk_ids = std::move(chunk_ids);
  grant.client_makes = r.client_makes;
  const absl::Time now = absl::Now();
  // Nothing to claim in a lease of capacity.
  if (!r.client_makes) {
    sessions_.AddUnclaimed(s, grant.lease_id, grant.chunk_ids, now);
  }
  const uint64_t bytes = r.count * grant.chunk_size;
  ++leases_served_;
  leased_chunks_total_ += r.count;
  leased_bytes_total_ += bytes;
  NoteGrantLocked(s, r.device, bytes, now);
  VLogf("lease %d: %d chunks (%s) on device %d to %s (%d zeroed, %d new%s)",
        grant.lease_id, r.count, FormatBytes(bytes), r.device, label,
        r.dirty.size(), r.made.size(),
        r.client_makes ? ", made by the client" : "");
  if (r.client_makes) client_made_bytes_ += bytes;
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
  std::vector<UniqueFd> made_fds(chunk_ids.size());
  {
    MutexLock lock(&mu_);
    handles = books_.Pin(session, chunk_ids);
    if (handles.ok()) {
      for (size_t i = 0; i < chunk_ids.size(); ++i) {
        made_fds[i] = books_.TakeCreationFd(chunk_ids[i]);
      }
    }
  }
  if (!handles.ok()) return handles.status();
  std::vector<UniqueFd> fds;
  fds.reserve(handles->size());
  absl::Status exported = absl::OkStatus();
  for (size_t i = 0; i < handles->size(); ++i) {
    // Made for this lease: its creation's export, once.
    if (made_fds[i].valid()) {
      fds.push_back(std::move(made_fds[i]));
      continue;
    }
    absl::StatusOr<UniqueFd> fd = backend_->ExportChunk((*handles)[i]);
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
  const ChunkBooks::Holding before = books_.holding(session);
  std::map<int, uint64_t> created_before;
  for (int d = 0; d < books_.device_count(); ++d) {
    created_before[d] = books_.counts(d).created.bytes;
  }
  const uint64_t bytes = FreeChunksLocked(**found, chunk_ids);
  // What left the books (chunks their client made) rather than came free.
  std::map<int, uint64_t> gone;
  for (const auto& [d, was] : created_before) {
    gone[d] = was - std::min(was, books_.counts(d).created.bytes);
  }
  NoteReturnedLocked(*found, before, absl::Now(), std::move(gone));
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
                                bool for_delivery,
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
    // proves the chunk can be shared, and goes to the lease's claim; made
    // ahead of time, it is closed here.
    if (options_.export_on_demand && !for_delivery) fd->Reset();
    out->push_back({*h, *std::move(fd), identity});
  }
  return absl::OkStatus();
}

}  // namespace gmlake
