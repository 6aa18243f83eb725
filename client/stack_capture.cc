// Copyright 2026 The GMLake Authors.

#include "client/stack_capture.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gmlake {
namespace {

constexpr int kMaxNativeFrames = 48;
constexpr int kMaxPythonFrames = 64;
// Frames of the capture itself (Capture and the recorder calling it).
constexpr int kSkipNative = 2;

// The CPython functions used (the stable ABI since 3.9), looked up in the
// running process. `ok` is false outside Python.
struct PythonApi {
  int (*is_initialized)() = nullptr;       // Py_IsInitialized
  int (*is_finalizing)() = nullptr;        // Py_IsFinalizing (opt.)
  void* (*this_thread_state)() = nullptr;  // PyGILState_GetThisThreadState
  int (*gil_ensure)() = nullptr;           // PyGILState_Ensure
  void (*gil_release)(int) = nullptr;      // PyGILState_Release
  void* (*current_frame)() = nullptr;      // PyEval_GetFrame (borrowed)
  void* (*frame_code)(void*) = nullptr;    // PyFrame_GetCode (new ref)
  void* (*frame_back)(void*) = nullptr;    // PyFrame_GetBack (new ref)
  int (*frame_line)(void*) = nullptr;      // PyFrame_GetLineNumber
  void* (*get_attr)(void*, const char*) = nullptr;  // new ref
  const char* (*utf8)(void*) = nullptr;             // PyUnicode_AsUTF8
  void (*incref)(void*) = nullptr;                  // Py_IncRef
  void (*decref)(void*) = nullptr;                  // Py_DecRef
  void (*clear_error)() = nullptr;                  // PyErr_Clear
  bool ok = false;

  // Whether this thread's Python frames can be walked now.
  bool Usable() const {
    return ok && is_initialized() != 0 &&
           (is_finalizing == nullptr || is_finalizing() == 0) &&
           this_thread_state() != nullptr;
  }
};

template <typename F>
void Lookup(const char* name, F* fn, bool* ok) {
  *fn = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  if (*fn == nullptr) *ok = false;
}

const PythonApi& Python() {
  static const PythonApi api = [] {
    PythonApi a;
    a.ok = true;
    Lookup("Py_IsInitialized", &a.is_initialized, &a.ok);
    Lookup("PyGILState_GetThisThreadState", &a.this_thread_state, &a.ok);
    Lookup("PyGILState_Ensure", &a.gil_ensure, &a.ok);
    Lookup("PyGILState_Release", &a.gil_release, &a.ok);
    Lookup("PyEval_GetFrame", &a.current_frame, &a.ok);
    Lookup("PyFrame_GetCode", &a.frame_code, &a.ok);
    Lookup("PyFrame_GetBack", &a.frame_back, &a.ok);
    Lookup("PyFrame_GetLineNumber", &a.frame_line, &a.ok);
    Lookup("PyObject_GetAttrString", &a.get_attr, &a.ok);
    Lookup("PyUnicode_AsUTF8", &a.utf8, &a.ok);
    Lookup("Py_IncRef", &a.incref, &a.ok);
    Lookup("Py_DecRef", &a.decref, &a.ok);
    Lookup("PyErr_Clear", &a.clear_error, &a.ok);
    // Public from 3.13, private before; either may be missing.
    bool optional = true;
    Lookup("Py_IsFinalizing", &a.is_finalizing, &optional);
    if (a.is_finalizing == nullptr) {
      Lookup("_Py_IsFinalizing", &a.is_finalizing, &optional);
    }
    return a;
  }();
  return api;
}

// A string attribute of a Python object ("" if it has none).
std::string StringAttr(const PythonApi& py, void* obj, const char* name) {
  void* value = py.get_attr(obj, name);
  if (value == nullptr) {
    py.clear_error();
    return "";
  }
  const char* text = py.utf8(value);
  std::string out = text != nullptr ? text : "";
  if (text == nullptr) py.clear_error();
  py.decref(value);
  return out;
}

std::string Demangle(const char* symbol) {
  int status = 0;
  char* plain = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  std::string out = (status == 0 && plain != nullptr) ? plain : symbol;
  std::free(plain);
  return out;
}

}  // namespace

