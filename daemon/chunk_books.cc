// Copyright 2026 The GMLake Authors.

#include "daemon/chunk_books.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/log.h"

namespace gmlake {

ChunkBooks::ChunkBooks(std::vector<ChunkBooksDevice> devices, ScrubPolicy scrub)
    : scrub_(scrub) {
  for (const ChunkBooksDevice& c : devices) {
    Device d;
    d.config = c;
    devices_.push_back(std::move(d));
  }
}

size_t ChunkBooks::chunk_size(int device) const {
  return devices_[device].config.chunk_size;
}

uint64_t ChunkBooks::capacity_chunks(int device) const {
  return devices_[device].config.capacity_chunks;
}

ChunkBooks::Counts ChunkBooks::counts(int device) const {
  return devices_[device].counts;
}

uint64_t ChunkBooks::room(int device) const {
  const Device& d = devices_[device];
  const uint64_t taken = d.counts.created + d.counts.creating;
  return d.config.capacity_chunks - std::min(taken, d.config.capacity_chunks);
}

ChunkBooks::Chunk* ChunkBooks::Find(uint64_t id) const {
  auto it = chunks_.find(id);
  return it == chunks_.end() ? nullptr : it->second.get();
}

uint64_t* ChunkBooks::CounterOf(Device* d, State state) {
  switch (state) {
    case State::kFree:
      return &d->counts.free;
    case State::kReserved:
      return &d->counts.reserved;
    case State::kScrubbing:
      return &d->counts.scrubbing;
    case State::kLeased:
      return &d->counts.leased;
  }
  return &d->counts.free;
}

void ChunkBooks::MakeFree(Chunk* c) {
  Device& d = devices_[c->device];
  --*CounterOf(&d, c->state);
  c->state = State::kFree;
  c->lease = 0;
  c->session = 0;
  c->free_since = absl::Now();
  ++d.counts.free;
  d.free_by_uid[c->last_uid].push_back(c->id);
}

uint64_t ChunkBooks::AddFree(int device, ChunkHandle handle, UniqueFd fd,
                             ChunkIdentity identity) {
  auto c = std::make_unique<Chunk>();
  c->id = next_id_++;
  c->device = device;
  c->handle = handle;
  c->fd = std::move(fd);
  c->identity = identity;
  if (identity.known()) by_identity_[identity] = c->id;
  c->free_since = absl::Now();
  Device& d = devices_[device];
  ++d.counts.created;
  ++d.counts.free;
  d.free_by_uid[kNoUid].push_back(c->id);
  const uint64_t id = c->id;
  chunks_[id] = std::move(c);
  return id;
}

// --- Leases in flight
// ----------------------------------------------------------

ChunkBooks::Reservation ChunkBooks::Reserve(uint64_t lease, uint64_t session,
                                            int64_t uid, int device,
                                            uint64_t count) {
  Reservation r;
  r.lease = lease;
  r.session = session;
  r.uid = uid;
  r.device = device;
  r.count = count;
  Device& d = devices_[device];
  auto take_from = [&](int64_t from_uid) {
    auto it = d.free_by_uid.find(from_uid);
    if (it == d.free_by_uid.end()) return;
    std::vector<uint64_t>& list = it->second;
    const bool scrub = NeedsScrub(scrub_, from_uid, uid);
    while (!list.empty() && r.clean.size() + r.dirty.size() < count) {
      const uint64_t id = list.back();
      list.pop_back();
      Chunk* c = Find(id);
      if (c == nullptr || c->state != State::kFree) {
        Errorf(
            "internal error: chunk %d on a free list is not free; dropped "
            "from the list",
            id);
        continue;
      }
      --d.counts.free;
      c->lease = lease;
      if (scrub) {
        c->state = State::kScrubbing;
        ++d.counts.scrubbing;
        r.dirty.push_back(id);
        r.dirty_handles.push_back(c->handle);
      } else {
        c->state = State::kReserved;
        ++d.counts.reserved;
        r.clean.push_back(id);
      }
    }
    if (list.empty()) d.free_by_uid.erase(it);
  };
  // Chunks that need no zeroing first: fresh ones, then this uid's own.
  take_from(kNoUid);
  take_from(uid);
  std::vector<int64_t> others;
  for (const auto& [other, list] : d.free_by_uid) others.push_back(other);
  std::sort(others.begin(), others.end());
  for (int64_t other : others) {
    if (r.clean.size() + r.dirty.size() >= count) break;
    take_from(other);
  }
  r.to_create = count - r.clean.size() - r.dirty.size();
  d.counts.creating += r.to_create;
  Charge(session, uid, count * d.config.chunk_size);
  return r;
}

void ChunkBooks::AddMade(Reservation* r, std::vector<MadeChunk> made) {
  Device& d = devices_[r->device];
  d.counts.creating -= std::min(d.counts.creating, r->to_create);
  for (size_t i = 0; i < made.size() && i < r->to_create; ++i) {
    auto c = std::make_unique<Chunk>();
    c->id = next_id_++;
    c->device = r->device;
    c->handle = made[i].handle;
    c->fd = std::move(made[i].fd);
    c->identity = made[i].identity;
    if (c->identity.known()) by_identity_[c->identity] = c->id;
    c->state = State::kReserved;
    c->lease = r->lease;
    ++d.counts.created;
    ++d.counts.reserved;
    r->made.push_back(c->id);
    chunks_[c->id] = std::move(c);
  }
  r->to_create = 0;
}

std::vector<ChunkBooks::Chunk*> ChunkBooks::HeldBy(const Reservation& r) const {
  std::vector<Chunk*> held;
  held.reserve(r.count);
  for (const std::vector<uint64_t>* ids : {&r.clean, &r.dirty, &r.made}) {
    for (uint64_t id : *ids) {
      Chunk* c = Find(id);
      if (c == nullptr || c->lease != r.lease ||
          (c->state != State::kReserved && c->state != State::kScrubbing)) {
        Errorf(
            "internal error: chunk %d of lease %d is no longer held by the "
            "lease; left alone",
            id, r.lease);
        continue;
      }
      held.push_back(c);
    }
  }
  return held;
}

absl::StatusOr<std::vector<uint64_t>> ChunkBooks::Grant(const Reservation& r) {
  std::vector<Chunk*> held = HeldBy(r);
  if (held.size() != r.count) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "lease %d holds %d of its %d chunks", r.lease, held.size(), r.count));
  }
  Device& d = devices_[r.device];
  SessionHolding& s = sessions_[r.session];
  std::vector<uint64_t> ids;
  ids.reserve(held.size());
  for (Chunk* c : held) {
    --*CounterOf(&d, c->state);
    ++d.counts.leased;
    c->state = State::kLeased;
    c->lease = 0;
    c->session = r.session;
    c->last_uid = r.uid;
    s.chunks.insert(c->id);
    ids.push_back(c->id);
  }
  const uint64_t bytes = r.count * d.config.chunk_size;
  s.uid = r.uid;
  s.totals.in_flight_bytes -= std::min(s.totals.in_flight_bytes, bytes);
  s.totals.leased_bytes += bytes;
  s.totals.leased_chunks += held.size();
  s.totals.leased_chunks_by_device[r.device] += held.size();
  return ids;
}

