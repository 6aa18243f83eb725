// Copyright 2026 The GMLake Authors.
//
// The allocator's deterministic targets on every trace in traces/: what it
// reserves, the smallest capacity it runs in (both at most 1.01 x the live
// peak), how many driver calls it makes (no more than before issue 19's
// chunk policy on the traces shipped first), and how few once a run is in
// its steady state.
// Replays on the accounting backend, whose books make the same decisions
// as the host backend's (tools/replay.h).

#include <dirent.h>

#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"
#include "tools/replay.h"
#include "tools/trace.h"

namespace gmlake {
namespace {

struct Case {
  const char* name;
  // Training that repeats its shapes every step (its second half should
  // map almost nothing); not so for variable-length batches.
  bool steady;
  // The most driver calls (VmmCallSnapshot::MemoryCalls): what the
  // defaults made on 2026-12-01 on the seven traces shipped first, which
  // a chunk policy must not raise (issue 19); 0: not bounded.
  uint64_t max_calls;
};

class TraceTargetsTest : public ::testing::TestWithParam<Case> {};

TEST_P(TraceTargetsTest, MeetsTheTargets) {
  const Case c = GetParam();
  const std::string path = ShippedTracePath(c.name);
  ASSERT_FALSE(path.empty())
      << "trace " << c.name << " not found in traces/ of the checkout";
  absl::StatusOr<Trace> trace = LoadTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ReplayConfig config;
  config.backend = "accounting";
  absl::StatusOr<ReplayResult> r = ReplayTrace(*trace, config, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->completed) << r->error;
  const double live = static_cast<double>(trace->peak_live_bytes);

  // 1. Reserved at most 1.01 x the live peak (PyTorch: 1.13-1.49 native,
  //    1.02-1.13 with expandable segments).
  const double reserved = r->peak_reserved_bytes / live;
  EXPECT_LE(reserved, 1.01) << c.name;

  // 2. The smallest capacity (16 MiB resolution) at most 1.01 x live.
  const uint64_t res = uint64_t{16} << 20;
  absl::StatusOr<uint64_t> cap =
      BisectMinCapacity(*trace, config, trace->peak_live_bytes,
                        r->peak_reserved_bytes + res, res, nullptr);
  ASSERT_TRUE(cap.ok()) << cap.status();
  EXPECT_LE(*cap / live, 1.01) << c.name;

  // 3. Steady state: in training runs whose live peak is reached in the
  //    first half, the second half makes at most 5% of the driver calls.
  //    Where the second half reaches a new peak (larger batches came
  //    later), the memory it adds must be mapped by any allocator; the
  //    figure is reported by gmlake-replay, not asserted.
  const uint64_t calls = r->calls.MemoryCalls();
  const uint64_t second = r->calls_second_half.MemoryCalls();
  const bool new_peak_later =
      trace->peak_live_bytes > r->first_half_peak_live_bytes;
  if (c.steady && !new_peak_later) {
    EXPECT_LE(second, calls / 20)
        << c.name << ": " << second << " of " << calls;
  }

  // 4. malloc and free never wait for the GPU in a program on one stream
  //    (every trace but fsdp2's, whose figure is reported).
  if (trace->streams.size() == 1) {
    EXPECT_EQ(r->stats.host_waits, 0) << c.name;
  }
  // 5. No more driver calls than before the chunk policy of issue 19.
  if (c.max_calls != 0) {
    EXPECT_LE(calls, c.max_calls) << c.name;
  }
  // 6. LoRA training repeats its shapes: most of its slow paths that need
  //    a stitched shape take it back where it was mapped before, with no
  //    call. (Covers, mostly one chunk for a small-pool page, count as
  //    stitches but are no shape to take back.)
  if (std::string(c.name) == "llama1b_lora_ckpt") {
    EXPECT_GT(r->stats.reactivations, r->stats.stitches - r->stats.covers)
        << c.name;
  }
  RecordProperty("reserved_over_live", absl::StrCat(reserved));
  RecordProperty("min_capacity_over_live", absl::StrCat(*cap / live));
  RecordProperty("driver_calls", absl::StrCat(calls));
  RecordProperty("driver_calls_second_half", absl::StrCat(second));
  RecordProperty("calls_for_second_half_peak",
                 absl::StrCat(r->calls_for_second_half_peak));
  RecordProperty("host_waits", absl::StrCat(r->stats.host_waits));
  RecordProperty("stitches", absl::StrCat(r->stats.stitches));
  RecordProperty("reactivations", absl::StrCat(r->stats.reactivations));
  RecordProperty("unmaps", absl::StrCat(r->calls.Count(VmmCall::kUnmap)));
  RecordProperty("covers", absl::StrCat(r->stats.covers));
}

constexpr Case kCases[] = {
    // Shipped first.
    {"llama1b_full_ckpt", true, 6401},
    {"llama1b_lora_ckpt", true, 4252},
    {"llama1b_full_plain", true, 16885},
    {"llama3b_full_ckpt", true, 17078},
    {"llama1b_full_offload", true, 6572},
    {"llama1b_infer", false, 2668},
    {"llama1b_fsdp2", true, 4007},
    // Recorded for issue 19 (tests/gpu/record_traces.sh).
    {"llama3b_lora_ckpt", true, 0},
    {"llama3b_lora_offload", true, 0},
    {"llama7b_lora_ckpt", true, 0},
    {"llama7b_full_ckpt", true, 19005},
    // New lengths every step. The calls of this and the two traces of a
    // growing KV cache before docs/design.md's "A KV cache that grows":
    // 8,046, 95,412 and 76,586.
    {"llama1b_hf_trainer_dynamic", false, 4782},
    {"llama3b_infer_large", false, 26049},
    // A process that holds much grows in coarser chunks (ForHeld,
    // held_chunk_divisor:2048): the colocation trainer's calls fell from
    // 30,122 to 18,653, llama7b_full_ckpt's from 34,614 to 19,045 and
    // colocate_infer's from 43,688 to 43,367. The large pool's covers the
    // largest within their bound (BetterCover): colocate_infer 39,011 and
    // llama3b_infer_large 42,632 (48,096 before); and a free block growing
    // by a page takes a cover before a chunk that fits
    // (CoverBeforeStealing): 28,269 and 27,244. A fresh mapping leaves the
    // most room after it to grow into (ChoosePlacement): 26,672 and 25,308.
    // A free block grows in place when short by up to 40% of a request of
    // 64 MiB or more, not 1/16 (grow_reach:0.4): colocate_train 18,653 ->
    // 17,528, colocate_infer 26,672 -> 24,816, llama7b_full_ckpt 19,045 ->
    // 19,005, the recorded decode below 83,042 -> 67,098;
    // llama3b_infer_large 25,308 -> 26,049.
    // A larger grow slack for large requests that raise the allocated peak
    // (grow_slack_large:0.0075, docs/design.md "A larger slack while the
    // peak rises"): colocate_train 17,528 -> 17,271, the recorded decode
    // 67,098 -> 51,451; colocate_infer and llama3b_infer_large unchanged.
    {"colocate_train", true, 17271},
    {"colocate_infer", false, 24816},
    // The pair's long decode (320 new tokens at batch 48), recorded on an
    // H100 (2026-12-07). A KV tensor hemmed in by the next mapping is
    // stitched anew (docs/design.md, "Room to grow"): 4,397 stitches. The
    // stretched colocate_infer that stood in for it made 53,453 calls.
    {"colocate_infer_long", false, 51451},
};

INSTANTIATE_TEST_SUITE_P(Shipped, TraceTargetsTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

// Every trace in traces/ is one of the cases above: a trace added without
// one would escape the targets.
TEST(TraceTargetsTest, EveryShippedTraceIsACase) {
  const std::string any = ShippedTracePath(kCases[0].name);
  ASSERT_FALSE(any.empty());
  const std::string dir = any.substr(0, any.rfind('/'));
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  int traces = 0;
  while (dirent* e = readdir(d)) {
    const std::string file = e->d_name;
    const std::string suffix = ".trace.gz";
    if (file.size() <= suffix.size() ||
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    ++traces;
    const std::string name = file.substr(0, file.size() - suffix.size());
    bool found = false;
    for (const Case& c : kCases) found = found || name == c.name;
    EXPECT_TRUE(found) << name << " in traces/ has no case in " << __FILE__;
  }
  closedir(d);
  EXPECT_EQ(traces, static_cast<int>(std::size(kCases)));
}

// Every event of a trace, replayed with the books checked every 500 events.
TEST(TraceReplayTest, BooksStayConsistentThroughAWholeMultiStreamRun) {
  absl::StatusOr<Trace> trace = LoadTrace(ShippedTracePath("llama1b_fsdp2"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->streams.size(), 3u);
  ReplayConfig config;
  config.backend = "host";  // real mappings this time
  config.check_every = 500;
  absl::StatusOr<ReplayResult> r = ReplayTrace(*trace, config, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->completed) << r->error;
  EXPECT_EQ(r->allocated_after_frees, 0);
}

}  // namespace
}  // namespace gmlake