StackCapture::StackCapture() = default;

// Code objects keep the references taken, and so do the gatherer's
// handles: by the time the allocator goes, the interpreter may be
// finalized, and dropping them then would crash.
StackCapture::~StackCapture() = default;

bool StackCapture::has_python() const { return Python().ok; }

uint32_t StackCapture::Intern(Frame f) {
  std::string key = absl::StrCat(f.filename, "\n", f.name, "\n", f.line);
  auto it = frame_ids_.find(key);
  if (it != frame_ids_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(frames_.size());
  frames_.push_back(std::move(f));
  frame_ids_.emplace(std::move(key), id);
  return id;
}

void StackCapture::InternNative(void* const* pcs, int n,
                                std::vector<uint32_t>* out) {
  for (int i = kSkipNative; i < n; ++i) {
    const uintptr_t pc = reinterpret_cast<uintptr_t>(pcs[i]);
    auto it = native_.find(pc);
    if (it == native_.end()) {
      Dl_info info = {};
      Frame f;
      const bool found = dladdr(pcs[i], &info) != 0;
      f.filename = found && info.dli_fname != nullptr ? info.dli_fname : "??";
      if (found && info.dli_sname != nullptr) {
        f.name = Demangle(info.dli_sname);
      } else {
        const uintptr_t base =
            found ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
        f.name = absl::StrFormat("+0x%x", pc - base);
      }
      it = native_.emplace(pc, Intern(std::move(f))).first;
    }
    out->push_back(it->second);
  }
}

void StackCapture::InternPython(std::vector<uint32_t>* out) {
  const PythonApi& py = Python();
  void* frame = py.current_frame();
  if (frame == nullptr) return;
  py.incref(frame);
  for (int depth = 0; frame != nullptr && depth < kMaxPythonFrames; ++depth) {
    void* code = py.frame_code(frame);
    auto it = code_.find(code);
    if (it == code_.end()) {
      Frame where;
      where.filename = StringAttr(py, code, "co_filename");
      where.name = StringAttr(py, code, "co_qualname");
      if (where.name.empty()) where.name = StringAttr(py, code, "co_name");
      it = code_.emplace(code, std::move(where)).first;  // keeps the ref
    } else {
      py.decref(code);
    }
    Frame f = it->second;
    f.line = py.frame_line(frame);
    out->push_back(Intern(std::move(f)));
    void* back = py.frame_back(frame);
    py.decref(frame);
    frame = back;
  }
  if (frame != nullptr) py.decref(frame);
}

uint32_t StackCapture::InternForwardLine(std::string line) {
  auto it = forward_ids_.find(line);
  if (it != forward_ids_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(forward_lines_.size());
  forward_lines_.push_back(line);
  forward_ids_.emplace(std::move(line), id);
  return id;
}

uint32_t StackCapture::InternStack(std::vector<uint32_t> ids,
                                   std::vector<uint32_t> forward) {
  if (ids.empty() && forward.empty()) return kNoStack;
  // The frame ids, a count, then the forward ids: two stacks that differ
  // only in where one list ends are two keys.
  std::string key(reinterpret_cast<const char*>(ids.data()),
                  ids.size() * sizeof(uint32_t));
  const uint32_t n = static_cast<uint32_t>(ids.size());
  key.append(reinterpret_cast<const char*>(&n), sizeof(n));
  key.append(reinterpret_cast<const char*>(forward.data()),
             forward.size() * sizeof(uint32_t));
  auto it = stack_ids_.find(key);
  if (it != stack_ids_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(stacks_.size());
  stacks_.push_back(Stack{std::move(ids), std::move(forward)});
  stack_ids_.emplace(std::move(key), id);
  return id;
}

namespace {
// The installed gatherer (StackGatherer): set rarely, read on each capture.
Mutex gatherer_mu;
std::optional<StackGatherer> installed_gatherer ABSL_GUARDED_BY(gatherer_mu);
std::atomic<bool> gatherer_set{false};

std::optional<StackGatherer> CurrentGatherer() {
  if (!gatherer_set.load(std::memory_order_acquire)) return std::nullopt;
  MutexLock lock(&gatherer_mu);
  return installed_gatherer;
}
}  // namespace

void SetStackGatherer(const StackGatherer* gatherer) {
  MutexLock lock(&gatherer_mu);
  if (gatherer == nullptr || gatherer->gather == nullptr) {
    installed_gatherer.reset();
  } else {
    installed_gatherer = *gatherer;
  }
  gatherer_set.store(installed_gatherer.has_value(), std::memory_order_release);
}

uint32_t StackCapture::Gather(const StackGatherer& g, StackKind kind) {
  void* handle = g.gather(g.ctx, kind == StackKind::kAll ? 1 : 0);
  if (handle == nullptr) return kNoStack;
  std::vector<Frame> frames;
  if (g.frames != nullptr) {
    g.frames(
        g.ctx, handle,
        [](void* sink, const char* filename, const char* name, int line) {
          static_cast<std::vector<Frame>*>(sink)->push_back(
              {filename != nullptr ? filename : "??",
               name != nullptr ? name : "??", line});
        },
        &frames);
  }
  std::vector<std::string> forward;
  if (g.forward != nullptr) {
    g.forward(
        g.ctx, handle,
        [](void* sink, const char* text) {
          if (text != nullptr) {
            static_cast<std::vector<std::string>*>(sink)->push_back(text);
          }
        },
        &forward);
  }
  uint32_t stack;
  bool kept = false;
  {
    MutexLock lock(&mu_);
    std::vector<uint32_t> ids;
    ids.reserve(frames.size());
    for (Frame& f : frames) ids.push_back(Intern(std::move(f)));
    std::vector<uint32_t> forward_ids;
    forward_ids.reserve(forward.size());
    for (std::string& line : forward) {
      forward_ids.push_back(InternForwardLine(std::move(line)));
    }
    stack = InternStack(std::move(ids), std::move(forward_ids));
    if (stack != kNoStack && !handles_.contains(stack)) {
      handles_.emplace(stack, handle);
      kept = true;
    }
  }
  if (!kept && g.release != nullptr) g.release(g.ctx, handle);
  return stack;
}

void* StackCapture::Handle(uint32_t stack) const {
  MutexLock lock(&mu_);
  auto it = handles_.find(stack);
  return it == handles_.end() ? nullptr : it->second;
}

uint32_t StackCapture::Capture(StackKind kind) {
  if (kind == StackKind::kNone) return kNoStack;
  if (std::optional<StackGatherer> g = CurrentGatherer()) {
    return Gather(*g, kind);
  }
  void* pcs[kMaxNativeFrames];
  const int n = kind == StackKind::kAll ? backtrace(pcs, kMaxNativeFrames) : 0;
  const PythonApi& py = Python();
  // The GIL first, then our lock (the order the header states).
  const bool python = py.Usable();
  const int gil = python ? py.gil_ensure() : 0;
  uint32_t stack;
  {
    MutexLock lock(&mu_);
    std::vector<uint32_t> ids;
    InternNative(pcs, n, &ids);
    if (python) InternPython(&ids);
    stack = InternStack(std::move(ids));
  }
  if (python) py.gil_release(gil);
  return stack;
}

std::vector<Frame> StackCapture::Frames(uint32_t stack) const {
  MutexLock lock(&mu_);
  std::vector<Frame> out;
  if (stack >= stacks_.size()) return out;
  for (uint32_t id : stacks_[stack].frames) out.push_back(frames_[id]);
  return out;
}

std::vector<std::string> StackCapture::ForwardFrames(uint32_t stack) const {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  if (stack >= stacks_.size()) return out;
  for (uint32_t id : stacks_[stack].forward) out.push_back(forward_lines_[id]);
  return out;
}

}  // namespace gmlake
