// Copyright 2026 The GMLake Authors.

#include "daemon/metrics.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

TEST(Metrics, EveryFigureOfStatusIsASeries) {
  v1::StatusResponse st;
  st.set_backend("host");
  st.set_protocol_version(1);
  st.set_scrub_policy("cross-uid");
  st.set_leases_served(7);
  st.set_released_idle_bytes(4 << 20);
  st.set_trimmed_bytes(2 << 20);
  st.set_zeroed_bytes(6 << 20);
  st.set_release_idle_seconds(60);
  for (int i = 0; i < 2; ++i) {
    v1::DeviceStatus* d = st.add_devices();
    d->set_device(i);
    d->set_created_bytes(uint64_t{100} << 30);
    d->set_free_chunks(3 + i);
    d->set_next_release_seconds(-1);
  }
  v1::SessionStatus* s = st.add_sessions();
  s->set_bound(true);
  s->set_watching(true);
  st.add_sessions()->set_ending(true);
  v1::Histogram* h = st.mutable_pressure_wait_seconds();
  h->add_upper_bounds(0.5);
  h->add_cumulative_counts(1);
  h->add_cumulative_counts(2);
  h->set_sum(1.25);
  h->set_count(2);
  v1::Histogram* handoff = st.mutable_handoff_seconds();
  handoff->add_upper_bounds(0.05);
  handoff->add_cumulative_counts(1);
  handoff->add_cumulative_counts(1);
  handoff->set_sum(0.036);
  handoff->set_count(1);
  st.set_recycled_bytes(32 << 20);
  st.set_client_made_bytes_total(uint64_t{6} << 30);

  const std::string text = RenderMetrics(st);
  EXPECT_THAT(text, HasSubstr("gmlake_info{backend=\"host\",protocol=\"1\","
                              "scrub=\"cross-uid\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE gmlake_created_bytes gauge\n"));
  EXPECT_THAT(text,
              HasSubstr("gmlake_created_bytes{device=\"0\"} 107374182400\n"));
  EXPECT_THAT(text, HasSubstr("gmlake_free_chunks{device=\"1\"} 4\n"));
  EXPECT_THAT(text,
              HasSubstr("gmlake_next_release_seconds{device=\"0\"} -1\n"));
  EXPECT_THAT(text, HasSubstr("gmlake_sessions{state=\"watching\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gmlake_sessions{state=\"ending\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE gmlake_leases_served_total counter\n"
                              "gmlake_leases_served_total 7\n"));
  EXPECT_THAT(text, HasSubstr("gmlake_released_bytes_total{reason=\"idle\"} "
                              "4194304\n"));
  EXPECT_THAT(text, HasSubstr("gmlake_released_bytes_total{reason=\"trim\"} "
                              "2097152\n"));
  EXPECT_THAT(text, HasSubstr("gmlake_zeroed_bytes_total 6291456\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE gmlake_pressure_wait_seconds histogram\n"
                              "gmlake_pressure_wait_seconds_bucket{le=\"0.5\"} "
                              "1\n"
                              "gmlake_pressure_wait_seconds_bucket{le=\"+Inf\"}"
                              " 2\n"
                              "gmlake_pressure_wait_seconds_sum 1.25\n"
                              "gmlake_pressure_wait_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE gmlake_handoff_seconds histogram\n"
                              "gmlake_handoff_seconds_bucket{le=\"0.05\"} 1\n"
                              "gmlake_handoff_seconds_bucket{le=\"+Inf\"} 1\n"
                              "gmlake_handoff_seconds_sum 0.036\n"
                              "gmlake_handoff_seconds_count 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE gmlake_recycled_bytes_total counter\n"
                              "gmlake_recycled_bytes_total 33554432\n"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE gmlake_client_made_bytes_total counter\n"
                        "gmlake_client_made_bytes_total 6442450944\n"));
  EXPECT_THAT(text, HasSubstr("gmlake_release_idle_seconds 60\n"));
}

}  // namespace
}  // namespace gmlake
