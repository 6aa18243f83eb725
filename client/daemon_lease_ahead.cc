// Copyright 2026 The GMLake Authors.
//
// DaemonChunkSource's leasing ahead in the background.
//
// Leasing ahead (daemon_lease.cc, LeaseAhead in chunk_sizing.h) took the
// lease round trips out of growth in small shortfalls, but each chunk still
// cost its way through gmlaked on the malloc that needed it: on an H200
// ~200 us per 2 MiB chunk through gmlaked against ~60 us in the embedded
// lake, of which create, export, transfer and import are gmlaked's part
// (docs/benchmarks.md, "Growth through gmlaked"; threads do not make the
// driver calls faster). So the next step is leased before it is needed:
// once a streak of growth has taken half of what was leased ahead for it,
// the refill thread leases the next step (the size the next shortfall
// would lease ahead with it), and the mallocs that follow find chunks
// already imported. A malloc that finds the stock short while a refill is
// on its way waits for that refill rather than leasing on its own, when
// the refill covers it.
//
// What is leased in the background is leased ahead like the rest: never
// mapped, never asking other sessions (no_pressure), first to go back under
// pressure and once growth pauses, within the process's room; a refill
// refused for want of room pauses leasing ahead (LeaseAheadPause).

#include <thread>
#include <vector>

#include "client/daemon_chunk_source.h"
#include "common/mutex.h"

namespace gmlake {

uint64_t DaemonChunkSource::RefillChunkLocked(const DeviceState& d) {
  return d.ahead_chunk != 0 ? d.ahead_chunk : d.chunk_size;
}

void DaemonChunkSource::MaybeRefillLocked(int device) {
  if (!options_.lease_ahead_in_background || closing_ ||
      !refill_thread_.joinable()) {
    return;
  }
  DeviceState& d = devices_[device];
  if (d.refilling || d.pressed || d.ahead_paused_bytes > 0 ||
      d.chunk_size == 0 || d.streak_bytes == 0 || !lost_.ok()) {
    return;
  }
  // The step the next shortfall would lease ahead with it, in the chunks
  // the streak leased ahead last.
  const uint64_t size = RefillChunkLocked(d);
  const size_t step = AheadChunksLocked(d, d.chunk_size, 0, size);
  const uint64_t want = uint64_t{step} * size;
  if (step == 0 || d.ahead_bytes * 2 >= want) return;
  // A whole step, as the next shortfall would lease it: the leases per GiB
  // grown stay those of leasing ahead on the malloc, and what waits unused
  // stays under 1.5 steps.
  d.refilling = true;
  d.refill_chunks = step;
  refill_wanted_.SignalAll();
}

bool DaemonChunkSource::WaitForRefillLocked(int device, uint64_t bytes) {
  DeviceState& d = devices_[device];
  if (!d.refilling || d.idle_bytes >= bytes ||
      d.idle_bytes + uint64_t{d.refill_chunks} * RefillChunkLocked(d) < bytes) {
    return false;
  }
  const absl::Time deadline = absl::Now() + options_.lease_timeout;
  while (d.refilling && !closing_) {
    if (refill_done_.WaitWithDeadline(&mu_, deadline)) break;
  }
  return true;
}

void DaemonChunkSource::AwaitBackgroundLease(int device) {
  MutexLock l(&mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return;
  while (devices_[device].refilling && !closing_) refill_done_.Wait(&mu_);
}

void DaemonChunkSource::RefillLoop() {
  for (;;) {
    int device = -1;
    size_t count = 0;
    uint64_t size = 0;
    {
      MutexLock l(&mu_);
      while (device < 0) {
        if (closing_) {
          for (DeviceState& d : devices_) d.refilling = false;
          refill_done_.SignalAll();
          return;
        }
        for (size_t i = 0; i < devices_.size() && device < 0; ++i) {
          if (devices_[i].refilling) device = static_cast<int>(i);
        }
        if (device < 0) refill_wanted_.Wait(&mu_);
      }
      count = devices_[device].refill_chunks;
      size = RefillChunkLocked(devices_[device]);
    }
    // Straight to gmlaked, not waiting for a lost one to come back: a
    // refill is worth having only now.
    std::vector<LeasedChunk> got;
    uint64_t epoch = 0;
    const absl::Status s =
        Lost().ok() ? LeaseAndImport(device, count, size, &got, &epoch,
                                     /*no_pressure=*/true)
                    : Lost();
    MutexLock l(&mu_);
    DeviceState& d = devices_[device];
    if (s.ok()) {
      background_leases_.fetch_add(1);
      for (LeasedChunk& c : got) {
        // Ids of a daemon before a restart: kept, uncounted.
        if (epoch != epoch_) c.id = 0;
        d.Idle(c);
        d.ahead_bytes += c.size;
        d.streak_bytes += c.size;
      }
      d.grew = true;
    } else if (absl::IsResourceExhausted(s)) {
      d.PauseAhead(uint64_t{count} * size);
    }
    d.refilling = false;
    d.refill_chunks = 0;
    refill_done_.SignalAll();
  }
}

}  // namespace gmlake
