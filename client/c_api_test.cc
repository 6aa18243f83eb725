// Copyright 2026 The GMLake Authors.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/gmlake.h"
#include "gtest/gtest.h"

namespace {

TEST(CApiTest, MallocFreeStatsAndErrors) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  EXPECT_NE(std::string(gmlake_describe()).find("embedded lake"),
            std::string::npos);
  void* p = gmlake_malloc(3 << 20, 0, 0);
  ASSERT_NE(p, nullptr) << gmlake_last_error();
  std::memset(p, 1, 3 << 20);
  char* stats = gmlake_stats_json(0);
  ASSERT_NE(stats, nullptr);
  EXPECT_NE(std::string(stats).find("\"allocated_bytes.all.current\":3145728"),
            std::string::npos)
      << stats;
  gmlake_free_string(stats);
  EXPECT_EQ(gmlake_free(p), 0);
  EXPECT_EQ(gmlake_free(p), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("not a live allocation"),
            std::string::npos);
  EXPECT_EQ(gmlake_malloc(16, 7, 0), nullptr);
  EXPECT_NE(std::string(gmlake_last_error()).find("device 7"),
            std::string::npos);
  EXPECT_EQ(gmlake_empty_cache(), uint64_t{4} << 20);
  // Other options while running: a clear refusal.
  EXPECT_EQ(gmlake_init("backend:accounting"), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("gmlake_shutdown"),
            std::string::npos);
  gmlake_shutdown();
  EXPECT_EQ(gmlake_init("capacity:loads"), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("capacity"),
            std::string::npos);
}

int OnlyStream7(void* ctx, uint64_t stream) {
  ++*static_cast<int*>(ctx);
  return stream == 7;
}

TEST(CApiTest, PrivatePoolsRouteReleaseAndReturnMemory) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  ASSERT_EQ(gmlake_pool_create_or_incref(0, 0, 1), 0) << gmlake_last_error();
  ASSERT_EQ(gmlake_pool_create_or_incref(0, 0, 1), 0);  // shared
  int asked = 0;
  ASSERT_EQ(gmlake_pool_begin_allocate(0, 0, 1, OnlyStream7, &asked), 0);
  void* in_pool = gmlake_malloc(6 << 20, 0, 7);
  void* outside = gmlake_malloc(6 << 20, 0, 8);
  ASSERT_NE(in_pool, nullptr) << gmlake_last_error();
  ASSERT_NE(outside, nullptr) << gmlake_last_error();
  EXPECT_GE(asked, 2);
  ASSERT_EQ(gmlake_pool_end_allocate(0, 0, 1), 0);
  void* live[4] = {};
  ASSERT_EQ(gmlake_pool_live(0, 0, 1, live, 4), 1);
  EXPECT_EQ(live[0], in_pool);
  EXPECT_EQ(gmlake_free(in_pool), 0);
  EXPECT_EQ(gmlake_free(outside), 0);
  // Freed pool memory is not reused on stream 7 outside the capture.
  void* again = gmlake_malloc(6 << 20, 0, 7);
  EXPECT_NE(again, in_pool);
  EXPECT_EQ(gmlake_free(again), 0);
  EXPECT_EQ(gmlake_pool_release(0, 0, 1), 0);  // one graph still holds it
  EXPECT_GE(gmlake_pool_release(0, 0, 1), int64_t{6} << 20);
  EXPECT_EQ(gmlake_pool_live(0, 0, 1, live, 4), 0);
  EXPECT_EQ(gmlake_pool_create_or_incref(9, 0, 1), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("9"), std::string::npos);
  gmlake_shutdown();
}

// What a native PyTorch door reads for getPoolUseCount (MemPool.use_count).
TEST(CApiTest, PoolUseCountFollowsReferences) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  EXPECT_EQ(gmlake_pool_use_count(0, 0, 5), 0);  // unknown
  ASSERT_EQ(gmlake_pool_create_or_incref(0, 0, 5), 0);
  ASSERT_EQ(gmlake_pool_create_or_incref(0, 0, 5), 0);
  EXPECT_EQ(gmlake_pool_use_count(0, 0, 5), 2);
  EXPECT_EQ(gmlake_pool_release(0, 0, 5), 0);
  EXPECT_EQ(gmlake_pool_use_count(0, 0, 5), 1);
  EXPECT_GE(gmlake_pool_release(0, 0, 5), 0);
  EXPECT_EQ(gmlake_pool_use_count(0, 0, 5), 0);
  EXPECT_EQ(gmlake_pool_use_count(9, 0, 5), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("9"), std::string::npos);
  gmlake_shutdown();
}

// What a native door's createOrIncrefPool(allocator) and setUseOnOOM call:
// a MemPool whose memory another allocator gives, through C callbacks.
struct CallbackCounts {
  int allocs = 0;
  int frees = 0;
  int drops = 0;
};
void* CountingAlloc(void* ctx, size_t size, uint64_t /*stream*/) {
  ++static_cast<CallbackCounts*>(ctx)->allocs;
  return std::aligned_alloc(size_t{2} << 20, size);
}
void CountingFree(void* ctx, void* ptr, size_t /*size*/, uint64_t /*stream*/) {
  ++static_cast<CallbackCounts*>(ctx)->frees;
  std::free(ptr);
}
void CountingDrop(void* ctx) { ++static_cast<CallbackCounts*>(ctx)->drops; }