void ChunkBooks::PutBack(const Reservation& r, bool zeroed) {
  for (Chunk* c : HeldBy(r)) {
    if (c->state == State::kScrubbing && zeroed) c->last_uid = kNoUid;
    MakeFree(c);
  }
  UnchargeInFlight(r.session, r.uid,
                   r.count * devices_[r.device].config.chunk_size);
}

// --- Chunks granted to sessions
// ------------------------------------------------

absl::Status ChunkBooks::CheckLeasedTo(uint64_t session,
                                       absl::Span<const uint64_t> ids) const {
  absl::flat_hash_set<uint64_t> seen;
  for (uint64_t id : ids) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chunk %d is listed twice", id));
    }
    const Chunk* c = Find(id);
    if (c == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chunk %d does not exist", id));
    }
    if (c->state == State::kLeased && c->session == session) continue;
    absl::string_view what = "another session's";
    if (c->state == State::kFree) what = "free";
    if (c->state == State::kReserved || c->state == State::kScrubbing) {
      what = "in a lease still being served, not granted yet";
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "chunk %d is not leased to session %d (it is %s)", id, session, what));
  }
  return absl::OkStatus();
}

uint64_t ChunkBooks::Free(uint64_t session, uint64_t id) {
  Chunk* c = Find(id);
  if (c == nullptr || c->state != State::kLeased || c->session != session) {
    return 0;
  }
  const size_t size = devices_[c->device].config.chunk_size;
  auto it = sessions_.find(session);
  if (it != sessions_.end()) {
    SessionHolding& s = it->second;
    s.chunks.erase(id);
    s.totals.leased_bytes -= std::min<uint64_t>(s.totals.leased_bytes, size);
    if (s.totals.leased_chunks > 0) --s.totals.leased_chunks;
    uint64_t& on_device = s.totals.leased_chunks_by_device[c->device];
    if (on_device > 0) --on_device;
    auto u = uid_bytes_.find(s.uid);
    if (u != uid_bytes_.end()) {
      u->second -= std::min<uint64_t>(u->second, size);
      if (u->second == 0) uid_bytes_.erase(u);
    }
  }
  if (c->adopted) {
    Drop(c);  // `c` is gone
  } else {
    MakeFree(c);
  }
  Forget(session);
  return size;
}

