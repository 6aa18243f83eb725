// Copyright 2026 The GMLake Authors.
//
// TraceRecorder: a device's allocator history, for PyTorch's memory_viz
// (torch.cuda.memory._record_memory_history, _snapshot()["device_traces"]).
//
// Off by default, and then the allocator pays one relaxed atomic load per
// call (on()). When on, each event is kept in a ring of max_entries, with the
// time and, when asked, the stack of the allocator call that caused it
// (stack_capture.h): a CallScope at the top of each allocator entry point
// captures it before any lock is taken, and every event recorded on that
// thread until the scope ends carries it. The recorder has a lock of its
// own: the allocator records under its lock, and the snapshot reads the ring
// without it.

#ifndef GMLAKE_CLIENT_TRACE_RECORDER_H_
#define GMLAKE_CLIENT_TRACE_RECORDER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "client/stack_capture.h"
#include "common/mutex.h"
#include "common/vmm.h"

namespace gmlake {

// PyTorch's TraceEntry actions that GMLake produces. Mapping pages into an
// arena is a "segment_map" (as PyTorch's expandable segments): a mapping
// next to mapped pages joins their segment. Another allocator's segments
// (MemPool(allocator=...)) are fixed ranges, as PyTorch's own segments:
// "segment_alloc" and "segment_free" (segment_observer.h says who needs the
// difference). The order is the C API's numbering (gmlake.h).
enum class TraceAction : uint8_t {
  kAlloc,          // a block handed out
  kFreeRequested,  // freed by the caller
  kFreeCompleted,  // reusable (other streams' work on it has finished)
  kSegmentMap,     // pages mapped (slow path)
  kSegmentUnmap,   // pages unmapped (stitched elsewhere, or given back)
  kOom,            // a request that failed
  kSegmentAlloc,   // a segment of another allocator taken
  kSegmentFree,    // one given back to it
};

const char* TraceActionName(TraceAction action);

// Which stacks are kept: PyTorch's _record_memory_history(context=...).
// Every one but kNone keeps the stack of each live block (the snapshot's
// blocks[].frames).
enum class HistoryContext : uint8_t {
  kNone,   // none
  kState,  // live blocks' only: no event in the history carries one
  kAlloc,  // and the history's allocations (and what they map)
  kAll,    // and its frees
};

// Whether the entry point is an allocation or gives memory back (a free,
// a reclaim, empty_cache).
enum class CallKind : uint8_t { kAllocates, kFrees };

struct TraceEntry {
  TraceAction action = TraceAction::kAlloc;
  DevicePtr addr = 0;
  uint64_t size = 0;
  StreamHandle stream = 0;
  int64_t time_us = 0;       // microseconds since the epoch
  uint64_t device_free = 0;  // kOom: what the lake could still give
  uint32_t stack = StackCapture::kNoStack;
  uint32_t user_metadata = 0;  // TraceRecorder's string of that index
  // torch.compile's region the call was made in (CompileContextName; 0:
  // none, PyTorch's "N/A").
  uint32_t compile_context = 0;
};

class TraceRecorder {
 public:
  // Captures the calling thread's stack for the events recorded on it while
  // the scope lives. Only at an entry point, with no allocator lock held.
  class CallScope {
   public:
    CallScope(TraceRecorder* recorder, CallKind kind);
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    bool active_ = false;
    uint32_t outer_ = StackCapture::kNoStack;
  };

  // Starts recording the last `max_entries` events (0 stops), with stacks
  // of `stacks` kind on the events `context` says; `clear` drops what was
  // recorded so far.
  // Live blocks keep stacks whenever `context` and `stacks` ask for any,
  // even with max_entries 0 (PyTorch's enabled="state": no history).
  void Configure(size_t max_entries, StackKind stacks, HistoryContext context,
                 bool clear);
  // Whether live blocks keep the stack of their malloc (CurrentStack()).
  bool block_stacks() const {
    return block_stacks_.load(std::memory_order_relaxed);
  }
  // The stack of the allocator call this thread is in (CallScope), or
  // StackCapture::kNoStack.
  static uint32_t CurrentStack();
  // `stack`'s frames as a JSON array of PyTorch's frames ({"filename",
  // "line", "name"}); [] for kNoStack.
  std::string FramesJson(uint32_t stack) const;
  // Its forward trace as a JSON array of strings (PyTorch's
  // "forward_frames"), "" when it has none.
  std::string ForwardFramesJson(uint32_t stack) const;
  // The string that every event recorded from now on carries as its
  // "user_metadata" (torch.cuda.memory._set_memory_metadata; "" for none).
  void SetUserMetadata(const std::string& metadata);
  bool on() const { return on_.load(std::memory_order_relaxed); }

  // torch.compile's regions (PyTorch's pushCompileContext and
  // popCompileContext, which its record-function callbacks call around a
  // "Torch-Compiled Region: N/M"): a stack per thread, process-wide; the
  // events a thread records carry its innermost region.
  static void PushCompileContext(const std::string& name);
  static void PopCompileContext();
  // The name of compile context `id` ("N/A" for 0).
  static std::string CompileContextName(uint32_t id);

  void Record(TraceAction action, DevicePtr addr, uint64_t size,
              StreamHandle stream, uint64_t device_free = 0);

  // The events, oldest first, as a JSON array of PyTorch's TraceEntry
  // objects ({"action", "addr", "size", "stream", "time_us", "frames",
  // "user_metadata", "device_free" for an oom}).
  std::string ToJson() const;
  // The events, oldest first.
  std::vector<TraceEntry> Entries() const;
  // An event's user_metadata string.
  std::string UserMetadata(uint32_t index) const;
  // The embedder's handle of `stack` (StackGatherer), null if none.
  void* StackHandle(uint32_t stack) const { return capture_.Handle(stack); }

 private:
  std::vector<TraceEntry> EntriesLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::atomic<bool> on_{false};
  std::atomic<StackKind> stacks_{StackKind::kNone};
  std::atomic<HistoryContext> context_{HistoryContext::kNone};
  std::atomic<bool> block_stacks_{false};
  StackCapture capture_;
  mutable Mutex mu_;
  size_t max_entries_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<TraceEntry> ring_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;  // where the next entry goes
  // Every metadata string set (index 0: ""), and the one events get now.
  std::vector<std::string> metadata_ ABSL_GUARDED_BY(mu_) = {""};
  uint32_t current_metadata_ ABSL_GUARDED_BY(mu_) = 0;
};

// `s` as a JSON string literal, quotes included.
std::string JsonString(const std::string& s);

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_TRACE_RECORDER_H_