TEST(CApiTest, ExternalPoolsCacheTheirAllocatorsSegments) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  CallbackCounts counts;
  ASSERT_EQ(gmlake_pool_create_external(0, 0, 8, &CountingAlloc, &CountingFree,
                                        &counts, &CountingDrop),
            0)
      << gmlake_last_error();
  // Known already: one more reference, and the second context is dropped.
  ASSERT_EQ(gmlake_pool_create_external(0, 0, 8, &CountingAlloc, &CountingFree,
                                        &counts, &CountingDrop),
            0);
  EXPECT_EQ(counts.drops, 1);
  EXPECT_EQ(gmlake_pool_use_count(0, 0, 8), 2);
  ASSERT_EQ(gmlake_pool_set_use_on_oom(0, 0, 8, 1), 0) << gmlake_last_error();
  ASSERT_EQ(gmlake_pool_begin_allocate(0, 0, 8, nullptr, nullptr), 0);
  void* p = gmlake_malloc(1 << 20, 0, 7);
  void* q = gmlake_malloc(1 << 20, 0, 7);
  ASSERT_EQ(gmlake_pool_end_allocate(0, 0, 8), 0);
  ASSERT_NE(p, nullptr) << gmlake_last_error();
  EXPECT_EQ(static_cast<char*>(q), static_cast<char*>(p) + (1 << 20));
  EXPECT_EQ(counts.allocs, 1);
  EXPECT_EQ(gmlake_free(p), 0);
  EXPECT_EQ(gmlake_free(q), 0);
  EXPECT_EQ(gmlake_pool_release(0, 0, 8), 0);
  EXPECT_EQ(counts.frees, 0);
  EXPECT_EQ(gmlake_pool_release(0, 0, 8), int64_t{2} << 20);
  EXPECT_EQ(counts.frees, 1);
  EXPECT_EQ(counts.drops, 2);  // the pool forgot its allocator
  // Refused, in words: unknown pools, a gmlake pool, no callbacks.
  EXPECT_EQ(gmlake_pool_set_use_on_oom(0, 0, 8, 1), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("not live"),
            std::string::npos);
  ASSERT_EQ(gmlake_pool_create_or_incref(0, 0, 9), 0);
  EXPECT_EQ(gmlake_pool_create_external(0, 0, 9, &CountingAlloc, &CountingFree,
                                        &counts, &CountingDrop),
            -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("gmlake's memory"),
            std::string::npos);
  EXPECT_EQ(counts.drops, 3);
  EXPECT_EQ(gmlake_pool_create_external(0, 0, 10, nullptr, &CountingFree,
                                        &counts, &CountingDrop),
            -1);
  EXPECT_EQ(counts.drops, 4);
  gmlake_pool_release(0, 0, 9);
  gmlake_shutdown();
}

// torch.cuda.MemPool(no_split=True) through the C API: two 1 MiB tensors
// are two segments, not one split; an unknown pool is refused in words.
TEST(CApiTest, NoSplitPoolsGiveEachAllocationASegment) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  EXPECT_EQ(gmlake_pool_set_no_split(0, 0, 11), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("not live"),
            std::string::npos);
  ASSERT_EQ(gmlake_pool_create_or_incref(0, 0, 11), 0);
  ASSERT_EQ(gmlake_pool_set_no_split(0, 0, 11), 0) << gmlake_last_error();
  ASSERT_EQ(gmlake_pool_begin_allocate(0, 0, 11, nullptr, nullptr), 0);
  void* p = gmlake_malloc(1 << 20, 0, 7);
  void* q = gmlake_malloc(1 << 20, 0, 7);
  ASSERT_EQ(gmlake_pool_end_allocate(0, 0, 11), 0);
  ASSERT_NE(p, nullptr) << gmlake_last_error();
  ASSERT_NE(q, nullptr) << gmlake_last_error();
  // Whole 2 MiB pages each, a page of address space apart.
  EXPECT_GE(static_cast<char*>(q) - static_cast<char*>(p), int64_t{4} << 20);
  EXPECT_EQ(gmlake_free(p), 0);
  EXPECT_EQ(gmlake_free(q), 0);
  EXPECT_EQ(gmlake_pool_release(0, 0, 11), int64_t{4} << 20);
  gmlake_shutdown();
}

// What a native door's attachAllocatorTraceTracker needs (NCCL's buffer
// registration hooks): every segment event as it happens, with its pool.
struct SegmentEvents {
  std::vector<gmlake_segment_event> events;
  const CallbackCounts* counts = nullptr;
  std::vector<int> frees_seen;  // the external frees done at each event
  uint64_t Bytes(int action, uint64_t id1) const {
    uint64_t n = 0;
    for (const gmlake_segment_event& e : events) {
      if (e.action == action && e.pool_id1 == id1) n += e.size;
    }
    return n;
  }
};
void ObserveSegment(void* ctx, const gmlake_segment_event* e) {
  auto* s = static_cast<SegmentEvents*>(ctx);
  s->events.push_back(*e);
  s->frees_seen.push_back(s->counts->frees);
}

