// Copyright 2026 The GMLake Authors.

#include "tools/replay.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/allocator.h"
#include "client/embedded_lake.h"
#include "client/open_chunk_source.h"
#include "client/options.h"

namespace gmlake {
namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<uint32_t>* v, double q) {
  if (v->empty()) return 0;
  const size_t k = std::min(v->size() - 1, static_cast<size_t>(v->size() * q));
  std::nth_element(v->begin(), v->begin() + k, v->end());
  return (*v)[k];
}

}  // namespace

absl::Status ReplayEvents(const Trace& trace, Allocator* allocator,
                          std::vector<DevicePtr>* ptr) {
  for (const TraceEvent& e : trace.events) {
    DevicePtr& p = (*ptr)[e.id];
    if (e.alloc) {
      absl::StatusOr<DevicePtr> got = allocator->Malloc(e.size, 0, e.stream);
      if (!got.ok()) return got.status();
      p = *got;
    } else if (p != 0) {
      if (absl::Status s = allocator->Free(p); !s.ok()) return s;
      p = 0;
    }
  }
  return absl::OkStatus();
}

namespace {

uint32_t NanosSince(Clock::time_point a) {
  return static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - a)
          .count());
}

// The median cost of reading the clock twice, to subtract by eye from the
// per-operation times.
double ClockFloorNs() {
  std::vector<uint32_t> empty(10000);
  for (uint32_t& e : empty) e = NanosSince(Clock::now());
  return Percentile(&empty, 0.5);
}

// One replay's running books: each id's pointer and size, the bytes live,
// the operation times of the second half and the call counts at its start.
struct ReplayRun {
  ReplayRun(const Trace& trace, const VmmCallSnapshot& start)
      : ptr(trace.num_ids, 0), live_size(trace.num_ids, 0), at_half(start) {}
  std::vector<DevicePtr> ptr;
  std::vector<uint64_t> live_size;
  uint64_t live = 0;
  std::vector<uint32_t> nanos;
  VmmCallSnapshot at_half;
};

// Replays the events into `allocator`, filling `r`'s timeline, first-half
// peak and, where the allocator ran out, failed_event and error. Returns
// whether every event was served; an error other than running out is
// returned as it is.
absl::StatusOr<bool> RunEvents(const Trace& trace, const ReplayConfig& config,
                               VmmBackend* backend, Allocator& allocator,
                               ReplayRun* run, ReplayResult* r) {
  const size_t n = trace.events.size();
  const size_t half = n / 2;
  if (config.time_ops) run->nanos.reserve(n - half);
  // Reserved bytes change only in the slow path and, with no capacity,
  // only grow: samples at evenly spaced events miss no peak.
  const size_t sample_every =
      config.timeline_points == 0
          ? 0
          : std::max<size_t>(1, n / config.timeline_points);
  auto sample = [&](size_t done) {
    r->reserved_timeline.push_back(
        {done,
         static_cast<uint64_t>(allocator.stats(0).reserved_bytes.current)});
  };
  if (sample_every != 0) sample(0);
  for (size_t i = 0; i < n; ++i) {
    if (i == half) run->at_half = backend->call_stats();
    const TraceEvent& e = trace.events[i];
    if (e.alloc) {
      run->live_size[e.id] = e.size;
      run->live += e.size;
      if (i < half) {
        r->first_half_peak_live_bytes =
            std::max(r->first_half_peak_live_bytes, run->live);
      }
    } else {
      run->live -= run->live_size[e.id];
    }
    Clock::time_point a;
    if (config.time_ops) a = Clock::now();
    if (e.alloc) {
      absl::StatusOr<DevicePtr> p = allocator.Malloc(e.size, 0, e.stream);
      if (!p.ok()) {
        if (!absl::IsResourceExhausted(p.status())) return p.status();
        r->failed_event = i;
        r->error = std::string(p.status().message());
        return false;
      }
      run->ptr[e.id] = *p;
    } else {
      absl::Status s = allocator.Free(run->ptr[e.id]);
      if (!s.ok()) return s;
      run->ptr[e.id] = 0;
    }
    if (config.time_ops && i >= half) run->nanos.push_back(NanosSince(a));
    if (sample_every != 0 && ((i + 1) % sample_every == 0 || i + 1 == n)) {
      sample(i + 1);
    }
    if (config.check_every != 0 && i % config.check_every == 0) {
      if (absl::Status s = allocator.CheckInvariants(); !s.ok()) {
        return absl::InternalError(
            absl::StrCat("after event ", i, ": ", s.message()));
      }
    }
  }
  return true;
}