uint64_t ChunkBooks::FreeAll(uint64_t session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return 0;
  const std::vector<uint64_t> ids(it->second.chunks.begin(),
                                  it->second.chunks.end());
  uint64_t bytes = 0;
  // Free may forget the session: `it` is not used past here.
  for (uint64_t id : ids) bytes += Free(session, id);
  return bytes;
}

absl::Status ChunkBooks::CheckDeliverable(
    uint64_t session, absl::Span<const uint64_t> ids) const {
  for (uint64_t id : ids) {
    const Chunk* c = Find(id);
    if (c == nullptr || c->session != session || c->state != State::kLeased) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "chunk %d is no longer leased to session %d (returned before its "
          "lease was claimed?)",
          id, session));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<UniqueFd>> ChunkBooks::DupFds(
    uint64_t session, absl::Span<const uint64_t> ids) const {
  if (absl::Status ok = CheckDeliverable(session, ids); !ok.ok()) return ok;
  std::vector<UniqueFd> fds;
  fds.reserve(ids.size());
  for (uint64_t id : ids) {
    const Chunk* c = Find(id);
    const int fd = ::fcntl(c->fd.get(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("duplicating a chunk descriptor: ", std::strerror(errno),
                       " (raise gmlaked's LimitNOFILE)"));
    }
    fds.emplace_back(fd);
  }
  return fds;
}

absl::StatusOr<std::vector<ChunkHandle>> ChunkBooks::Pin(
    uint64_t session, absl::Span<const uint64_t> ids) {
  if (absl::Status ok = CheckDeliverable(session, ids); !ok.ok()) return ok;
  std::vector<ChunkHandle> handles;
  handles.reserve(ids.size());
  for (uint64_t id : ids) {
    Chunk* c = Find(id);
    ++c->pins;
    handles.push_back(c->handle);
  }
  return handles;
}

void ChunkBooks::Unpin(absl::Span<const uint64_t> ids) {
  for (uint64_t id : ids) {
    if (Chunk* c = Find(id); c != nullptr && c->pins > 0) --c->pins;
  }
}

// --- Who holds what
// ------------------------------------------------------------

void ChunkBooks::Charge(uint64_t session, int64_t uid, uint64_t bytes) {
  SessionHolding& s = sessions_[session];
  s.uid = uid;
  s.totals.in_flight_bytes += bytes;
  uid_bytes_[uid] += bytes;
}