TEST(CApiTest, SegmentObserverSeesMappingsAndExternalSegments) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  CallbackCounts counts;
  SegmentEvents seen;
  seen.counts = &counts;
  ASSERT_EQ(gmlake_set_segment_observer(&ObserveSegment, &seen), 0);

  // gmlake's own memory: pages mapped and unmapped, as PyTorch's
  // expandable segments report them (NCCL's hooks register neither).
  void* p = gmlake_malloc(8 << 20, 0, 7);
  ASSERT_NE(p, nullptr) << gmlake_last_error();
  EXPECT_EQ(seen.Bytes(GMLAKE_SEGMENT_MAP, 0), uint64_t{8} << 20);
  for (const gmlake_segment_event& e : seen.events) {
    EXPECT_EQ(e.device, 0);
    EXPECT_EQ(e.stream, 7u);
    EXPECT_EQ(e.pool_id0, 0u);
  }
  ASSERT_EQ(gmlake_free(p), 0);
  gmlake_empty_cache();
  EXPECT_EQ(seen.Bytes(GMLAKE_SEGMENT_UNMAP, 0), uint64_t{8} << 20);

  // A private pool's mappings carry its id.
  ASSERT_EQ(gmlake_pool_create_or_incref(0, 0, 5), 0);
  ASSERT_EQ(gmlake_pool_begin_allocate(0, 0, 5, nullptr, nullptr), 0);
  void* g = gmlake_malloc(4 << 20, 0, 7);
  ASSERT_EQ(gmlake_pool_end_allocate(0, 0, 5), 0);
  ASSERT_NE(g, nullptr) << gmlake_last_error();
  EXPECT_EQ(seen.Bytes(GMLAKE_SEGMENT_MAP, 5), uint64_t{4} << 20);
  ASSERT_EQ(gmlake_free(g), 0);
  EXPECT_GE(gmlake_pool_release(0, 0, 5), 0);

  // Another allocator's segments (MemPool(allocator=ncclMemAlloc)): one
  // segment_alloc each, with the pool's id, and a segment_free before the
  // segment goes back to that allocator (NCCL deregisters it first).
  ASSERT_EQ(gmlake_record_history(100, 0, 0, 1), 0);
  ASSERT_EQ(gmlake_pool_create_external(0, 0, 8, &CountingAlloc, &CountingFree,
                                        &counts, &CountingDrop),
            0);
  ASSERT_EQ(gmlake_pool_begin_allocate(0, 0, 8, nullptr, nullptr), 0);
  void* x = gmlake_malloc(1 << 20, 0, 7);
  void* y = gmlake_malloc(1 << 20, 0, 7);
  ASSERT_EQ(gmlake_pool_end_allocate(0, 0, 8), 0);
  ASSERT_NE(x, nullptr) << gmlake_last_error();
  EXPECT_EQ(seen.Bytes(GMLAKE_SEGMENT_ALLOC, 8), uint64_t{2} << 20);
  EXPECT_EQ(seen.Bytes(GMLAKE_SEGMENT_MAP, 8), 0u);
  const size_t alloc_at = seen.events.size() - 1;
  EXPECT_EQ(seen.events[alloc_at].action, GMLAKE_SEGMENT_ALLOC);
  EXPECT_EQ(seen.events[alloc_at].addr, reinterpret_cast<uint64_t>(x));
  ASSERT_EQ(gmlake_free(x), 0);
  ASSERT_EQ(gmlake_free(y), 0);
  EXPECT_EQ(gmlake_pool_release(0, 0, 8), int64_t{2} << 20);
  EXPECT_EQ(counts.frees, 1);
  ASSERT_EQ(seen.events.back().action, GMLAKE_SEGMENT_FREE);
  EXPECT_EQ(seen.events.back().addr, reinterpret_cast<uint64_t>(x));
  EXPECT_EQ(seen.events.back().size, uint64_t{2} << 20);
  EXPECT_EQ(seen.events.back().pool_id1, 8u);
  EXPECT_EQ(seen.frees_seen.back(), 0);  // told before it was freed

  // The history names them as PyTorch's allocator does.
  char* json = gmlake_snapshot_json();
  const std::string snapshot(json);
  gmlake_free_string(json);
  EXPECT_NE(snapshot.find("\"segment_alloc\""), std::string::npos);
  EXPECT_NE(snapshot.find("\"segment_free\""), std::string::npos);
  EXPECT_EQ(snapshot.find("\"segment_map\""), std::string::npos);
  ASSERT_EQ(gmlake_record_history(0, 0, 0, 1), 0);

  // Off: nothing more is told.
  ASSERT_EQ(gmlake_set_segment_observer(nullptr, nullptr), 0);
  const size_t before = seen.events.size();
  void* q = gmlake_malloc(16 << 20, 0, 7);
  ASSERT_NE(q, nullptr);
  ASSERT_EQ(gmlake_free(q), 0);
  EXPECT_EQ(seen.events.size(), before);
  gmlake_shutdown();
}

// What a native door's C++ snapshot() and history calls: stacks from the
// embedder's gatherer (PyTorch's CapturedTraceback), and the snapshot as
// structures that carry each stack's handle back.
struct GatheredStacks {
  int gathered = 0;
  int released = 0;
  std::vector<std::unique_ptr<std::string>> handles;
};
void* GatherStack(void* ctx, int cpp) {
  auto* g = static_cast<GatheredStacks*>(ctx);
  ++g->gathered;
  g->handles.push_back(std::make_unique<std::string>(
      cpp ? "the_script_fn/at::rand" : "the_script_fn"));
  return g->handles.back().get();
}
void StackFrames(void* /*ctx*/, void* handle, gmlake_frame_sink sink,
                 void* sink_ctx) {
  const std::string& s = *static_cast<std::string*>(handle);
  sink(sink_ctx, "test_cuda.py", s.c_str(), 42);
  sink(sink_ctx, "case.py", "run", 7);
}
void ReleaseStack(void* ctx, void* /*handle*/) {
  ++static_cast<GatheredStacks*>(ctx)->released;
}
struct Visited {
  std::vector<gmlake_block_view> blocks;
  std::vector<gmlake_trace_view> events;
};

