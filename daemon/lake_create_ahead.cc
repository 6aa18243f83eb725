// Copyright 2026 The GMLake Authors.
//
// The Lake's create-ahead worker (create_ahead_policy.h decides how much):
// a thread that creates and exports chunks of the size a session grows in,
// before its next lease asks, and releases what a streak left unleased once
// it ends. The chunks are free chunks like any other (any lease of their
// size takes them, a lease of another size releases them to make room);
// they keep their creation's export for their first claim.

#include <utility>

#include "common/bytes.h"
#include "common/mutex.h"
#include "daemon/lake.h"
#include "daemon/log.h"

namespace gmlake {

void Lake::NoteGrowthLocked(const ChunkBooks::Reservation& r) {
  ahead_leased_bytes_ += r.from_ahead * r.chunk_bytes;
  if (!options_.create_ahead.enabled() || options_.prefer_reclaim) return;
  const uint64_t grown = (r.made.size() + r.from_ahead) * r.chunk_bytes;
  if (grown == 0) return;
  AheadStreak& s = ahead_streaks_[{r.device, r.chunk_bytes}];
  NoteGrowth(options_.create_ahead, &s.growth, grown, absl::Now());
  s.uid = r.uid;
  ahead_wake_.Signal();
}

void Lake::CreateAheadLoop() {
  for (;;) {
    AheadWork w;
    {
      MutexLock lock(&mu_);
      for (;;) {
        if (shutting_down_) return;
        w = NextAheadWorkLocked(absl::Now());
        if (!w.empty()) break;
        const absl::Time next = NextStreakEndLocked();
        if (next == absl::InfiniteFuture()) {
          ahead_wake_.Wait(&mu_);
        } else {
          ahead_wake_.WaitWithDeadline(&mu_, next);
        }
      }
    }
    DoAheadWork(std::move(w));
  }
}

absl::Time Lake::NextStreakEndLocked() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, s] : ahead_streaks_) {
    next = std::min(next, s.growth.last + options_.create_ahead.streak_gap);
  }
  return next;
}

Lake::AheadWork Lake::NextAheadWorkLocked(absl::Time now) {
  AheadWork w;
  const CreateAheadPolicy& policy = options_.create_ahead;
  // Ended streaks first: their stock goes back.
  for (auto it = ahead_streaks_.begin(); it != ahead_streaks_.end();) {
    const auto [device, size] = it->first;
    if (!StreakEnded(policy, it->second.growth, now)) {
      ++it;
      continue;
    }
    std::vector<ChunkBooks::Released> gone =
        books_.TakeFree(device, books_.AheadIds(device, size));
    for (ChunkBooks::Released& c : gone) w.expired.push_back(std::move(c));
    it = ahead_streaks_.erase(it);
  }
  if (!w.expired.empty()) return w;
  // Nobody to create for: a job that ended leaves the card to whoever
  // comes next.
  if (sessions_.live().empty()) return w;
  for (const auto& [key, s] : ahead_streaks_) {
    const auto [device, size] = key;
    const uint64_t n = ChunksToCreateAhead(
        policy, s.growth, size, books_.ahead_bytes(device, size),
        books_.room(device), books_.capacity_bytes(device), now);
    if (n == 0) continue;
    books_.SetAside(device, n * size);
    w.device = device;
    w.chunk_bytes = size;
    w.count = n;
    w.uid = s.uid;
    return w;
  }
  return w;
}

void Lake::DoAheadWork(AheadWork w) {
  if (!w.expired.empty()) {
    uint64_t bytes = 0;
    for (const ChunkBooks::Released& c : w.expired) bytes += c.size;
    ReleaseToDriver(std::move(w.expired));
    MutexLock lock(&mu_);
    ahead_released_bytes_ += bytes;
    freed_.SignalAll();  // capacity to create anew
    return;
  }
  std::vector<ChunkBooks::MadeChunk> made;
  absl::Status s = CreateChunks(w.device, w.count, w.chunk_bytes,
                                /*for_delivery=*/true, &made);
  RecreatedChunks rec;
  absl::Status zeroed =
      ZeroRecreated(w.device, w.uid, w.chunk_bytes, made, &rec);
  if (!zeroed.ok()) {
    // Some may hold another uid's data: never filed.
    for (const ChunkBooks::MadeChunk& m : made) {
      backend_->ReleaseChunk(m.handle).IgnoreError();
    }
    made.clear();
    s = zeroed;
  }
  MutexLock lock(&mu_);
  // Released unfiled: what they may hold of the uid's own is owed again.
  if (!zeroed.ok() && rec.own > 0) {
    unzeroed_released_[w.device][w.uid] += rec.own * w.chunk_bytes;
  }
  books_.EndSetAside(w.device, w.count * w.chunk_bytes);
  // made[0, zeroed) were zeroed, made[zeroed, zeroed + own) may hold the
  // uid's own data, the rest is fresh (ZeroRecreated).
  for (size_t k = 0; k < made.size(); ++k) {
    ChunkBooks::MadeChunk& m = made[k];
    const bool owns = k >= rec.zeroed && k < rec.zeroed + rec.own;
    books_.AddAhead(w.device, m.handle, w.chunk_bytes, std::move(m.fd),
                    m.identity, owns ? w.uid : kNoUid);
  }
  created_ahead_bytes_ += made.size() * w.chunk_bytes;
  if (!made.empty()) freed_.SignalAll();  // free chunks for waiting leases
  if (!s.ok()) {
    // Out of device memory or descriptors: no more for this streak (the
    // next growth starts another).
    Warnf("creating %d chunks of %s ahead on device %d: %s", w.count,
          FormatBytes(w.chunk_bytes), w.device, s.ToString());
    ahead_streaks_.erase({w.device, w.chunk_bytes});
  }
}

}  // namespace gmlake