void ChunkBooks::UnchargeInFlight(uint64_t session, int64_t uid,
                                  uint64_t bytes) {
  auto it = sessions_.find(session);
  if (it != sessions_.end()) {
    Holding& t = it->second.totals;
    t.in_flight_bytes -= std::min(t.in_flight_bytes, bytes);
  }
  auto u = uid_bytes_.find(uid);
  if (u != uid_bytes_.end()) {
    u->second -= std::min(u->second, bytes);
    if (u->second == 0) uid_bytes_.erase(u);
  }
  Forget(session);
}

void ChunkBooks::Forget(uint64_t session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  const Holding& t = it->second.totals;
  if (it->second.chunks.empty() && t.leased_bytes == 0 &&
      t.in_flight_bytes == 0) {
    sessions_.erase(it);
  }
}

ChunkBooks::Holding ChunkBooks::holding(uint64_t session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? Holding{} : it->second.totals;
}

uint64_t ChunkBooks::uid_bytes(int64_t uid) const {
  auto it = uid_bytes_.find(uid);
  return it == uid_bytes_.end() ? 0 : it->second;
}

size_t ChunkBooks::holders(int device) const {
  size_t n = 0;
  for (const auto& [id, s] : sessions_) {
    auto it = s.totals.leased_chunks_by_device.find(device);
    if (it != s.totals.leased_chunks_by_device.end() && it->second > 0) ++n;
  }
  return n;
}

// --- Releasing
// -----------------------------------------------------------------

ChunkBooks::Released ChunkBooks::Take(Chunk* c) {
  Device& d = devices_[c->device];
  Released r;
  r.id = c->id;
  r.device = c->device;
  r.handle = c->handle;
  r.fd = std::move(c->fd);
  r.held_data = c->last_uid != kNoUid;
  --d.counts.free;
  --d.counts.created;
  const uint64_t id = c->id;
  if (c->identity.known()) by_identity_.erase(c->identity);
  chunks_.erase(id);  // `c` is gone
  return r;
}

std::vector<ChunkBooks::Released> ChunkBooks::TakeFreeForTrim(int device,
                                                              uint64_t bytes) {
  std::vector<Released> out;
  Device& d = devices_[device];
  const size_t size = d.config.chunk_size;
  // Chunks that would need zeroing before reuse go first.
  std::vector<int64_t> order;
  for (const auto& [uid, list] : d.free_by_uid) {
    if (uid != kNoUid) order.push_back(uid);
  }
  std::sort(order.begin(), order.end());
  order.push_back(kNoUid);
  uint64_t taken = 0;
  for (int64_t uid : order) {
    auto it = d.free_by_uid.find(uid);
    if (it == d.free_by_uid.end()) continue;
    std::vector<uint64_t>& list = it->second;
    std::vector<uint64_t> pinned;  // being exported: not now
    while (!list.empty() && (bytes == 0 || taken + size <= bytes)) {
      const uint64_t id = list.back();
      list.pop_back();
      Chunk* c = Find(id);
      if (c == nullptr || c->state != State::kFree) {
        Errorf(
            "internal error: chunk %d on a free list is not free; dropped "
            "from the list",
            id);
        continue;
      }
      if (c->pins > 0) {
        pinned.push_back(id);
        continue;
      }
      out.push_back(Take(c));
      taken += size;
    }
    list.insert(list.end(), pinned.rbegin(), pinned.rend());
    if (list.empty()) d.free_by_uid.erase(it);
  }
  return out;
}

DeviceHoldings ChunkBooks::Holdings(int device, uint64_t floor_chunks) const {
  const Device& d = devices_[device];
  DeviceHoldings h;
  h.created_chunks = d.counts.created;
  h.floor_chunks = floor_chunks;
  h.free.reserve(d.counts.free);
  for (const auto& [uid, list] : d.free_by_uid) {
    for (uint64_t id : list) {
      const Chunk* c = Find(id);
      // One being exported (returned meanwhile) waits for the next round.
      if (c != nullptr && c->state == State::kFree && c->pins == 0) {
        h.free.push_back({id, c->free_since});
      }
    }
  }
  return h;
}

