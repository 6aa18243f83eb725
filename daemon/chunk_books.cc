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

uint64_t ChunkBooks::capacity_bytes(int device) const {
  return devices_[device].config.capacity_bytes;
}

void ChunkBooks::Tally::Sub(uint64_t size) {
  if (chunks > 0) --chunks;
  bytes -= std::min(bytes, size);
}

ChunkBooks::Counts ChunkBooks::counts(int device) const {
  return devices_[device].counts;
}

uint64_t ChunkBooks::room(int device) const {
  const Device& d = devices_[device];
  const uint64_t taken = d.counts.created.bytes + d.counts.creating_bytes;
  return d.config.capacity_bytes - std::min(taken, d.config.capacity_bytes);
}

uint64_t ChunkBooks::free_bytes_of_size(int device, uint64_t size) const {
  const Device& d = devices_[device];
  auto it = d.free_by_size.find(size);
  if (it == d.free_by_size.end()) return 0;
  uint64_t chunks = 0;
  for (const auto& [uid, list] : it->second) chunks += list.size();
  return chunks * size;
}

bool ChunkBooks::CanReserve(int device, uint64_t count, uint64_t size,
                            uint64_t grow_limit, uint64_t* short_bytes,
                            bool client_makes) const {
  const Device& d = devices_[device];
  const uint64_t want = count * size;
  const uint64_t reuse =
      client_makes ? 0 : std::min(want, free_bytes_of_size(device, size));
  const uint64_t to_make = want - reuse;
  uint64_t have = std::min(room(device), grow_limit);
  // Free chunks of other sizes (of any, for a client's own) that could be
  // released to make room (pinned ones are being exported: not now).
  for (auto it = d.free_by_size.begin();
       it != d.free_by_size.end() && have < to_make; ++it) {
    if (it->first == size && !client_makes) continue;
    for (const auto& [uid, list] : it->second) {
      for (uint64_t id : list) {
        const Chunk* c = Find(id);
        if (c != nullptr && c->state == State::kFree && c->pins == 0) {
          have += c->size;
          if (have >= to_make) break;
        }
      }
      if (have >= to_make) break;
    }
  }
  if (have >= to_make) return true;
  if (short_bytes != nullptr) *short_bytes = to_make - have;
  return false;
}

ChunkBooks::Chunk* ChunkBooks::Find(uint64_t id) const {
  auto it = chunks_.find(id);
  return it == chunks_.end() ? nullptr : it->second.get();
}

