// Copyright 2026 The GMLake Authors.

#include "daemon/metrics.h"

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/prometheus_text.h"

namespace gmlake {
namespace {

using Labels = PrometheusText::Labels;

// One gauge family with a sample per device.
void PerDevice(PrometheusText* t, const v1::StatusResponse& st,
               absl::string_view name, absl::string_view help,
               const std::function<double(const v1::DeviceStatus&)>& value) {
  t->Family(name, "gauge", help);
  for (const v1::DeviceStatus& d : st.devices()) {
    t->Sample(name, {{"device", absl::StrCat(d.device())}}, value(d));
  }
}

void PerDeviceBytes(
    PrometheusText* t, const v1::StatusResponse& st, absl::string_view name,
    absl::string_view help,
    const std::function<uint64_t(const v1::DeviceStatus&)>& value) {
  t->Family(name, "gauge", help);
  for (const v1::DeviceStatus& d : st.devices()) {
    t->Sample(name, {{"device", absl::StrCat(d.device())}}, value(d));
  }
}

void Counter(PrometheusText* t, absl::string_view name, absl::string_view help,
             uint64_t value) {
  t->Family(name, "counter", help);
  t->Sample(name, {}, value);
}

void HistogramFamily(PrometheusText* t, absl::string_view name,
                     absl::string_view help, const v1::Histogram& h) {
  t->Family(name, "histogram", help);
  t->Histogram(
      name, {},
      std::vector<double>(h.upper_bounds().begin(), h.upper_bounds().end()),
      std::vector<uint64_t>(h.cumulative_counts().begin(),
                            h.cumulative_counts().end()),
      h.sum(), h.count());
}

// What gmlaked runs with, and for how long.
void RenderInfo(const v1::StatusResponse& st, PrometheusText* t) {
  t->Family("gmlake_info", "gauge",
            "Always 1; the labels say which backend, protocol and scrub "
            "policy gmlaked runs with.");
  t->Sample("gmlake_info",
            {{"backend", st.backend()},
             {"protocol", absl::StrCat(st.protocol_version())},
             {"scrub", st.scrub_policy()}},
            uint64_t{1});
  t->Family("gmlake_uptime_seconds", "gauge", "Seconds since gmlaked started.");
  t->Sample("gmlake_uptime_seconds", {}, st.uptime_seconds());
}

// The books, per device.
void RenderDeviceBooks(const v1::StatusResponse& st, PrometheusText* t) {
  using D = v1::DeviceStatus;
  PerDeviceBytes(t, st, "gmlake_capacity_bytes",
                 "Most bytes the lake creates on the device (--capacity).",
                 [](const D& d) { return d.capacity_bytes(); });
  PerDeviceBytes(t, st, "gmlake_chunk_size_bytes",
                 "Size of every chunk on the device.",
                 [](const D& d) { return d.chunk_size(); });
  PerDeviceBytes(t, st, "gmlake_created_bytes",
                 "Bytes of chunks the lake holds from the driver: leased + "
                 "free + scrubbing.",
                 [](const D& d) { return d.created_bytes(); });
  PerDeviceBytes(t, st, "gmlake_leased_bytes",
                 "Bytes of chunks leased to sessions.",
                 [](const D& d) { return d.leased_bytes(); });
  PerDeviceBytes(t, st, "gmlake_free_bytes",
                 "Bytes of chunks free in the lake, ready to lease.",
                 [](const D& d) { return d.free_bytes(); });
  PerDeviceBytes(t, st, "gmlake_scrubbing_bytes",
                 "Bytes of chunks being zeroed for a lease.",
                 [](const D& d) { return d.scrubbing_bytes(); });
  PerDeviceBytes(t, st, "gmlake_creating_bytes",
                 "Bytes of chunks being created for leases (not yet in "
                 "created).",
                 [](const D& d) { return d.creating_bytes(); });
  PerDeviceBytes(t, st, "gmlake_floor_bytes",
                 "Bytes the lake keeps created however long they sit free "
                 "(--precreate).",
                 [](const D& d) { return d.floor_bytes(); });
  PerDeviceBytes(t, st, "gmlake_idle_bytes",
                 "Free bytes above the floor, going back to the driver once "
                 "idle for --release_idle.",
                 [](const D& d) { return d.idle_bytes(); });
  PerDeviceBytes(t, st, "gmlake_ending_bytes",
                 "Leased bytes of sessions that ended while their process "
                 "runs, kept until it exits.",
                 [](const D& d) { return d.ending_bytes(); });
  PerDeviceBytes(t, st, "gmlake_created_chunks", "Chunks created.",
                 [](const D& d) { return d.created_chunks(); });
  PerDeviceBytes(t, st, "gmlake_leased_chunks", "Chunks leased.",
                 [](const D& d) { return d.leased_chunks(); });
  PerDeviceBytes(t, st, "gmlake_free_chunks", "Chunks free.",
                 [](const D& d) { return d.free_chunks(); });
  PerDeviceBytes(t, st, "gmlake_scrubbing_chunks", "Chunks being zeroed.",
                 [](const D& d) { return d.scrubbing_chunks(); });
  PerDevice(t, st, "gmlake_next_release_seconds",
            "Seconds until the next idle chunk goes back to the driver (-1: "
            "none will).",
            [](const D& d) { return d.next_release_seconds(); });
}

// Sessions by state.
void RenderSessions(const v1::StatusResponse& st, PrometheusText* t) {
  uint64_t unbound = 0, bound = 0, watching = 0, ending = 0;
  for (const v1::SessionStatus& s : st.sessions()) {
    if (s.ending()) {
      ++ending;
    } else if (!s.bound()) {
      ++unbound;
    } else if (s.watching()) {
      ++watching;
    } else {
      ++bound;
    }
  }
  t->Family("gmlake_sessions", "gauge",
            "Sessions by state: unbound (not yet on the fd socket), bound, "
            "watching (pressure stream open), ending (ended, chunks kept "
            "until the process exits).");
  t->Sample("gmlake_sessions", {{"state", "unbound"}}, unbound);
  t->Sample("gmlake_sessions", {{"state", "bound"}}, bound);
  t->Sample("gmlake_sessions", {{"state", "watching"}}, watching);
  t->Sample("gmlake_sessions", {{"state", "ending"}}, ending);
}

// Counters of leases, sessions and pressure since gmlaked started.
void RenderLeaseCounters(const v1::StatusResponse& st, PrometheusText* t) {
  Counter(t, "gmlake_leases_served_total", "Leases granted.",
          st.leases_served());
  Counter(t, "gmlake_leases_failed_total",
          "Leases refused or failed (quota, no memory, bad request).",
          st.leases_failed());
  Counter(t, "gmlake_sessions_ended_total", "Sessions ended, for any reason.",
          st.sessions_ended());
  Counter(t, "gmlake_pressure_requests_total",
          "Requests sent to sessions to return memory.",
          st.pressure_requests_sent());
  Counter(t, "gmlake_pressure_rounds_total",
          "Rounds of pressure requests: one per lease that had to ask "
          "others, one more each time it asked further.",
          st.pressure_rounds());
  Counter(t, "gmlake_pressure_asked_bytes_total",
          "Bytes that pressure requests asked sessions to return.",
          st.pressure_asked_bytes());
  Counter(t, "gmlake_pressure_promised_bytes_total",
          "Of the bytes asked, those the sessions' cache reports promised "
          "(the rest was asked of what they hold).",
          st.pressure_promised_bytes());
  Counter(t, "gmlake_pressure_returned_bytes_total",
          "Bytes that sessions returned against pressure requests.",
          st.pressure_returned_bytes());
  Counter(t, "gmlake_pressure_undelivered_total",
          "Pressure requests settled with less than the session's cache "
          "report promised (answered short, or silent past "
          "--pressure_patience).",
          st.pressure_undelivered());
  Counter(t, "gmlake_leased_chunks_total", "Chunks granted by leases.",
          st.leased_chunks_total());
  Counter(t, "gmlake_leased_bytes_total", "Bytes granted by leases.",
          st.leased_bytes_total());
  HistogramFamily(t, "gmlake_pressure_wait_seconds",
                  "How long leases that asked others for memory took, from "
                  "the first request to the answer, served or failed.",
                  st.pressure_wait_seconds());
  HistogramFamily(t, "gmlake_handoff_seconds",
                  "Hand-offs: whole leases (asked to granted) served with "
                  "memory that other sessions gave back under pressure.",
                  st.handoff_seconds());
}

// Counters of what happened to the memory itself: recycled, made by
// clients, reclaimed, zeroed, released.
void RenderMemoryCounters(const v1::StatusResponse& st, PrometheusText* t) {
  Counter(t, "gmlake_recycled_bytes_total",
          "Free chunks of other sizes released to make room for a lease's "
          "new chunks.",
          st.recycled_bytes());
  Counter(t, "gmlake_client_made_bytes_total",
          "Bytes leased as capacity for chunks their clients made "
          "(LeaseRequest.client_makes).",
          st.client_made_bytes_total());
  Counter(t, "gmlake_reclaimed_bytes_total",
          "Bytes taken back from sessions that ended holding them (process "
          "gone, connection dropped, closed without returning).",
          st.reclaimed_bytes());
  Counter(t, "gmlake_zeroed_bytes_total",
          "Bytes zeroed: before a lease to another uid (--scrub), or before "
          "release to the driver.",
          st.zeroed_bytes());
  Counter(t, "gmlake_zeroed_chunks_total",
          "Chunks zeroed before a lease to another uid.", st.chunks_scrubbed());
  t->Family("gmlake_released_bytes_total", "counter",
            "Bytes given back to the driver: idle (the release policy) or "
            "trim (gmlakectl trim).");
  t->Sample("gmlake_released_bytes_total", {{"reason", "idle"}},
            st.released_idle_bytes());
  t->Sample("gmlake_released_bytes_total", {{"reason", "trim"}},
            st.trimmed_bytes());
}

// The release policy's setting.
void RenderConfiguration(const v1::StatusResponse& st, PrometheusText* t) {
  t->Family("gmlake_release_idle_seconds", "gauge",
            "Free chunks unused this long go back to the driver (0: never; "
            "--release_idle).");
  t->Sample("gmlake_release_idle_seconds", {}, st.release_idle_seconds());
}

}  // namespace

std::string RenderMetrics(const v1::StatusResponse& st) {
  PrometheusText t;
  RenderInfo(st, &t);
  RenderDeviceBooks(st, &t);
  RenderSessions(st, &t);
  RenderLeaseCounters(st, &t);
  RenderMemoryCounters(st, &t);
  RenderConfiguration(st, &t);
  return t.text();
}

}  // namespace gmlake
