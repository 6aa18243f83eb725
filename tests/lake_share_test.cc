// Copyright 2026 The GMLake Authors.
//
// The lake-share benchmark as a test: a real gmlaked and real client
// processes (gmlake-replay --lake_client) replaying shipped traces in turns
// in a lake of 1.05 x the floor. Every phase must complete (the idle
// process gives back its cache under pressure), and the node never holds
// more than 1.05 x the most bytes live across processes.

#include "tools/lake_share.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

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
  // Capacity given back as chunks their clients made (gone, not free) is
  // room for the lease that asked: without that, --prefer_reclaim asked
  // again at every look (1,387 requests; 73 with it, 25 plain).
  EXPECT_LE(r->phases.back().pressure_requests, 400u);
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
  // Chunks of at most the allocator's max_chunk: what an idle process
  // gives back is its free cache, whole. Large chunks (the default for
  // large shortfalls) keep a free part wherever a live block shares the
  // chunk: 1.119 x the floor on an idle machine (1.013 x without), too
  // near this bound to hold on a busy one (docs/daemon.md, "Chunk sizes").
  config.conf = "large_chunk:0";
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

// The shipped traces `names` in turns for `rounds` rounds, through a
// gmlaked whose pressure counts only the need of the process taking its
// turn (its shortfall and its deficit against its own peak), not its growth
// over a window of time: the counts do not depend on how fast the machine
// is. A late answer must not be taken for none.
LakeShareConfig CountedTurns(const std::vector<std::string>& names,
                             int rounds) {
  LakeShareConfig config;
  for (const std::string& n : names) {
    config.trace_paths.push_back(ShippedTracePath(n));
  }
  config.self = RunfilePath("tools/gmlake-replay");
  config.gmlaked = RunfilePath("daemon/gmlaked");
  config.rounds = rounds;
  config.progress = false;
  config.sample_every = absl::ZeroDuration();
  config.gmlaked_flags = {"--pressure_growth_window=0",
                          "--pressure_patience=30s"};
  config.reclaim_timeout = absl::Seconds(60);
  return config;
}

// Issue 17 §5: turns through one gmlaked whose capacity is below the sum of
// the processes' peaks, asserted in counts, not times. A turn switch (the
// busy process needs what an idle one caches) used to cost one pressure
// round per lease call (5,960 rounds for 6,827 leases on an H200, and 13
// failed leases).
TEST(LakeShareTest, TurnsCostAboutOneRoundPerSwitchAndNoFailedLease) {
  const LakeShareConfig config =
      CountedTurns({"llama1b_full_ckpt", "llama1b_infer"}, 3);
  for (const std::string& p : config.trace_paths) ASSERT_FALSE(p.empty());
  absl::StatusOr<LakeShareResult> r = RunLakeShare(config);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->phases.size(), 6u);
  ASSERT_GT(r->sum_of_process_peaks_bytes, r->capacity_bytes);
  const LakePhase& last = r->phases.back();
  EXPECT_EQ(last.leases_failed, 0u);
  // Per turn, the rounds of pressure (a turn switch is every phase after
  // the first: the busy process changes).
  uint64_t rounds_before = r->phases[0].pressure_rounds;
  uint64_t switches_with_pressure = 0, most_rounds_in_a_later_switch = 0;
  uint64_t rounds_in_later_switches = 0;
  for (size_t i = 1; i < r->phases.size(); ++i) {
    const uint64_t rounds = r->phases[i].pressure_rounds - rounds_before;
    rounds_before = r->phases[i].pressure_rounds;
    std::printf("phase %zu (%s): %llu pressure rounds\n", i,
                r->phases[i].trace.c_str(),
                static_cast<unsigned long long>(rounds));
    switches_with_pressure += rounds > 0;
    // A process's first turn has no peak of its own to go by yet.
    if (i >= 2) {
      most_rounds_in_a_later_switch =
          std::max(most_rounds_in_a_later_switch, rounds);
      rounds_in_later_switches += rounds;
    }
  }
  EXPECT_GE(switches_with_pressure, 1u);
  // The code before counted 2, 45, 2, 43 rounds in phases 2-5. Now the
  // first ask of a switch covers the busy process's deficit against its
  // peak and 1/64 of that peak, asked of what the idle one holds (its cache
  // report may predate its last frees): one round a switch, in each of 24
  // runs with twelve at once on two cores (2026-12-07). Asking only the
  // reported cache beyond the shortfall cost 1-6 a switch under load and
  // 10-13 in all; asking for the peak without the margin, 1-3 and 5-7. The
  // bounds leave room for a busier machine.
  EXPECT_LE(most_rounds_in_a_later_switch, 2u);
  EXPECT_LE(rounds_in_later_switches, 6u);
  // Lease calls and chunks per GiB grown, reported for the engineer
  // reducing them; the bounds are what this code meets (2 MiB chunks, one
  // lease per chunk at worst: 512 per GiB).
  const double gib = static_cast<double>(last.leased_bytes) / (1 << 30);
  ASSERT_GT(gib, 0);
  const double leases_per_gib = last.leases_served / gib;
  const double chunks_per_gib = last.leased_chunks / gib;
  std::printf(
      "leases %llu, chunks %llu, %.2f GiB leased: %.1f leases and %.1f "
      "chunks per GiB; pressure asked %llu bytes, %llu came back\n",
      static_cast<unsigned long long>(last.leases_served),
      static_cast<unsigned long long>(last.leased_chunks), gib, leases_per_gib,
      chunks_per_gib,
      static_cast<unsigned long long>(last.pressure_asked_bytes),
      static_cast<unsigned long long>(last.pressure_returned_bytes));
  EXPECT_LE(leases_per_gib, 512);
  EXPECT_LE(chunks_per_gib, 512);
  // What came back against what was asked: the idle processes deliver.
  EXPECT_GT(last.pressure_asked_bytes, 0u);
  EXPECT_LE(last.pressure_returned_bytes, last.pressure_asked_bytes);
  EXPECT_GE(last.pressure_returned_bytes * 2, last.pressure_asked_bytes);
}