std::vector<ChunkBooks::Released> ChunkBooks::TakeFree(
    int device, absl::Span<const uint64_t> ids) {
  std::vector<Released> out;
  Device& d = devices_[device];
  absl::flat_hash_set<uint64_t> going;
  for (uint64_t id : ids) {
    const Chunk* c = Find(id);
    if (c != nullptr && c->device == device && c->state == State::kFree &&
        c->pins == 0) {
      going.insert(id);
    }
  }
  for (auto it = d.free_by_uid.begin(); it != d.free_by_uid.end();) {
    std::vector<uint64_t>& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](uint64_t id) { return going.contains(id); }),
               list.end());
    if (list.empty()) {
      d.free_by_uid.erase(it++);
    } else {
      ++it;
    }
  }
  for (uint64_t id : ids) {
    if (!going.contains(id)) continue;
    going.erase(id);  // listed twice: once
    out.push_back(Take(Find(id)));
  }
  return out;
}

std::vector<ChunkBooks::Released> ChunkBooks::TakeAll() {
  std::vector<Released> out;
  out.reserve(chunks_.size());
  for (auto& [id, c] : chunks_) {
    Released r;
    r.id = id;
    r.device = c->device;
    r.handle = c->handle;
    r.fd = std::move(c->fd);
    r.held_data = c->last_uid != kNoUid;
    out.push_back(std::move(r));
  }
  for (Released& r : dropped_) out.push_back(std::move(r));
  dropped_.clear();
  chunks_.clear();
  by_identity_.clear();
  sessions_.clear();
  uid_bytes_.clear();
  for (Device& d : devices_) {
    d.counts = Counts{};
    d.free_by_uid.clear();
  }
  return out;
}

// --- Adopted after a restart
// -----------------------------------------------------------

uint64_t ChunkBooks::Adopt(uint64_t session, int64_t uid, int device,
                           ChunkHandle handle, ChunkIdentity identity) {
  auto c = std::make_unique<Chunk>();
  c->id = next_id_++;
  c->device = device;
  c->handle = handle;
  c->state = State::kLeased;
  c->session = session;
  c->last_uid = uid;
  c->identity = identity;
  c->adopted = true;
  Device& d = devices_[device];
  ++d.counts.created;
  ++d.counts.leased;
  const uint64_t size = d.config.chunk_size;
  SessionHolding& s = sessions_[session];
  s.uid = uid;
  s.chunks.insert(c->id);
  s.totals.leased_bytes += size;
  ++s.totals.leased_chunks;
  ++s.totals.leased_chunks_by_device[device];
  uid_bytes_[uid] += size;
  if (identity.known()) by_identity_[identity] = c->id;
  const uint64_t id = c->id;
  chunks_[id] = std::move(c);
  return id;
}

void ChunkBooks::Drop(Chunk* c) {
  Device& d = devices_[c->device];
  --*CounterOf(&d, c->state);
  --d.counts.created;
  Released r;
  r.id = c->id;
  r.device = c->device;
  r.handle = c->handle;
  r.fd = std::move(c->fd);
  r.held_data = false;  // never zeroed: it was never the daemon's to reuse
  if (c->identity.known()) by_identity_.erase(c->identity);
  dropped_.push_back(std::move(r));
  const uint64_t id = c->id;
  chunks_.erase(id);  // `c` is gone
}

std::vector<ChunkBooks::Released> ChunkBooks::TakeDropped() {
  return std::exchange(dropped_, {});
}

uint64_t ChunkBooks::HeldAs(const ChunkIdentity& identity) const {
  if (!identity.known()) return 0;
  auto it = by_identity_.find(identity);
  return it == by_identity_.end() ? 0 : it->second;
}

}  // namespace gmlake
