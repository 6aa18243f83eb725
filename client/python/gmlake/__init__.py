# Copyright 2026 The GMLake Authors.
"""GMLake for PyTorch: libgmlake.so as PyTorch's CUDA allocator, no patching.

    import gmlake
    gmlake.enable()          # before the first CUDA tensor
    ...
    gmlake.memory_stats()    # torch.cuda.memory_stats()'s keys, plus gmlake.*

libgmlake.so is found through GMLAKE_LIB, else beside this package, else
bazel-bin/client/. Options: GMLAKE_CONF (docs/tuning.md).
"""
import ctypes
import json
import os

_lib = None
_path = None


def _find_library():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("GMLAKE_LIB", ""),
                  os.path.join(here, "libgmlake.so"),
                  os.path.join(here, "..", "..", "..", "bazel-bin", "client", "libgmlake.so")]
    for c in candidates:
        if c and os.path.exists(c):
            return os.path.abspath(c)
    raise RuntimeError("gmlake: libgmlake.so not found; build it with "
                       "`bazel build //client:libgmlake.so` or set GMLAKE_LIB")


def _load():
    global _lib, _path
    if _lib is None:
        _path = _find_library()
        lib = ctypes.CDLL(_path)
        lib.gmlake_stats_json.restype = ctypes.c_void_p
        lib.gmlake_stats_json.argtypes = [ctypes.c_int]
        lib.gmlake_snapshot_json.restype = ctypes.c_void_p
        lib.gmlake_free_string.argtypes = [ctypes.c_void_p]
        lib.gmlake_last_error.restype = ctypes.c_char_p
        lib.gmlake_describe.restype = ctypes.c_char_p
        lib.gmlake_empty_cache.restype = ctypes.c_uint64
        lib.gmlake_set_capacity.argtypes = [ctypes.c_int, ctypes.c_uint64]
        _lib = lib
    return _lib


def _error():
    message = _load().gmlake_last_error().decode()
    return RuntimeError(message if message.startswith("gmlake") else "gmlake: " + message)


def _check(rc):
    if rc != 0:
        raise _error()


def enable():
    """Makes libgmlake.so PyTorch's CUDA allocator (call before any CUDA tensor)."""
    import torch
    lib = _load()
    _check(lib.gmlake_init(None))
    # Out of memory raises torch.OutOfMemoryError where the shim can be
    # built, else a RuntimeError with PyTorch's wording (gmlake/_oom.py).
    from gmlake import _oom
    path, malloc_name, free_name = _oom.entry_points(lib, _path, torch)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, malloc_name, free_name)
    torch.cuda.memory.change_current_allocator(alloc)


def describe():
    d = _load().gmlake_describe()
    return d.decode() if d else None


def _json(ptr):
    if not ptr:  # never string_at(NULL): that is a segfault
        raise _error()
    try:
        return json.loads(ctypes.string_at(ptr).decode())
    finally:
        _load().gmlake_free_string(ptr)


def memory_stats(device=0):
    """PyTorch's memory_stats() keys ("allocated_bytes.all.peak", ...) and gmlake.*."""
    return _json(_load().gmlake_stats_json(device))


def memory_snapshot():
    """The shape of torch.cuda.memory._snapshot()."""
    return _json(_load().gmlake_snapshot_json())


def set_capacity(nbytes, device=0):
    _check(_load().gmlake_set_capacity(device, int(nbytes)))


def empty_cache():
    return _load().gmlake_empty_cache()


def reset_peak_stats():
    _load().gmlake_reset_peak_stats()