TEST(CApiTest, SnapshotVisitCarriesTheGatherersStacks) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  GatheredStacks stacks;
  ASSERT_EQ(gmlake_set_stack_gatherer(&GatherStack, &StackFrames, &ReleaseStack,
                                      nullptr, &stacks),
            0);
  ASSERT_EQ(gmlake_record_history(100, /*stacks=*/2, /*context=*/3, 1), 0);
  void* p = gmlake_malloc(311 * 411 * 4, 0, 7);
  void* q = gmlake_malloc(311 * 411 * 4, 0, 7);  // the same stack again
  ASSERT_NE(q, nullptr) << gmlake_last_error();
  EXPECT_GE(stacks.gathered, 2);
  EXPECT_EQ(stacks.released, stacks.gathered - 1);  // one kept per stack
  Visited seen;
  gmlake_snapshot_visitor visitor{
      [](void* ctx, const gmlake_segment_view* s) {
        for (size_t i = 0; i < s->num_blocks; ++i) {
          static_cast<Visited*>(ctx)->blocks.push_back(s->blocks[i]);
        }
      },
      [](void* ctx, const gmlake_trace_view* e) {
        static_cast<Visited*>(ctx)->events.push_back(*e);
      }};
  ASSERT_EQ(gmlake_snapshot_visit(&visitor, &seen), 0);
  int live = 0;
  for (const gmlake_block_view& b : seen.blocks) {
    if (!b.allocated) continue;
    ++live;
    EXPECT_EQ(b.requested_size, 311u * 411 * 4);
    void* h = gmlake_stack_handle(0, b.stack);
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(*static_cast<std::string*>(h), "the_script_fn/at::rand");
  }
  EXPECT_EQ(live, 2);
  ASSERT_FALSE(seen.events.empty());
  EXPECT_EQ(seen.events.back().action, 0);  // alloc
  EXPECT_EQ(seen.events.back().size, 311u * 411 * 4);
  EXPECT_NE(gmlake_stack_handle(0, seen.events.back().stack), nullptr);
  // The Python snapshot shows the gatherer's frames.
  char* json = gmlake_snapshot_json();
  ASSERT_NE(json, nullptr);
  EXPECT_NE(std::string(json).find("the_script_fn/at::rand"),
            std::string::npos);
  EXPECT_NE(std::string(json).find("case.py"), std::string::npos);
  gmlake_free_string(json);
  EXPECT_EQ(gmlake_stack_handle(0, GMLAKE_NO_STACK), nullptr);
  EXPECT_EQ(gmlake_snapshot_visit(nullptr, nullptr), -1);
  ASSERT_EQ(
      gmlake_set_stack_gatherer(nullptr, nullptr, nullptr, nullptr, nullptr),
      0);
  const int before = stacks.gathered;
  void* r = gmlake_malloc(4096, 0, 7);
  EXPECT_EQ(stacks.gathered, before);  // gmlake's own walk again
  for (void* x : {p, q, r}) EXPECT_EQ(gmlake_free(x), 0);
  gmlake_record_history(0, 0, 0, 1);
  gmlake_shutdown();
}

// Anomaly mode's forward traces: a backward allocation runs on autograd's
// own thread, where PyTorch's CapturedTraceback has no Python frames but
// carries the forward stack of the node being run (forward_frames). Such a
// stack is a stack, and two that differ only there are two stacks.
struct ForwardStacks {
  int released = 0;
  std::vector<std::unique_ptr<std::string>> handles;  // the forward line
  std::string next;
};
void* GatherForward(void* ctx, int /*cpp*/) {
  auto* g = static_cast<ForwardStacks*>(ctx);
  g->handles.push_back(std::make_unique<std::string>(g->next));
  return g->handles.back().get();
}
void NoFrames(void*, void*, gmlake_frame_sink, void*) {}
void ForwardLines(void* /*ctx*/, void* handle, gmlake_text_sink sink,
                  void* sink_ctx) {
  const std::string& s = *static_cast<std::string*>(handle);
  if (!s.empty()) sink(sink_ctx, s.c_str());
}
void ReleaseForward(void* ctx, void* /*handle*/) {
  ++static_cast<ForwardStacks*>(ctx)->released;
}

