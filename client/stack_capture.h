// Copyright 2026 The GMLake Authors.
//
// StackCapture: where an allocation came from, for memory_viz's "frames".
//
// C++ frames come from backtrace() and dladdr(); Python frames from the
// interpreter's C API, found with dlsym in the running process (libgmlake
// does not link libpython) and used only when the calling thread holds the
// GIL: a Python op allocating does, PyTorch's autograd threads do not (their
// stacks have C++ frames only). Frames are interned, so a stack is a small
// vector of ids and repeated stacks cost nothing more.

#ifndef GMLAKE_CLIENT_STACK_CAPTURE_H_
#define GMLAKE_CLIENT_STACK_CAPTURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

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

// Not thread-safe: the caller serializes.
class StackCapture {
 public:
  static constexpr uint32_t kNoStack = ~uint32_t{0};

  StackCapture();
  ~StackCapture();
  StackCapture(const StackCapture&) = delete;
  StackCapture& operator=(const StackCapture&) = delete;

  // The calling thread's stack, innermost frame first (as PyTorch lists
  // them): C++ frames (kAll), then Python frames when this thread holds the
  // GIL. kNoStack for kNone or when nothing was found.
  uint32_t Capture(StackKind kind);
  // The frames of a stack Capture returned.
  std::vector<const Frame*> Frames(uint32_t stack) const;
  // Whether Python frames can be had in this process at all.
  bool has_python() const;

 private:
  uint32_t Intern(Frame f);
  void CaptureNative(std::vector<uint32_t>* out);
  void CapturePython(std::vector<uint32_t>* out);

  std::vector<Frame> frames_;
  absl::flat_hash_map<std::string, uint32_t> frame_ids_;
  // Native return address -> frame id.
  absl::flat_hash_map<uintptr_t, uint32_t> native_;
  // Python code object (a reference kept, so the address stays its own) ->
  // ids of its file and function, as a frame without a line.
  absl::flat_hash_map<void*, Frame> code_;
  std::vector<std::vector<uint32_t>> stacks_;
  absl::flat_hash_map<std::string, uint32_t> stack_ids_;
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_STACK_CAPTURE_H_
