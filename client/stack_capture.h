// Copyright 2026 The GMLake Authors.
//
// StackCapture: where an allocation came from, for memory_viz's "frames".
//
// C++ frames come from backtrace() and dladdr(); Python frames from the
// interpreter's C API, found with dlsym in the running process (libgmlake
// does not link libpython). PyTorch releases the GIL around its ops, so the
// allocator is called without it: Capture takes it back for the calling
// thread (PyGILState_Ensure; as PyTorch's own memory history does), walks
// that thread's frames and lets go. Threads the interpreter never saw (no
// thread state) get C++ frames only. Frames are interned, so a stack is a
// small vector of ids and repeated stacks cost nothing more.
//
// Thread-safe. Locks: the GIL, then this object's lock. Capture must be
// called with no allocator lock held: a thread holding the GIL may be
// waiting for that lock (a tensor freed from Python).

#ifndef GMLAKE_CLIENT_STACK_CAPTURE_H_
#define GMLAKE_CLIENT_STACK_CAPTURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"

namespace gmlake {

// What to capture: PyTorch's _record_memory_history(stacks=...).
enum class StackKind : uint8_t {
  kNone,    // no frames
  kPython,  // Python frames
  kAll,     // Python and C++ frames
};

struct Frame {
  std::string filename;
  std::string name;
  int line = 0;
};

// Stacks from the embedder instead of gmlake's own walk: PyTorch's
// CapturedTraceback under the native door, which knows TorchScript frames
// and symbolizes C++ frames its own way. `gather` captures the calling
// thread's stack (C++ frames too when `cpp`; called with no gmlake lock
// held) and returns a handle, null for none; `frames` lists a handle's
// frames, innermost first, to `sink`; `forward` (optional) lists its
// forward trace, one string each (anomaly mode: the forward op whose
// backward allocates, on autograd's thread, which has no Python frames of
// its own); `release` drops one. gmlake keeps the first handle of each
// distinct stack (frames and forward trace) for callers that want the
// embedder's own object back (Handle: PyTorch's C++ snapshot), and
// releases the rest at once.
struct StackGatherer {
  using FrameSink = void (*)(void* sink_ctx, const char* filename,
                             const char* name, int line);
  using TextSink = void (*)(void* sink_ctx, const char* text);
  void* (*gather)(void* ctx, int cpp) = nullptr;
  void (*frames)(void* ctx, void* handle, FrameSink sink,
                 void* sink_ctx) = nullptr;
  void (*release)(void* ctx, void* handle) = nullptr;
  void (*forward)(void* ctx, void* handle, TextSink sink,
                  void* sink_ctx) = nullptr;
  void* ctx = nullptr;
};
// Installs `gatherer` for every StackCapture of the process (copied);
// null goes back to gmlake's own walk. Handles kept so far stay valid.
void SetStackGatherer(const StackGatherer* gatherer);

class StackCapture {
 public:
  static constexpr uint32_t kNoStack = ~uint32_t{0};

  StackCapture();
  ~StackCapture();
  StackCapture(const StackCapture&) = delete;
  StackCapture& operator=(const StackCapture&) = delete;

  // The calling thread's stack, innermost frame first (as PyTorch lists
  // them): C++ frames (kAll), then the thread's Python frames. kNoStack for
  // kNone or when nothing was found.
  uint32_t Capture(StackKind kind);
  // The frames of a stack Capture returned.
  std::vector<Frame> Frames(uint32_t stack) const;
  // Its forward trace (StackGatherer::forward), empty when none.
  std::vector<std::string> ForwardFrames(uint32_t stack) const;
  // The embedder's handle of that stack (StackGatherer), null when it was
  // walked by gmlake itself.
  void* Handle(uint32_t stack) const;
  // Whether Python frames can be had in this process at all.
  bool has_python() const;

 private:
  uint32_t Intern(Frame f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void InternNative(void* const* pcs, int n, std::vector<uint32_t>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With the GIL held.
  void InternPython(std::vector<uint32_t>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `forward`: ids of forward_lines_ (none for gmlake's own walk).
  uint32_t InternStack(std::vector<uint32_t> ids,
                       std::vector<uint32_t> forward = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t InternForwardLine(std::string line)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Capture through an installed gatherer.
  uint32_t Gather(const StackGatherer& g, StackKind kind);

  mutable Mutex mu_;
  std::vector<Frame> frames_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> frame_ids_ ABSL_GUARDED_BY(mu_);
  // Native return address -> frame id.
  absl::flat_hash_map<uintptr_t, uint32_t> native_ ABSL_GUARDED_BY(mu_);
  // Python code object (a reference kept, so the address stays its own) ->
  // its file and function, as a frame without a line.
  absl::flat_hash_map<void*, Frame> code_ ABSL_GUARDED_BY(mu_);
  struct Stack {
    std::vector<uint32_t> frames;   // ids of frames_
    std::vector<uint32_t> forward;  // ids of forward_lines_
  };
  std::vector<Stack> stacks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> forward_lines_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> forward_ids_ ABSL_GUARDED_BY(mu_);
  // By stack id: the gatherer's handle of its first capture (kept for the
  // process's life, as the code objects are).
  absl::flat_hash_map<uint32_t, void*> handles_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> stack_ids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_STACK_CAPTURE_H_