TEST(CApiTest, BackwardStacksCarryTheirForwardFrames) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  ForwardStacks stacks;
  ASSERT_EQ(gmlake_set_stack_gatherer(&GatherForward, &NoFrames,
                                      &ReleaseForward, &ForwardLines, &stacks),
            0);
  ASSERT_EQ(gmlake_record_history(100, /*stacks=*/1, /*context=*/3, 1), 0);
  stacks.next = "  File \"model.py\", line 3, in forward\n    y = x * 2\n";
  void* a = gmlake_malloc(4096, 0, 7);
  stacks.next = "  File \"model.py\", line 4, in forward\n    z = y.sum()\n";
  void* b = gmlake_malloc(4096, 0, 7);
  stacks.next = "";  // neither frames nor a forward trace: no stack
  void* c = gmlake_malloc(4096, 0, 7);
  ASSERT_NE(c, nullptr) << gmlake_last_error();
  std::vector<uint32_t> seen;
  gmlake_snapshot_visitor visitor{
      nullptr, [](void* ctx, const gmlake_trace_view* e) {
        if (e->action == 0) {
          static_cast<std::vector<uint32_t>*>(ctx)->push_back(e->stack);
        }
      }};
  ASSERT_EQ(gmlake_snapshot_visit(&visitor, &seen), 0);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_NE(seen[0], seen[1]);
  EXPECT_EQ(seen[2], GMLAKE_NO_STACK);
  // Each keeps its own handle (PyTorch's snapshot reads the forward trace
  // from it), and the empty one was let go.
  ASSERT_NE(gmlake_stack_handle(0, seen[0]), nullptr);
  EXPECT_NE(static_cast<std::string*>(gmlake_stack_handle(0, seen[0]))
                ->find("y = x * 2"),
            std::string::npos);
  EXPECT_NE(static_cast<std::string*>(gmlake_stack_handle(0, seen[1]))
                ->find("z = y.sum()"),
            std::string::npos);
  EXPECT_EQ(stacks.released, 1);
  char* json = gmlake_snapshot_json();
  ASSERT_NE(json, nullptr);
  const std::string text(json);
  gmlake_free_string(json);
  EXPECT_NE(text.find("\"frames\":[],\"forward_frames\":[\"  File "
                      "\\\"model.py\\\", line 3, in forward\\n    y = x "
                      "* 2\\n\"]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("z = y.sum()"), std::string::npos);
  for (void* p : {a, b, c}) EXPECT_EQ(gmlake_free(p), 0);
  gmlake_record_history(0, 0, 0, 1);
  ASSERT_EQ(
      gmlake_set_stack_gatherer(nullptr, nullptr, nullptr, nullptr, nullptr),
      0);
  gmlake_shutdown();
}

// What a native door's pushCompileContext/popCompileContext call: the
// events recorded inside carry torch.compile's region, PyTorch's "N/A"
// outside (test_memory_compile_regions reads the sequence).
TEST(CApiTest, HistoryEventsCarryTheCompileContext) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  ASSERT_EQ(gmlake_record_history(100, 0, 0, 1), 0);
  void* before = gmlake_malloc(4096, 0, 7);
  ASSERT_EQ(gmlake_push_compile_context("Torch-Compiled Region: 0/0"), 0);
  void* inside = gmlake_malloc(4096, 0, 7);
  ASSERT_EQ(gmlake_pop_compile_context(), 0);
  EXPECT_EQ(gmlake_pop_compile_context(), 0);  // one too many: harmless
  void* after = gmlake_malloc(4096, 0, 7);
  std::vector<std::string> seen;
  gmlake_snapshot_visitor visitor{
      nullptr, [](void* ctx, const gmlake_trace_view* e) {
        if (e->action == 0) {
          static_cast<std::vector<std::string>*>(ctx)->push_back(
              e->compile_context);
        }
      }};
  ASSERT_EQ(gmlake_snapshot_visit(&visitor, &seen), 0);
  EXPECT_EQ(seen, (std::vector<std::string>{"N/A", "Torch-Compiled Region: 0/0",
                                            "N/A"}));
  char* json = gmlake_snapshot_json();
  EXPECT_NE(std::string(json).find(
                "\"compile_context\":\"Torch-Compiled Region: 0/0\""),
            std::string::npos);
  gmlake_free_string(json);
  EXPECT_EQ(gmlake_push_compile_context(nullptr), -1);
  for (void* p : {before, inside, after}) EXPECT_EQ(gmlake_free(p), 0);
  gmlake_record_history(0, 0, 0, 1);
  gmlake_shutdown();
}

// What a native door's setCheckpointPoolState calls: the pool's live
// blocks with their sizes, and an allocation at a given address.
TEST(CApiTest, PoolLiveBlocksAndMallocAt) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  ASSERT_EQ(gmlake_pool_create_or_incref(0, 4, 0), 0);
  ASSERT_EQ(gmlake_pool_begin_allocate(0, 4, 0, nullptr, nullptr), 0);
  void* p = gmlake_malloc(3 << 20, 0, 7);
  void* q = gmlake_malloc(1000, 0, 7);
  ASSERT_EQ(gmlake_pool_end_allocate(0, 4, 0), 0);
  void* ptrs[4] = {};
  size_t sizes[4] = {};
  ASSERT_EQ(gmlake_pool_live_blocks(0, 4, 0, ptrs, sizes, 4), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(sizes[i], ptrs[i] == p ? size_t{3} << 20 : size_t{1024});
  }
  ASSERT_EQ(gmlake_free(p), 0);
  EXPECT_EQ(gmlake_pool_malloc_at(0, 4, 0, p, 3 << 20), p)
      << gmlake_last_error();
  EXPECT_EQ(gmlake_pool_malloc_at(0, 4, 0, q, 1024), nullptr);  // live
  EXPECT_NE(std::string(gmlake_last_error()).find("not free in pool"),
            std::string::npos)
      << gmlake_last_error();
  EXPECT_EQ(gmlake_free(p), 0);
  EXPECT_EQ(gmlake_free(q), 0);
  EXPECT_GE(gmlake_pool_release(0, 4, 0), 0);
  EXPECT_EQ(gmlake_pool_malloc_at(0, 4, 0, p, 512), nullptr);  // released
  gmlake_shutdown();
}

// CUDA IPC: a shared allocation, stitched from several chunks and starting
// inside one, is the same memory once opened (through the real socket and
// descriptors); a freed one is no longer served.
TEST(CApiTest, IpcShareOpensTheSameMemory) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false,large_chunk:0"),
            0)
      << gmlake_last_error();
  const size_t before_size = 3 << 20, size = (5 << 20) + 4096;
  char* before = static_cast<char*>(gmlake_malloc(before_size, 0, 0));
  char* p = static_cast<char*>(gmlake_malloc(size, 0, 0));
  ASSERT_NE(before, nullptr) << gmlake_last_error();
  ASSERT_NE(p, nullptr) << gmlake_last_error();
  std::memset(before, 0x11, before_size);
  for (size_t i = 0; i < size; ++i) p[i] = static_cast<char>(i % 251);
  char handle[GMLAKE_IPC_HANDLE_MAX];
  size_t len = 0;
  ASSERT_EQ(gmlake_ipc_share(p, handle, &len), 0) << gmlake_last_error();
  EXPECT_EQ(std::string(handle, 6), "GMLK1:");
  char* q = static_cast<char*>(gmlake_ipc_open(handle, len, 0));
  ASSERT_NE(q, nullptr) << gmlake_last_error();
  EXPECT_NE(q, p);
  EXPECT_EQ(std::memcmp(p, q, size), 0);
  q[100] = 7;
  p[size - 1] = 9;
  EXPECT_EQ(p[100], 7);
  EXPECT_EQ(q[size - 1], 9);
  char* q2 = static_cast<char*>(gmlake_ipc_open(handle, len, 0));
  ASSERT_NE(q2, nullptr) << gmlake_last_error();
  EXPECT_EQ(q2[100], 7);
  EXPECT_EQ(gmlake_ipc_close(q2), 0);
  EXPECT_EQ(gmlake_ipc_close(q), 0);
  EXPECT_EQ(gmlake_ipc_close(q), -1);
  EXPECT_EQ(gmlake_free(p), 0);
  EXPECT_EQ(gmlake_ipc_open(handle, len, 0), nullptr);
  EXPECT_NE(std::string(gmlake_last_error()).find("no longer shared"),
            std::string::npos)
      << gmlake_last_error();
  EXPECT_EQ(gmlake_ipc_share(p, handle, &len), -1);  // freed
  EXPECT_EQ(gmlake_free(before), 0);
  gmlake_shutdown();
}

