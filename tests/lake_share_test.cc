// Copyright 2026 The GMLake Authors.
//
// The lake-share benchmark as a test: a real gmlaked and real client
// processes (gmlake-replay --lake_client) replaying shipped traces in turns
// in a lake of 1.05 x the floor. Every phase must complete (the idle
// process gives back its cache under pressure), and the node never holds
// more than 1.05 x the most bytes live across processes.

#include "tools/lake_share.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace gmlake {
namespace {

// Both ways gmlaked serves a growing lease: plain pressure (create while
// there is room, ask the others only when the lake is full) and
// --prefer_reclaim (ask the others first), as tools/run.sh runs it.
class LakeShareModes : public ::testing::TestWithParam<bool> {};

TEST_P(LakeShareModes,
       TrainerBesideInferenceFitsInOnePointZeroFiveTimesTheFloor) {
  LakeShareConfig config;
  config.trace_paths = {ShippedTracePath("llama1b_full_ckpt"),
                        ShippedTracePath("llama1b_infer"),
                        ShippedTracePath("llama1b_lora_ckpt")};
  for (const std::string& p : config.trace_paths) ASSERT_FALSE(p.empty());
  config.self = RunfilePath("tools/gmlake-replay");
  config.gmlaked = RunfilePath("daemon/gmlaked");
  ASSERT_FALSE(config.self.empty());
  ASSERT_FALSE(config.gmlaked.empty());
  config.rounds = 2;
  config.progress = false;
  // Idle processes answer pressure late on a busy machine: a late answer
  // must not be taken for none.
  config.reclaim_timeout = absl::Seconds(60);
  config.prefer_reclaim = GetParam();
  absl::StatusOr<LakeShareResult> r = RunLakeShare(config);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->phases.size(), 6u);
  EXPECT_LE(r->node_peak_over_floor, 1.05);
  EXPECT_LE(r->node_peak_bytes, r->capacity_bytes);
  // Separate processes would have needed more than the lake had: the idle
  // ones must have given memory back.
  EXPECT_GT(r->sum_of_process_peaks_bytes, r->capacity_bytes);
  EXPECT_GT(r->phases.back().pressure_requests, 0u);
}

INSTANTIATE_TEST_SUITE_P(PlainAndPreferReclaim, LakeShareModes,
                         ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "PreferReclaim" : "Plain";
                         });

// With --prefer_reclaim the lake may be far larger than the processes
// need: idle processes give back their caches before gmlaked creates more,
// so the node stays at the floor instead of the sum of the processes'
// peaks.
TEST(LakeShareTest, PreferReclaimKeepsALargeLakeNearTheFloor) {
  LakeShareConfig config;
  config.trace_paths = {ShippedTracePath("llama1b_full_ckpt"),
                        ShippedTracePath("llama1b_infer")};
  for (const std::string& p : config.trace_paths) ASSERT_FALSE(p.empty());
  config.self = RunfilePath("tools/gmlake-replay");
  config.gmlaked = RunfilePath("daemon/gmlaked");
  config.rounds = 2;
  config.progress = false;
  // Idle processes answer pressure late on a busy machine: a late answer
  // must not be taken for none.
  config.reclaim_timeout = absl::Seconds(60);
  config.capacity = uint64_t{40} << 30;
  config.prefer_reclaim = true;
  absl::StatusOr<LakeShareResult> r = RunLakeShare(config);
  ASSERT_TRUE(r.ok()) << r.status();
  // Separate processes would hold the sum of their peaks (1.18 x the floor
  // here; so does this lake without --prefer_reclaim). With it the node
  // saves most of that: 1.004-1.025 x the floor on an idle machine, 1.069 x
  // beside a CPU hog with three other runs of the suite, where idle
  // processes report and answer later and the lake creates a little more
  // meanwhile. The bound is a margin on that timing: at least a third of
  // what separate processes would waste is saved.
  ASSERT_GT(r->sum_of_process_peaks_bytes, r->floor_bytes);
  const uint64_t wasted_apart = r->sum_of_process_peaks_bytes - r->floor_bytes;
  EXPECT_LE(r->node_peak_bytes, r->floor_bytes + wasted_apart * 2 / 3)
      << "node peak " << r->node_peak_over_floor << " x the floor; apart "
      << static_cast<double>(r->sum_of_process_peaks_bytes) / r->floor_bytes;
}

}  // namespace
}  // namespace gmlake