// Issue 17 at full size: the colocation pair's two roles (a 56 GiB trainer,
// a 76 GiB inference engine with a growing KV cache; their traces recorded
// on an H200) take turns through one gmlaked of 1.012 x the most they have
// live together, far below the 133 GiB they hold apart. With 4 MiB chunks
// for every growth the inference role needed 1.017 x; in chunks coarser for
// what each holds, 1.014 x; since its own leased-ahead chunks go back when
// they fit no plan and the lake is full, 1.009 x (gmlake-replay --lake).
TEST(LakeShareTest, TheColocationPairTakesTurnsInALakeNearItsFloor) {
  LakeShareConfig config =
      CountedTurns({"colocate_train", "colocate_infer"}, 2);
  for (const std::string& p : config.trace_paths) ASSERT_FALSE(p.empty());
  absl::StatusOr<LakeShareResult> plan = PlanLakeShare(config);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const uint64_t unit = uint64_t{2} << 20;
  config.capacity =
      static_cast<uint64_t>(plan->floor_bytes * 1.012) / unit * unit;
  absl::StatusOr<LakeShareResult> r = RunLakeShare(config);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->phases.size(), 4u);
  EXPECT_GT(r->sum_of_process_peaks_bytes, r->capacity_bytes * 13 / 10);
  EXPECT_LE(r->node_peak_bytes, r->capacity_bytes);
  // Completing is the claim; refused leases are reported, not asserted: this
  // close to the floor one to three leases a run are refused (the busy
  // process needs more than the lake has and the idle one caches: at
  // 1.015 x once the inference role needed 612 MiB, the idle trainer cached
  // 220 MiB), and the busy process then serves itself by remaking its own
  // cache
  // (TurnsCostAboutOneRoundPerSwitchAndNoFailedLease asserts none at 1.05 x).
  // The trainer's second turn regrows ~32 GiB in shortfalls of 32-176 MiB.
  // Its first lease ahead finds the lake full; once pressure has made room
  // it leases ahead again (LeaseAheadPause). Pausing until chunks went back
  // took one lease per shortfall: 417-611 lease calls in that turn.
  const uint64_t second_turn_leases =
      r->phases[2].leases_served - r->phases[1].leases_served;
  EXPECT_LE(second_turn_leases, 200u);
  // Each phase counts the busy process's driver calls, and what the idle
  // one released answering pressure.
  for (const LakePhase& p : r->phases) {
    EXPECT_GT(p.busy_calls.Count(VmmCall::kMap), 1000u);
  }
  // The trainer gave back, then the inference role did.
  EXPECT_GT(r->phases[2].idle_calls.Count(VmmCall::kRelease), 1000u);
  EXPECT_GT(r->phases[3].idle_calls.Count(VmmCall::kRelease), 1000u);
  std::printf(
      "node peak %.4f x the floor in a lake of %.3f x; %llu leases refused; "
      "%llu lease calls in the trainer's second turn\n",
      r->node_peak_over_floor,
      static_cast<double>(r->capacity_bytes) / plan->floor_bytes,
      static_cast<unsigned long long>(r->phases.back().leases_failed),
      static_cast<unsigned long long>(second_turn_leases));
}

}  // namespace
}  // namespace gmlake