// PyTorch's DeviceStats, filled from the C API: the same figures as the
// JSON, split by pool, and a caller built against another layout refused.
TEST(CApiTest, DeviceStatsInPyTorchsShape) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  void* p = gmlake_malloc(3 << 20, 0, 0);
  ASSERT_NE(p, nullptr) << gmlake_last_error();
  gmlake_device_stats st;
  std::memset(&st, 0xff, sizeof(st));
  ASSERT_EQ(gmlake_get_device_stats(0, &st, sizeof(st)), 0)
      << gmlake_last_error();
  EXPECT_EQ(st.allocation[GMLAKE_STAT_ALL].current, 1);
  EXPECT_EQ(st.allocated_bytes[GMLAKE_STAT_ALL].current, 3 << 20);
  EXPECT_EQ(st.allocated_bytes[GMLAKE_STAT_ALL].current,
            st.allocated_bytes[GMLAKE_STAT_SMALL].current +
                st.allocated_bytes[GMLAKE_STAT_LARGE].current);
  EXPECT_EQ(st.requested_bytes[GMLAKE_STAT_ALL].current, 3 << 20);
  EXPECT_GE(st.reserved_bytes[GMLAKE_STAT_ALL].current, 3 << 20);
  EXPECT_EQ(st.cached_free_bytes,
            st.reserved_bytes[GMLAKE_STAT_ALL].current -
                st.allocated_bytes[GMLAKE_STAT_ALL].current);
  EXPECT_GE(st.num_device_alloc, 1);
  EXPECT_EQ(st.num_ooms, 0);
  ASSERT_EQ(gmlake_free(p), 0);
  ASSERT_EQ(gmlake_get_device_stats(0, &st, sizeof(st)), 0);
  EXPECT_EQ(st.allocated_bytes[GMLAKE_STAT_ALL].current, 0);
  EXPECT_EQ(st.allocated_bytes[GMLAKE_STAT_ALL].freed, 3 << 20);
  EXPECT_EQ(st.allocated_bytes[GMLAKE_STAT_ALL].peak, 3 << 20);
  EXPECT_EQ(st.cached_free_bytes, st.reserved_bytes[GMLAKE_STAT_ALL].current);
  ASSERT_EQ(gmlake_reset_peaks(0), 0);
  ASSERT_EQ(gmlake_get_device_stats(0, &st, sizeof(st)), 0);
  EXPECT_EQ(st.allocated_bytes[GMLAKE_STAT_ALL].peak, 0);
  EXPECT_EQ(gmlake_get_device_stats(0, &st, sizeof(st) - 8), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("rebuild"),
            std::string::npos);
  EXPECT_EQ(gmlake_get_device_stats(7, &st, sizeof(st)), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("7"), std::string::npos);
  gmlake_shutdown();
}

TEST(CApiTest, TorchSignaturesAndCapacity) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false,capacity:8MiB"),
            0)
      << gmlake_last_error();
  void* p = gmlake_torch_malloc(6 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  // The C entry point fails with NULL, never an exception.
  EXPECT_EQ(gmlake_malloc(4 << 20, 0, 0), nullptr);
  EXPECT_NE(std::string(gmlake_last_error()).find("out of memory"),
            std::string::npos)
      << gmlake_last_error();
  gmlake_torch_free(p, 6 << 20, 0, nullptr);
  char* snap = gmlake_snapshot_json();
  EXPECT_NE(std::string(snap).find("\"segments\""), std::string::npos);
  gmlake_free_string(snap);
  gmlake_shutdown();
}

