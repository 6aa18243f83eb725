// Copyright 2026 The GMLake Authors.

#include "daemon/session_table.h"

#include <poll.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/session_token.h"

namespace gmlake {
namespace {

constexpr size_t kMaxNameBytes = 128;

}  // namespace

std::string Session::Label() const {
  const pid_t pid = bound ? peer.pid : claimed_pid;
  if (name.empty()) return absl::StrFormat("session %d (pid %d)", id, pid);
  return absl::StrFormat("session %d (%s, pid %d)", id, name, pid);
}

// --- Opening and binding
// ---------------------------------------------------------

absl::Status SessionTable::CheckOpen(absl::Time now, uint64_t* evict) const {
  *evict = 0;
  // Unbound sessions have no uid yet: they are capped apart, and the one
  // that waited longest makes room once it is clearly not binding.
  size_t unbound = 0;
  const Session* oldest = nullptr;
  for (const auto& [id, s] : live_) {
    if (s->bound) continue;
    ++unbound;
    if (oldest == nullptr || s->opened < oldest->opened) oldest = s.get();
  }
  if (unbound >= limits_.max_unbound) {
    if (oldest == nullptr ||
        now - oldest->opened < limits_.unbound_eviction_age) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%d sessions are waiting to be bound on the fd socket, gmlaked's "
          "limit (--max_unbound_sessions); retry in a moment",
          unbound));
    }
    *evict = oldest->id;
    return absl::OkStatus();  // the eviction makes room under max_sessions
  }
  if (live_.size() >= limits_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "gmlaked already serves %d sessions, its limit (--max_sessions)",
        live_.size()));
  }
  return absl::OkStatus();
}

Session* SessionTable::Add(pid_t claimed_pid, absl::string_view name,
                           std::string token, absl::Time now,
                           std::optional<uid_t> opener_uid) {
  auto s = std::make_unique<Session>();
  s->opener_uid = opener_uid;
  s->id = next_id_++;
  s->token = std::move(token);
  s->claimed_pid = claimed_pid;
  s->name = std::string(name.substr(0, kMaxNameBytes));
  s->opened = now;
  Session* raw = s.get();
  live_[raw->id] = std::move(s);
  return raw;
}

absl::Status SessionTable::CheckBind(const Session& s,
                                     const PeerIdentity& peer) const {
  if (s.bound) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "session %d is bound already (to pid %d)", s.id, s.peer.pid));
  }
  if (limits_.check_claimed_pid && peer.pid != s.claimed_pid) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "session %d was opened for pid %d but the fd-socket peer is pid %d: "
        "bind from the process that opened the session (clients in another "
        "pid namespace need gmlaked --nocheck_claimed_pid)",
        s.id, s.claimed_pid, peer.pid));
  }
  if (s.opener_uid.has_value() && peer.uid != *s.opener_uid) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "session %d was opened by uid %d but the fd-socket peer is uid %d: "
        "bind from the process that opened the session",
        s.id, *s.opener_uid, peer.uid));
  }
  // Ended sessions still holding chunks count: they hold the uid's memory.
  size_t of_uid = 0;
  for (const auto* table : {&live_, &ended_}) {
    for (const auto& [id, other] : *table) {
      if (other->bound && other->peer.uid == peer.uid) ++of_uid;
    }
  }
  if (of_uid >= limits_.max_per_uid) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "uid %d already has %d sessions, gmlaked's limit per uid "
        "(--max_sessions_per_uid): close sessions it no longer uses",
        peer.uid, of_uid));
  }
  return absl::OkStatus();
}

void SessionTable::Bind(Session* s, const PeerIdentity& peer,
                        std::function<void()> on_end) {
  s->bound = true;
  s->peer = peer;
  s->process = ProcessWatch::Start(peer.pid);
  s->on_end = std::move(on_end);
}

// --- Finding
// -----------------------------------------------------------------------

absl::StatusOr<Session*> SessionTable::Find(uint64_t id,
                                            absl::string_view token) const {
  Session* s = Live(id);
  if (s == nullptr) {
    return absl::NotFoundError(absl::StrFormat(
        "session %d does not exist (it ended, or was never opened): open a "
        "new one",
        id));
  }
  if (!TokensEqual(s->token, token)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("wrong token for session %d", id));
  }
  return s;
}

Session* SessionTable::Live(uint64_t id) const {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : it->second.get();
}

Session* SessionTable::Any(uint64_t id) const {
  if (Session* s = Live(id); s != nullptr) return s;
  auto it = ended_.find(id);
  return it == ended_.end() ? nullptr : it->second.get();
}

// --- Ending
// ------------------------------------------------------------------------

std::unique_ptr<Session> SessionTable::Remove(uint64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) return nullptr;
  std::unique_ptr<Session> s = std::move(it->second);
  live_.erase(it);
  for (const auto& [lease, pending] : s->unclaimed) lease_owner_.erase(lease);
  return s;
}

void SessionTable::KeepEnded(std::unique_ptr<Session> s,
                             absl::string_view reason) {
  s->ended = true;
  s->end_reason = std::string(reason);
  const uint64_t id = s->id;
  ended_[id] = std::move(s);
}

