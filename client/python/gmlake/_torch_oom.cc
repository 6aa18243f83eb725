// Copyright 2026 The GMLake Authors.
//
// The PyTorch allocator entry points that fail with torch.OutOfMemoryError.
//
// libgmlake.so's gmlake_torch_malloc throws std::runtime_error, which PyTorch
// turns into a plain RuntimeError: libgmlake does not link torch, and
// torch.OutOfMemoryError is what a c10::OutOfMemoryError thrown in C++
// becomes. This file is that one piece linked to torch (libc10 only). The
// Python module compiles it on the machine where torch is, the first time
// gmlake.enable() runs there, and caches it (gmlake/_oom.py); where no
// compiler or no torch headers are, gmlake keeps the RuntimeError.
//
// It holds no state but the three libgmlake entry points it forwards to,
// bound once from Python with the addresses of the libgmlake.so already
// loaded, so both sides use the one allocator of the process.

#include <c10/util/Exception.h>
#include <sys/types.h>

#include <string>

extern "C" {

using TryMallocFn = int (*)(ssize_t, int, void*, void**, int*);
using ErrorFn = const char* (*)();
using FreeFn = void (*)(void*, ssize_t, int, void*);

namespace {
TryMallocFn try_malloc = nullptr;
ErrorFn last_error = nullptr;
FreeFn free_fn = nullptr;
}  // namespace

// Binds libgmlake's gmlake_torch_try_malloc, gmlake_last_error and
// gmlake_torch_free. 0 on success, -1 if one is missing.
int gmlake_torch_oom_bind(void* try_malloc_fn, void* last_error_fn,
                          void* torch_free_fn) {
  if (try_malloc_fn == nullptr || last_error_fn == nullptr ||
      torch_free_fn == nullptr) {
    return -1;
  }
  try_malloc = reinterpret_cast<TryMallocFn>(try_malloc_fn);
  last_error = reinterpret_cast<ErrorFn>(last_error_fn);
  free_fn = reinterpret_cast<FreeFn>(torch_free_fn);
  return 0;
}

void* gmlake_torch_oom_malloc(ssize_t size, int device, void* stream) {
  TORCH_CHECK(try_malloc != nullptr,
              "gmlake: the OutOfMemoryError shim was not bound to "
              "libgmlake.so (call gmlake.enable())");
  void* ptr = nullptr;
  int out_of_memory = 0;
  if (try_malloc(size, device, stream, &ptr, &out_of_memory) == 0) {
    return ptr;
  }
  // Copied before anything else on this thread can call into gmlake.
  const std::string message(last_error());
  TORCH_CHECK_WITH(OutOfMemoryError, !out_of_memory, message);
  TORCH_CHECK(false, message);
  return nullptr;
}

void gmlake_torch_oom_free(void* ptr, ssize_t size, int device, void* stream) {
  if (free_fn != nullptr) free_fn(ptr, size, device, stream);
}

}  // extern "C"