// PyTorch's CUDAPluggableAllocator does not check the pointer our malloc
// returns: a null would become a tensor at address 0. So the torch entry
// point throws, in PyTorch's words, with our whole account.
TEST(CApiTest, TorchMallocThrowsOutOfMemoryInPyTorchsWords) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false,capacity:8MiB"),
            0)
      << gmlake_last_error();
  void* p = gmlake_torch_malloc(6 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  std::string what;
  try {
    gmlake_torch_malloc(3 << 20, 0, nullptr);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  EXPECT_EQ(what.rfind("CUDA out of memory. Tried to allocate 3.00 MiB. ", 0),
            0u)
      << what;
  // The account: asked, live, reserved, cached, capacity, the lake's word.
  for (const char* part :
       {"device 0", "6.00 MiB allocated in 1 blocks", "reserved",
        "free but not usable", "capacity 8.00 MiB", "the embedded lake said"}) {
    EXPECT_NE(what.find(part), std::string::npos) << part << " in: " << what;
  }
  // PyTorch's sizes and its second sentence, as its tests match them: a
  // size in bytes, KiB, MiB or GiB (never TiB), then the device's memory.
  EXPECT_NE(what.find(". GPU 0 has a total capacity of "), std::string::npos)
      << what;
  void* full = gmlake_torch_malloc(2 << 20, 0, nullptr);  // the lake is full
  ASSERT_NE(full, nullptr);
  for (const auto& [size, words] : std::vector<std::pair<ssize_t, std::string>>{
           {4, "Tried to allocate 4 bytes. GPU 0 has a total capacity of "},
           {ssize_t{800000000} << 30,
            "Tried to allocate 800000000.00 GiB. GPU 0 has a total "
            "capacity of "},
           {ssize_t{8000000000} << 30,
            "CUDA out of memory. Tried to allocate more than 1EB memory."}}) {
    std::string said;
    try {
      gmlake_torch_malloc(size, 0, nullptr);
    } catch (const std::runtime_error& e) {
      said = e.what();
    }
    EXPECT_NE(said.find(words), std::string::npos) << said;
  }
  gmlake_torch_free(full, 2 << 20, 0, nullptr);
  // The process goes on: what fits is still served.
  void* q = gmlake_torch_malloc(1 << 20, 0, nullptr);
  ASSERT_NE(q, nullptr);
  std::memset(q, 7, 1 << 20);
  gmlake_torch_free(q, 1 << 20, 0, nullptr);
  gmlake_torch_free(p, 6 << 20, 0, nullptr);
  gmlake_shutdown();
}

// Other failures throw too (never a null), without claiming to be memory.
TEST(CApiTest, TorchMallocThrowsForOtherErrors) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  std::string what;
  try {
    gmlake_torch_malloc(1 << 20, 5, nullptr);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  EXPECT_EQ(what.rfind("gmlake: device 5 does not exist", 0), 0u) << what;
  try {
    gmlake_torch_malloc(-1, 0, nullptr);
    what.clear();
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("size -1"), std::string::npos) << what;
  // Size 0 is no failure: PyTorch asks for it and gets null.
  EXPECT_EQ(gmlake_torch_malloc(0, 0, nullptr), nullptr);
  gmlake_shutdown();
}

// What a shim throwing the framework's own type calls: no C++ exception,
// the verdict in a flag.
TEST(CApiTest, TorchTryMallocSaysOutOfMemoryWithoutThrowing) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false,capacity:4MiB"),
            0)
      << gmlake_last_error();
  void* p = nullptr;
  int oom = -1;
  EXPECT_EQ(gmlake_torch_try_malloc(2 << 20, 0, nullptr, &p, &oom), 0);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(oom, 0);
  void* q = reinterpret_cast<void*>(1);
  EXPECT_EQ(gmlake_torch_try_malloc(3 << 20, 0, nullptr, &q, &oom), -1);
  EXPECT_EQ(q, nullptr);
  EXPECT_EQ(oom, 1);
  EXPECT_EQ(std::string(gmlake_last_error())
                .rfind("CUDA out of memory. Tried to allocate 3.00 MiB. ", 0),
            0u)
      << gmlake_last_error();
  EXPECT_EQ(gmlake_torch_try_malloc(16, 3, nullptr, &q, &oom), -1);
  EXPECT_EQ(oom, 0);
  EXPECT_EQ(gmlake_torch_try_malloc(0, 0, nullptr, &q, &oom), 0);
  EXPECT_EQ(q, nullptr);
  gmlake_torch_free(p, 2 << 20, 0, nullptr);
  gmlake_shutdown();
}

// NULL from malloc(0) is no failure, so no older error may read as its
// cause.
TEST(CApiTest, MallocZeroClearsTheLastError) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  int here = 0;
  EXPECT_EQ(gmlake_free(&here), -1);
  ASSERT_STRNE(gmlake_last_error(), "");
  EXPECT_EQ(gmlake_malloc(0, 0, 0), nullptr);
  EXPECT_STREQ(gmlake_last_error(), "");
  gmlake_shutdown();
}

// What a forked child finds, as bits of its exit status.
int ChildChecks(char* parents) {
  int failed = 0;
  // Every call answers at once, even if a thread of the parent held a lock
  // of gmlake at the fork: the child never takes one.
  if (gmlake_malloc(1 << 20, 0, 0) != nullptr) failed |= 1;
  if (std::strstr(gmlake_last_error(), "fork") == nullptr) failed |= 2;
  if (gmlake_free(parents) != -1) failed |= 4;
  try {
    gmlake_torch_malloc(1 << 20, 0, nullptr);
    failed |= 8;
  } catch (const std::runtime_error& e) {
    if (std::strstr(e.what(), "CUDA out of memory") != nullptr) failed |= 8;
  }
  gmlake_torch_free(parents, 3 << 20, 0, nullptr);  // ignored
  if (gmlake_empty_cache() != 0) failed |= 16;
  if (gmlake_stats_json(0) != nullptr) failed |= 32;
  if (gmlake_init("backend:host,lake:embedded,log:false") != -1) failed |= 64;
  gmlake_shutdown();  // does nothing here
  // On the host backend the parent's memory is shared with the child (the
  // mappings of its memfds are inherited), as documented.
  if (parents[0] != 0x5a) failed |= 128;
  parents[1] = 0x33;
  return failed;
}