// Frees what the replay left live and checks that nothing stays allocated.
absl::Status FreeTheRest(const ReplayConfig& config, Allocator& allocator,
                         ReplayRun* run, ReplayResult* r) {
  for (DevicePtr p : run->ptr) {
    if (p == 0) continue;
    if (absl::Status s = allocator.Free(p); !s.ok()) return s;
  }
  r->allocated_after_frees = allocator.stats(0).allocated_bytes.current;
  if (config.check_every != 0) {
    if (absl::Status s = allocator.CheckInvariants(); !s.ok()) {
      return absl::InternalError(
          absl::StrCat("after the final frees: ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReplayResult> ReplayTrace(const Trace& trace,
                                         const ReplayConfig& config,
                                         uint64_t capacity) {
  BackendOptions bo;
  bo.kind = config.backend;
  // The emulated device is as large as the run may need; the cap under test
  // is the lake's capacity, not the device's.
  bo.host_capacity_bytes = uint64_t{1} << 40;
  absl::StatusOr<std::unique_ptr<VmmBackend>> backend = CreateBackend(bo);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<AllocatorOptions> options =
      ParseConf(config.conf, AllocatorOptions{});
  if (!options.ok()) return options.status();
  EmbeddedLake lake(backend->get(), options->chunk_size,
                    GrowthSizing(*options));
  if (capacity != 0) {
    if (absl::Status s = lake.SetCapacity(0, capacity); !s.ok()) return s;
  }
  ReplayResult r;
  Allocator allocator(&lake, *options);
  if (config.time_ops) r.timer_ns_p50 = ClockFloorNs();
  const VmmCallSnapshot start = (*backend)->call_stats();
  ReplayRun run(trace, start);
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<bool> completed =
      RunEvents(trace, config, backend->get(), allocator, &run, &r);
  if (!completed.ok()) return completed.status();
  r.completed = *completed;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const VmmCallSnapshot end = (*backend)->call_stats();
  r.calls = end - start;
  r.calls_second_half = end - run.at_half;
  r.stats = allocator.stats(0);
  if (trace.peak_live_bytes > r.first_half_peak_live_bytes) {
    const uint64_t chunk = options->chunk_size != 0
                               ? options->chunk_size
                               : (*backend)->granularity(0);
    const uint64_t added = trace.peak_live_bytes - r.first_half_peak_live_bytes;
    r.calls_for_second_half_peak = 2 * ((added + chunk - 1) / chunk);
  }
  r.peak_reserved_bytes = static_cast<uint64_t>(r.stats.reserved_bytes.peak);
  r.ns_per_op_p50 = Percentile(&run.nanos, 0.50);
  r.ns_per_op_p99 = Percentile(&run.nanos, 0.99);
  if (absl::Status s = FreeTheRest(config, allocator, &run, &r); !s.ok()) {
    return s;
  }
  return r;
}

absl::StatusOr<uint64_t> BisectMinCapacity(
    const Trace& trace, const ReplayConfig& config, uint64_t lo, uint64_t hi,
    uint64_t resolution,
    const std::function<void(uint64_t capacity, bool ok)>& progress) {
  ReplayConfig quiet = config;
  quiet.time_ops = false;
  quiet.check_every = 0;
  while (hi - lo > resolution) {
    const uint64_t mid = lo + (hi - lo) / 2;
    absl::StatusOr<ReplayResult> r = ReplayTrace(trace, quiet, mid);
    if (!r.ok()) return r.status();
    if (progress) progress(mid, r->completed);
    if (r->completed) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

}  // namespace gmlake
