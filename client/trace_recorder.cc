// Copyright 2026 The GMLake Authors.

#include "client/trace_recorder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gmlake {

const char* TraceActionName(TraceAction action) {
  switch (action) {
    case TraceAction::kAlloc:
      return "alloc";
    case TraceAction::kFreeRequested:
      return "free_requested";
    case TraceAction::kFreeCompleted:
      return "free_completed";
    case TraceAction::kSegmentMap:
      return "segment_map";
    case TraceAction::kSegmentUnmap:
      return "segment_unmap";
    case TraceAction::kOom:
      return "oom";
    case TraceAction::kSegmentAlloc:
      return "segment_alloc";
    case TraceAction::kSegmentFree:
      return "segment_free";
  }
  return "unknown";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

namespace {
// The stack of the allocator call this thread is in (CallScope).
thread_local uint32_t current_stack = StackCapture::kNoStack;
}  // namespace

TraceRecorder::CallScope::CallScope(TraceRecorder* recorder, CallKind kind) {
  if (!recorder->on()) return;
  active_ = true;
  outer_ = current_stack;
  const HistoryContext context =
      recorder->context_.load(std::memory_order_relaxed);
  // Allocations keep their stack for the live block whatever the context
  // (but none); frees only for the history's "all".
  const bool wanted =
      context == HistoryContext::kAll ||
      (context != HistoryContext::kNone && kind == CallKind::kAllocates);
  // No stack wanted: none captured either (the GIL and a walk saved).
  current_stack = wanted ? recorder->capture_.Capture(recorder->stacks_.load(
                               std::memory_order_relaxed))
                         : StackCapture::kNoStack;
}

uint32_t TraceRecorder::CurrentStack() { return current_stack; }

namespace {
// Compile-context names, interned for the process (index 0: "N/A"), and
// each thread's stack of them.
Mutex compile_names_mu;
std::vector<std::string>& CompileNames()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(compile_names_mu) {
  static auto* names = new std::vector<std::string>{"N/A"};
  return *names;
}
thread_local std::vector<uint32_t> compile_stack;
}  // namespace

void TraceRecorder::PushCompileContext(const std::string& name) {
  MutexLock lock(&compile_names_mu);
  std::vector<std::string>& names = CompileNames();
  auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) it = names.insert(names.end(), name);
  compile_stack.push_back(static_cast<uint32_t>(it - names.begin()));
}

void TraceRecorder::PopCompileContext() {
  if (!compile_stack.empty()) compile_stack.pop_back();
}

std::string TraceRecorder::CompileContextName(uint32_t id) {
  MutexLock lock(&compile_names_mu);
  const std::vector<std::string>& names = CompileNames();
  return id < names.size() ? names[id] : names[0];
}

std::string TraceRecorder::FramesJson(uint32_t stack) const {
  std::string out = "[";
  bool first = true;
  for (const Frame& f : capture_.Frames(stack)) {
    absl::StrAppend(
        &out, first ? "" : ",", "{\"filename\":", JsonString(f.filename),
        ",\"line\":", f.line, ",\"name\":", JsonString(f.name), "}");
    first = false;
  }
  absl::StrAppend(&out, "]");
  return out;
}

std::string TraceRecorder::ForwardFramesJson(uint32_t stack) const {
  const std::vector<std::string> lines = capture_.ForwardFrames(stack);
  if (lines.empty()) return "";
  std::string out = "[";
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ",", JsonString(lines[i]));
  }
  absl::StrAppend(&out, "]");
  return out;
}

TraceRecorder::CallScope::~CallScope() {
  if (active_) current_stack = outer_;
}

void TraceRecorder::Configure(size_t max_entries, StackKind stacks,
                              HistoryContext context, bool clear) {
  MutexLock lock(&mu_);
  std::vector<TraceEntry> kept;
  if (!clear) kept = EntriesLocked();
  if (kept.size() > max_entries) {
    kept.erase(kept.begin(), kept.end() - max_entries);
  }
  ring_ = std::move(kept);
  next_ = 0;
  max_entries_ = max_entries;
  stacks_.store(stacks, std::memory_order_relaxed);
  context_.store(context, std::memory_order_relaxed);
  const bool blocks =
      context != HistoryContext::kNone && stacks != StackKind::kNone;
  block_stacks_.store(blocks, std::memory_order_relaxed);
  on_.store(max_entries != 0 || blocks, std::memory_order_relaxed);
}

void TraceRecorder::SetUserMetadata(const std::string& metadata) {
  MutexLock lock(&mu_);
  auto it = std::find(metadata_.begin(), metadata_.end(), metadata);
  if (it == metadata_.end()) it = metadata_.insert(metadata_.end(), metadata);
  current_metadata_ = static_cast<uint32_t>(it - metadata_.begin());
}

void TraceRecorder::Record(TraceAction action, DevicePtr addr, uint64_t size,
                           StreamHandle stream, uint64_t device_free) {
  MutexLock lock(&mu_);
  if (max_entries_ == 0) return;
  TraceEntry e;
  e.action = action;
  e.addr = addr;
  e.size = size;
  e.stream = stream;
  e.time_us = absl::ToUnixMicros(absl::Now());
  e.device_free = device_free;
  // "state": the stack is the live block's, not the event's.
  e.stack = context_.load(std::memory_order_relaxed) == HistoryContext::kState
                ? StackCapture::kNoStack
                : current_stack;
  e.user_metadata = current_metadata_;
  e.compile_context = compile_stack.empty() ? 0 : compile_stack.back();
  if (ring_.size() < max_entries_) {
    ring_.push_back(e);
  } else {
    ring_[next_] = e;
    next_ = (next_ + 1) % max_entries_;
  }
}

std::vector<TraceEntry> TraceRecorder::EntriesLocked() const {
  std::vector<TraceEntry> out(ring_.begin() + next_, ring_.end());
  out.insert(out.end(), ring_.begin(), ring_.begin() + next_);
  return out;
}

std::vector<TraceEntry> TraceRecorder::Entries() const {
  MutexLock lock(&mu_);
  return EntriesLocked();
}

std::string TraceRecorder::UserMetadata(uint32_t index) const {
  MutexLock lock(&mu_);
  return index < metadata_.size() ? metadata_[index] : std::string();
}

std::string TraceRecorder::ToJson() const {
  MutexLock lock(&mu_);
  std::string out = "[";
  bool first = true;
  for (const TraceEntry& e : EntriesLocked()) {
    absl::StrAppend(
        &out, first ? "" : ",", "{\"action\":\"", TraceActionName(e.action),
        "\",\"addr\":", e.addr, ",\"size\":", e.size, ",\"stream\":", e.stream,
        ",\"time_us\":", e.time_us,
        ",\"user_metadata\":", JsonString(metadata_[e.user_metadata]),
        ",\"compile_context\":",
        JsonString(CompileContextName(e.compile_context)));
    if (e.action == TraceAction::kOom) {
      absl::StrAppend(&out, ",\"device_free\":", e.device_free);
    }
    absl::StrAppend(&out, ",\"frames\":", FramesJson(e.stack));
    if (std::string forward = ForwardFramesJson(e.stack); !forward.empty()) {
      absl::StrAppend(&out, ",\"forward_frames\":", forward);
    }
    absl::StrAppend(&out, "}");
    first = false;
  }
  absl::StrAppend(&out, "]");
  return out;
}

}  // namespace gmlake