// Fork is supported in one way: a child of a process that started gmlake
// cannot use it (nor could it use CUDA), and every call says so at once.
// Without that, a child forked while another thread was inside gmlake hung
// on the copied lock, and otherwise allocated from a copy of the parent's
// books: memory the parent also hands out.
TEST(CApiTest, AForkedChildIsRefusedAtOnceEvenWhileAThreadIsInside) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  char* parents = static_cast<char*>(gmlake_malloc(3 << 20, 0, 0));
  ASSERT_NE(parents, nullptr) << gmlake_last_error();
  std::memset(parents, 0x5a, 3 << 20);
  std::atomic<bool> stop{false};
  std::thread busy([&stop] {
    for (size_t i = 0; !stop.load(); ++i) {
      void* q = gmlake_malloc(((i % 7) + 1) << 20, 0, 0);
      gmlake_free(q);
      if (i % 16 == 0) gmlake_empty_cache();
    }
  });
  for (int round = 0; round < 16; ++round) {
    parents[1] = 0x5a;
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) _exit(ChildChecks(parents));
    // Generous: a healthy child exits in milliseconds.
    int status = 0;
    pid_t done = 0;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((done = waitpid(child, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (done == 0) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      ADD_FAILURE() << "round " << round << ": the forked child hung";
      continue;
    }
    ASSERT_TRUE(WIFEXITED(status)) << "round " << round;
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "round " << round << ": failed checks (bits of ChildChecks)";
    EXPECT_EQ(parents[1], 0x33) << "the child's write is the parent's too";
  }
  stop = true;
  busy.join();
  // The parent is untouched by it all.
  EXPECT_EQ(gmlake_free(parents), 0) << gmlake_last_error();
  void* p = gmlake_malloc(5 << 20, 0, 0);
  EXPECT_NE(p, nullptr) << gmlake_last_error();
  EXPECT_EQ(gmlake_free(p), 0);
  gmlake_shutdown();
}

TEST(CApiTest, ConfIsCheckedWithoutStartingAnything) {
  EXPECT_EQ(gmlake_check_conf("backend:host,capacity:2GiB"), 0);
  EXPECT_EQ(gmlake_check_conf("capacity:lots"), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("capacity"),
            std::string::npos);
  EXPECT_EQ(gmlake_check_conf("colour:blue"), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("colour"), std::string::npos)
      << gmlake_last_error();
  EXPECT_EQ(gmlake_is_initialized(), 0);
}

TEST(CApiTest, PyTorchHooksRecordStreamEmptyCacheAndFraction) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false,"
                        "host_capacity:1GiB"),
            0)
      << gmlake_last_error();
  EXPECT_EQ(gmlake_is_initialized(), 1);
  void* p = gmlake_torch_malloc(4 << 20, 0, reinterpret_cast<void*>(1));
  ASSERT_NE(p, nullptr) << gmlake_last_error();
  gmlake_torch_record_stream(p, reinterpret_cast<void*>(2));
  gmlake_torch_record_stream(nullptr, reinterpret_cast<void*>(2));
  gmlake_torch_free(p, 4 << 20, 0, reinterpret_cast<void*>(1));
  // record_stream of memory gmlake did not hand out: ignored, as PyTorch's
  // allocator ignores what is not its own (the reason is kept).
  gmlake_torch_record_stream(p, reinterpret_cast<void*>(2));
  EXPECT_NE(std::string(gmlake_last_error()).find("not a live allocation"),
            std::string::npos);
  gmlake_torch_empty_cache();
  char* stats = gmlake_stats_json(0);
  EXPECT_NE(std::string(stats).find("\"reserved_bytes.all.current\":0,"),
            std::string::npos)
      << stats;
  gmlake_free_string(stats);

  EXPECT_EQ(gmlake_memory_fraction(0), 1.0);
  gmlake_torch_set_memory_fraction(0.5, 0);
  EXPECT_EQ(gmlake_memory_fraction(0), 0.5);
  EXPECT_EQ(gmlake_malloc(600 << 20, 0, 0), nullptr);
  EXPECT_EQ(gmlake_set_memory_fraction(0, 2.0), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("not in [0, 1]"),
            std::string::npos);

  EXPECT_EQ(gmlake_record_history(10, 3, 3, 0), -1);
  EXPECT_EQ(gmlake_record_history(10, 0, 4, 0), -1);
  ASSERT_EQ(gmlake_record_history(10, 0, 3, 1), 0);
  void* q = gmlake_malloc(4096, 0, 0);
  char* snap = gmlake_snapshot_json();
  EXPECT_NE(std::string(snap).find("\"action\":\"alloc\""), std::string::npos)
      << snap;
  gmlake_free_string(snap);
  EXPECT_EQ(gmlake_free(q), 0);
  EXPECT_EQ(gmlake_reset_peaks(0), 0);
  EXPECT_EQ(gmlake_reset_accumulated(-1), 0);
  stats = gmlake_stats_json(0);
  EXPECT_NE(std::string(stats).find("\"allocated_bytes.all.freed\":0,"),
            std::string::npos)
      << stats;
  gmlake_free_string(stats);
  gmlake_shutdown();
  EXPECT_EQ(gmlake_is_initialized(), 0);
}

// PyTorch names the device of every free: the free goes to that device's
// allocator only, so a pointer named with the wrong device stays live.
TEST(CApiTest, TorchFreeGoesToTheDeviceItNames) {
  ASSERT_EQ(gmlake_init("backend:host,lake:embedded,log:false"), 0)
      << gmlake_last_error();
  void* p = gmlake_torch_malloc(1 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr) << gmlake_last_error();
  auto allocated = [] {
    char* stats = gmlake_stats_json(0);
    const std::string s = stats;
    gmlake_free_string(stats);
    return s.find("\"allocated_bytes.all.current\":1048576") !=
           std::string::npos;
  };
  gmlake_torch_free(p, 1 << 20, 3, nullptr);  // no device 3
  EXPECT_NE(std::string(gmlake_last_error()).find("device 3"),
            std::string::npos)
      << gmlake_last_error();
  EXPECT_TRUE(allocated()) << "freed although the device was wrong";
  gmlake_torch_free(p, 1 << 20, 0, nullptr);
  EXPECT_FALSE(allocated());
  gmlake_shutdown();
}

TEST(CApiTest, DaemonRequiredButAbsentSaysSo) {
  EXPECT_EQ(gmlake_init("lake:daemon,socket:/nonexistent/gmlaked.sock"), -1);
  EXPECT_NE(std::string(gmlake_last_error()).find("/nonexistent/gmlaked.sock"),
            std::string::npos)
      << gmlake_last_error();
}

}  // namespace