std::unique_ptr<Session> SessionTable::RemoveEnded(uint64_t id) {
  auto it = ended_.find(id);
  if (it == ended_.end()) return nullptr;
  std::unique_ptr<Session> s = std::move(it->second);
  ended_.erase(it);
  return s;
}

// --- Leases to claim
// ----------------------------------------------------------------

void SessionTable::AddUnclaimed(Session* s, uint64_t lease,
                                std::vector<uint64_t> ids, absl::Time now) {
  s->unclaimed[lease] = {std::move(ids), now};
  lease_owner_[lease] = s->id;
}

absl::StatusOr<std::vector<uint64_t>> SessionTable::Claim(
    uint64_t session, absl::string_view token, uint64_t lease) {
  absl::StatusOr<Session*> found = Find(session, token);
  if (!found.ok()) return found.status();
  auto owner = lease_owner_.find(lease);
  if (owner == lease_owner_.end()) {
    return absl::NotFoundError(absl::StrFormat(
        "lease %d is unknown: never granted, claimed already, or expired "
        "unclaimed (--claim_timeout)",
        lease));
  }
  if (owner->second != session) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "lease %d belongs to another session, not to session %d", lease,
        session));
  }
  lease_owner_.erase(owner);
  auto pending = (*found)->unclaimed.find(lease);
  if (pending == (*found)->unclaimed.end()) {
    return absl::NotFoundError(
        absl::StrFormat("lease %d was claimed already", lease));
  }
  std::vector<uint64_t> ids = std::move(pending->second.chunk_ids);
  (*found)->unclaimed.erase(pending);
  return ids;
}

std::vector<uint64_t> SessionTable::TakeUnclaimed(Session* s) {
  std::vector<uint64_t> ids;
  for (auto& [lease, pending] : s->unclaimed) {
    lease_owner_.erase(lease);
    ids.insert(ids.end(), pending.chunk_ids.begin(), pending.chunk_ids.end());
  }
  s->unclaimed.clear();
  return ids;
}

std::vector<uint64_t> SessionTable::TakeUnclaimed(Session* s, uint64_t lease) {
  auto it = s->unclaimed.find(lease);
  if (it == s->unclaimed.end()) return {};
  std::vector<uint64_t> ids = std::move(it->second.chunk_ids);
  s->unclaimed.erase(it);
  lease_owner_.erase(lease);
  return ids;
}

void SessionTable::DropFromUnclaimed(Session* s,
                                     const absl::flat_hash_set<uint64_t>& ids) {
  for (auto& [lease, pending] : s->unclaimed) {
    std::vector<uint64_t>& list = pending.chunk_ids;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](uint64_t id) { return ids.contains(id); }),
               list.end());
  }
}

// --- Liveness
// -----------------------------------------------------------------------

std::vector<std::pair<uint64_t, std::string>> SessionTable::ToEnd(
    absl::Time now) const {
  std::vector<std::pair<uint64_t, std::string>> out;
  std::vector<pollfd> polls;
  std::vector<const Session*> polled;
  for (const auto& [id, s] : live_) {
    if (!s->bound) {
      if (now - s->opened > limits_.bind_timeout) {
        out.emplace_back(
            id, absl::StrCat("it was not bound on the fd socket within ",
                             absl::FormatDuration(limits_.bind_timeout)));
      }
      continue;
    }
    if (s->process.pidfd() >= 0) {
      polls.push_back(pollfd{s->process.pidfd(), POLLIN, 0});
      polled.push_back(s.get());
    } else if (!s->process.Alive()) {
      out.emplace_back(id, absl::StrCat("process ", s->peer.pid, " is gone"));
    }
  }
  // One poll for every pidfd: each becomes readable when its process exits.
  if (!polls.empty() && ::poll(polls.data(), polls.size(), 0) > 0) {
    for (size_t i = 0; i < polls.size(); ++i) {
      if (polls[i].revents != 0) {
        out.emplace_back(
            polled[i]->id,
            absl::StrCat("process ", polled[i]->peer.pid, " exited"));
      }
    }
  }
  return out;
}

std::vector<uint64_t> SessionTable::EndedAndDone(
    const std::function<bool(uint64_t)>& holds) const {
  std::vector<uint64_t> out;
  for (const auto& [id, s] : ended_) {
    if (!holds(id) || !s->process.Alive()) out.push_back(id);
  }
  return out;
}

std::vector<std::pair<uint64_t, uint64_t>> SessionTable::ExpiredUnclaimed(
    absl::Time now) const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const auto& [id, s] : live_) {
    for (const auto& [lease, pending] : s->unclaimed) {
      if (now - pending.granted > limits_.claim_timeout) {
        out.emplace_back(id, lease);
      }
    }
  }
  return out;
}

absl::Status SessionTable::CheckCaller(const Session& s,
                                       std::optional<uid_t> caller_uid) {
  const std::optional<uid_t> owner =
      s.bound ? std::optional<uid_t>(s.peer.uid) : s.opener_uid;
  if (!caller_uid.has_value() || !owner.has_value() || *owner == *caller_uid) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrFormat(
      "session %d belongs to uid %d; this call came from uid %d: a session "
      "is used only by the uid that opened it (open a session of your own)",
      s.id, *owner, *caller_uid));
}

}  // namespace gmlake