ChunkBooks::Tally* ChunkBooks::CounterOf(Device* d, State state) {
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

void ChunkBooks::ListFree(Device* d, const Chunk& c) {
  d->counts.free.Add(c.size);
  d->free_by_size[c.size][c.last_uid].push_back(c.id);
}

ChunkBooks::Chunk* ChunkBooks::UnlistFree(Device* d,
                                          std::vector<uint64_t>* list) {
  const uint64_t id = list->back();
  list->pop_back();
  Chunk* c = Find(id);
  if (c == nullptr || c->state != State::kFree) {
    Errorf(
        "internal error: chunk %d on a free list is not free; dropped from "
        "the list",
        id);
    return nullptr;
  }
  d->counts.free.Sub(c->size);
  return c;
}

uint64_t ChunkBooks::TakeUnpinned(Device* d, std::vector<uint64_t>* list,
                                  uint64_t budget, bool may_exceed,
                                  std::vector<Released>* out) {
  uint64_t taken = 0;
  std::vector<uint64_t> pinned;  // being exported: not now
  while (!list->empty()) {
    const Chunk* next = Find(list->back());
    if (next != nullptr && next->pins > 0) {
      pinned.push_back(list->back());
      list->pop_back();
      continue;
    }
    const uint64_t size = next == nullptr ? 0 : next->size;
    if (budget != 0 && (may_exceed ? taken >= budget : taken + size > budget)) {
      break;
    }
    Chunk* c = UnlistFree(d, list);
    if (c == nullptr) continue;
    d->counts.free.Add(c->size);  // back for a moment: Take counts it out
    taken += c->size;
    out->push_back(Take(c));
  }
  list->insert(list->end(), pinned.rbegin(), pinned.rend());
  return taken;
}

void ChunkBooks::PruneFreeLists(Device* d) {
  for (auto s = d->free_by_size.begin(); s != d->free_by_size.end();) {
    FreeLists& lists = s->second;
    for (auto it = lists.begin(); it != lists.end();) {
      if (it->second.empty()) {
        lists.erase(it++);
      } else {
        ++it;
      }
    }
    if (lists.empty()) {
      d->free_by_size.erase(s++);
    } else {
      ++s;
    }
  }
}

void ChunkBooks::MakeFree(Chunk* c) {
  Device& d = devices_[c->device];
  CounterOf(&d, c->state)->Sub(c->size);
  c->state = State::kFree;
  c->lease = 0;
  c->session = 0;
  c->free_since = absl::Now();
  ListFree(&d, *c);
}

uint64_t ChunkBooks::AddFree(int device, ChunkHandle handle, uint64_t size,
                             UniqueFd fd, ChunkIdentity identity) {
  auto c = std::make_unique<Chunk>();
  c->id = next_id_++;
  c->device = device;
  c->handle = handle;
  c->size = size;
  c->fd = std::move(fd);
  c->identity = identity;
  if (identity.known()) by_identity_[identity] = c->id;
  c->free_since = absl::Now();
  Device& d = devices_[device];
  d.counts.created.Add(size);
  ListFree(&d, *c);
  const uint64_t id = c->id;
  chunks_[id] = std::move(c);
  return id;
}

// --- Leases in flight
// ----------------------------------------------------------

ChunkBooks::Reservation ChunkBooks::Reserve(uint64_t lease, uint64_t session,
                                            int64_t uid, int device,
                                            uint64_t count, uint64_t size,
                                            uint64_t grow_limit,
                                            bool client_makes) {
  Reservation r;
  r.client_makes = client_makes;
  r.lease = lease;
  r.session = session;
  r.uid = uid;
  r.device = device;
  r.count = count;
  r.chunk_bytes = size;
  Device& d = devices_[device];
  FreeLists* lists = nullptr;
  if (auto it = d.free_by_size.find(size); it != d.free_by_size.end()) {
    lists = &it->second;
  }
  auto take_from = [&](int64_t from_uid) {
    if (lists == nullptr) return;
    auto it = lists->find(from_uid);
    if (it == lists->end()) return;
    std::vector<uint64_t>& list = it->second;
    const bool scrub = NeedsScrub(scrub_, from_uid, uid);
    while (!list.empty() && r.clean.size() + r.dirty.size() < count) {
      Chunk* c = UnlistFree(&d, &list);
      if (c == nullptr) continue;
      c->lease = lease;
      if (scrub) {
        c->state = State::kScrubbing;
        d.counts.scrubbing.Add(c->size);
        r.dirty.push_back(c->id);
        r.dirty_handles.push_back(c->handle);
      } else {
        c->state = State::kReserved;
        d.counts.reserved.Add(c->size);
        r.clean.push_back(c->id);
      }
    }
  };
  // A client that makes its chunks takes none of the lake's.
  if (client_makes) lists = nullptr;
  // Chunks that need no zeroing first: fresh ones, then this uid's own.
  take_from(kNoUid);
  take_from(uid);
  if (lists != nullptr) {
    std::vector<int64_t> others;
    for (const auto& [other, list] : *lists) others.push_back(other);
    std::sort(others.begin(), others.end());
    for (int64_t other : others) {
      if (r.clean.size() + r.dirty.size() >= count) break;
      take_from(other);
    }
  }
  r.to_create = count - r.clean.size() - r.dirty.size();
  const uint64_t to_make = r.to_create * size;
  const uint64_t room_left = std::min(room(device), grow_limit);
  if (to_make > room_left) {
    r.recycled = Recycle(device, client_makes ? 0 : size, to_make - room_left);
  }
  PruneFreeLists(&d);
  d.counts.creating_bytes += to_make;
  Charge(session, uid, r.bytes());
  return r;
}

std::vector<ChunkBooks::Released> ChunkBooks::Recycle(int device, uint64_t size,
                                                      uint64_t bytes) {
  Device& d = devices_[device];
  std::vector<Released> out;
  uint64_t got = 0;
  // Largest first (fewest driver calls), fresh ones before those that
  // would need zeroing before release.
  for (auto s = d.free_by_size.rbegin(); s != d.free_by_size.rend(); ++s) {
    if (size != 0 && s->first == size) continue;
    std::vector<int64_t> order;
    for (const auto& [uid, list] : s->second) {
      if (uid != kNoUid) order.push_back(uid);
    }
    std::sort(order.begin(), order.end());
    order.insert(order.begin(), kNoUid);
    for (int64_t uid : order) {
      auto it = s->second.find(uid);
      if (it == s->second.end()) continue;
      got +=
          TakeUnpinned(&d, &it->second, bytes - got, /*may_exceed=*/true, &out);
      if (got >= bytes) return out;
    }
  }
  return out;
}

void ChunkBooks::AddMade(Reservation* r, std::vector<MadeChunk> made) {
  FileMade(r, &made);
}

void ChunkBooks::AddClientMade(Reservation* r) { FileMade(r, nullptr); }

void ChunkBooks::FileMade(Reservation* r, std::vector<MadeChunk>* made) {
  Device& d = devices_[r->device];
  d.counts.creating_bytes -=
      std::min(d.counts.creating_bytes, r->to_create * r->chunk_bytes);
  // Its client's (made == null): one record per chunk it makes, no handle.
  const uint64_t n = made == nullptr
                         ? r->to_create
                         : std::min<uint64_t>(made->size(), r->to_create);
  for (uint64_t i = 0; i < n; ++i) {
    auto c = std::make_unique<Chunk>();
    c->id = next_id_++;
    c->device = r->device;
    c->size = r->chunk_bytes;
    if (made == nullptr) {
      c->client_made = true;
    } else {
      c->handle = (*made)[i].handle;
      c->fd = std::move((*made)[i].fd);
      c->identity = (*made)[i].identity;
      if (c->identity.known()) by_identity_[c->identity] = c->id;
    }
    c->state = State::kReserved;
    c->lease = r->lease;
    d.counts.created.Add(c->size);
    d.counts.reserved.Add(c->size);
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
  Tally& on_device = s.totals.leased_by_device[r.device];
  for (Chunk* c : held) {
    CounterOf(&d, c->state)->Sub(c->size);
    d.counts.leased.Add(c->size);
    c->state = State::kLeased;
    c->lease = 0;
    c->session = r.session;
    c->last_uid = r.uid;
    s.chunks.insert(c->id);
    ids.push_back(c->id);
    on_device.Add(c->size);
  }
  const uint64_t bytes = r.bytes();
  s.uid = r.uid;
  s.totals.in_flight_bytes -= std::min(s.totals.in_flight_bytes, bytes);
  s.totals.leased_bytes += bytes;
  s.totals.leased_chunks += held.size();
  return ids;
}

void ChunkBooks::PutBack(const Reservation& r, bool zeroed) {
  for (Chunk* c : HeldBy(r)) {
    if (c->client_made) {  // never made: its capacity is free again
      Drop(c);
      continue;
    }
    if (c->state == State::kScrubbing && zeroed) c->last_uid = kNoUid;
    MakeFree(c);
  }
  UnchargeInFlight(r.session, r.uid, r.bytes());
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
  const uint64_t size = c->size;
  auto it = sessions_.find(session);
  if (it != sessions_.end()) {
    SessionHolding& s = it->second;
    s.chunks.erase(id);
    s.totals.leased_bytes -= std::min<uint64_t>(s.totals.leased_bytes, size);
    if (s.totals.leased_chunks > 0) --s.totals.leased_chunks;
    s.totals.leased_by_device[c->device].Sub(size);
    auto u = uid_bytes_.find(s.uid);
    if (u != uid_bytes_.end()) {
      u->second -= std::min<uint64_t>(u->second, size);
      if (u->second == 0) uid_bytes_.erase(u);
    }
  }
  if (c->adopted || c->client_made) {
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
    if (c->client_made) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "chunk %d is one session %d makes itself (a lease with "
          "client_makes): gmlaked holds no descriptor of it to send",
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

UniqueFd ChunkBooks::TakeCreationFd(uint64_t id) {
  Chunk* c = Find(id);
  return c != nullptr ? std::move(c->fd) : UniqueFd();
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
    auto it = s.totals.leased_by_device.find(device);
    if (it != s.totals.leased_by_device.end() && it->second.chunks > 0) ++n;
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
  r.size = c->size;
  r.fd = std::move(c->fd);
  r.held_data = c->last_uid != kNoUid;
  r.uid = c->last_uid;
  d.counts.free.Sub(c->size);
  d.counts.created.Sub(c->size);
  const uint64_t id = c->id;
  if (c->identity.known()) by_identity_.erase(c->identity);
  chunks_.erase(id);  // `c` is gone
  return r;
}

std::vector<ChunkBooks::Released> ChunkBooks::TakeFreeForTrim(int device,
                                                              uint64_t bytes) {
  std::vector<Released> out;
  Device& d = devices_[device];
  uint64_t taken = 0;
  // Chunks that would need zeroing before reuse go first, then fresh ones;
  // within each, the largest sizes first.
  for (const bool fresh : {false, true}) {
    for (auto s = d.free_by_size.rbegin(); s != d.free_by_size.rend(); ++s) {
      const uint64_t size = s->first;
      std::vector<int64_t> order;
      for (const auto& [uid, list] : s->second) {
        if ((uid == kNoUid) == fresh) order.push_back(uid);
      }
      std::sort(order.begin(), order.end());
      for (int64_t uid : order) {
        if (bytes != 0 && taken + size > bytes) break;
        taken +=
            TakeUnpinned(&d, &s->second[uid], bytes == 0 ? 0 : bytes - taken,
                         /*may_exceed=*/false, &out);
      }
    }
  }
  PruneFreeLists(&d);
  return out;
}

DeviceHoldings ChunkBooks::Holdings(int device, uint64_t floor_bytes) const {
  const Device& d = devices_[device];
  DeviceHoldings h;
  h.created_bytes = d.counts.created.bytes;
  h.floor_bytes = floor_bytes;
  h.in_use = d.counts.leased.chunks + d.counts.reserved.chunks > 0 ||
             d.counts.creating_bytes > 0;
  h.free.reserve(d.counts.free.chunks);
  for (const auto& [size, lists] : d.free_by_size) {
    for (const auto& [uid, list] : lists) {
      for (uint64_t id : list) {
        const Chunk* c = Find(id);
        // One being exported (returned meanwhile) waits for the next round.
        if (c != nullptr && c->state == State::kFree && c->pins == 0) {
          h.free.push_back({id, c->free_since, c->size});
        }
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
  for (auto& [size, lists] : d.free_by_size) {
    for (auto& [uid, list] : lists) {
      list.erase(
          std::remove_if(list.begin(), list.end(),
                         [&](uint64_t id) { return going.contains(id); }),
          list.end());
    }
  }
  for (uint64_t id : ids) {
    if (!going.contains(id)) continue;
    going.erase(id);  // listed twice: once
    out.push_back(Take(Find(id)));
  }
  PruneFreeLists(&d);
  return out;
}

std::vector<ChunkBooks::Released> ChunkBooks::TakeAll() {
  std::vector<Released> out;
  out.reserve(chunks_.size());
  for (auto& [id, c] : chunks_) {
    if (c->client_made) continue;  // no handle here: its client's to release
    Released r;
    r.id = id;
    r.device = c->device;
    r.handle = c->handle;
    r.size = c->size;
    r.fd = std::move(c->fd);
    r.held_data = c->last_uid != kNoUid;
    r.uid = c->last_uid;
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
    d.free_by_size.clear();
  }
  return out;
}

// --- Adopted after a restart
// -----------------------------------------------------------

uint64_t ChunkBooks::Adopt(uint64_t session, int64_t uid, int device,
                           ChunkHandle handle, uint64_t size,
                           ChunkIdentity identity) {
  auto c = std::make_unique<Chunk>();
  c->id = next_id_++;
  c->device = device;
  c->handle = handle;
  c->size = size;
  c->state = State::kLeased;
  c->session = session;
  c->last_uid = uid;
  c->identity = identity;
  c->adopted = true;
  Device& d = devices_[device];
  d.counts.created.Add(size);
  d.counts.leased.Add(size);
  SessionHolding& s = sessions_[session];
  s.uid = uid;
  s.chunks.insert(c->id);
  s.totals.leased_bytes += size;
  ++s.totals.leased_chunks;
  s.totals.leased_by_device[device].Add(size);
  uid_bytes_[uid] += size;
  if (identity.known()) by_identity_[identity] = c->id;
  const uint64_t id = c->id;
  chunks_[id] = std::move(c);
  return id;
}

void ChunkBooks::Drop(Chunk* c) {
  Device& d = devices_[c->device];
  CounterOf(&d, c->state)->Sub(c->size);
  d.counts.created.Sub(c->size);
  Released r;
  r.id = c->id;
  r.device = c->device;
  r.handle = c->handle;
  r.size = c->size;
  r.fd = std::move(c->fd);
  r.held_data = false;  // never zeroed: it was never the daemon's to reuse
  if (c->identity.known()) by_identity_.erase(c->identity);
  // A chunk its client made has no handle here: nothing to release.
  if (!c->client_made) dropped_.push_back(std::move(r));
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
