# Copyright 2026 The GMLake Authors.
"""libgmlake.so through ctypes: finding it, loading it once, its signatures."""
import ctypes
import json
import os
import threading

_lock = threading.Lock()
_lib = None
_path = None


class GMLakeError(RuntimeError):
    """A failure reported by libgmlake, with its message."""


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    return [
        os.environ.get("GMLAKE_LIB", ""),
        # The wheel: the library and what it needs, side by side.
        os.path.join(here, "lib", "libgmlake.so"),
        os.path.join(here, "libgmlake.so"),
        # Bazel runfiles: client/python/gmlake -> client/libgmlake.so.
        os.path.join(here, "..", "..", "libgmlake.so"),
        # A checkout with `bazel build -c opt //client:libgmlake.so`.
        os.path.join(here, "..", "..", "..", "bazel-bin", "client", "libgmlake.so"),
    ]


def library_path():
    """The libgmlake.so this module uses (GMLAKE_LIB wins)."""
    for c in _candidates():
        if c and os.path.exists(c):
            return os.path.realpath(c)
    raise GMLakeError(
        "gmlake: libgmlake.so not found (looked in: "
        + ", ".join(c for c in _candidates() if c)
        + "); install the gmlake wheel, build it with "
        "`bazel build -c opt //client:libgmlake.so`, or set GMLAKE_LIB")


def _declare(lib):
    c = ctypes
    sig = {
        "gmlake_init": (c.c_int, [c.c_char_p]),
        "gmlake_check_conf": (c.c_int, [c.c_char_p]),
        "gmlake_is_initialized": (c.c_int, []),
        "gmlake_shutdown": (None, []),
        "gmlake_malloc": (c.c_void_p, [c.c_size_t, c.c_int, c.c_uint64]),
        "gmlake_free": (c.c_int, [c.c_void_p]),
        "gmlake_record_stream": (c.c_int, [c.c_void_p, c.c_uint64]),
        "gmlake_empty_cache": (c.c_uint64, []),
        "gmlake_set_capacity": (c.c_int, [c.c_int, c.c_uint64]),
        "gmlake_set_memory_fraction": (c.c_int, [c.c_int, c.c_double]),
        "gmlake_memory_fraction": (c.c_double, [c.c_int]),
        "gmlake_reset_peaks": (c.c_int, [c.c_int]),
        "gmlake_reset_accumulated": (c.c_int, [c.c_int]),
        "gmlake_record_history": (c.c_int,
                                  [c.c_uint64, c.c_int, c.c_int, c.c_int]),
        "gmlake_set_history_metadata": (c.c_int, [c.c_char_p]),
        "gmlake_stats_json": (c.c_void_p, [c.c_int]),
        "gmlake_snapshot_json": (c.c_void_p, []),
        "gmlake_free_string": (None, [c.c_void_p]),
        "gmlake_last_error": (c.c_char_p, []),
        "gmlake_describe": (c.c_char_p, []),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def load():
    """The loaded library (loaded on first use)."""
    global _lib, _path
    with _lock:
        if _lib is None:
            path = library_path()
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise GMLakeError(
                    f"gmlake: cannot load {path}: {e}; a library it needs is "
                    "missing (the wheel bundles them; a checkout build needs "
                    "Debian's gRPC, protobuf and Abseil)") from e
            _declare(lib)
            _lib, _path = lib, path
    return _lib


def loaded_path():
    load()
    return _path


def last_error():
    return load().gmlake_last_error().decode(errors="replace")


def error():
    """GMLakeError with libgmlake's last message (which may name gmlake
    itself already)."""
    message = last_error()
    return GMLakeError(message if message.startswith("gmlake")
                       else "gmlake: " + message)


def check(rc):
    """Raises GMLakeError with libgmlake's message when rc says failure."""
    if rc != 0:
        raise error()


def take_json(ptr):
    """Parses a JSON string libgmlake returned, and releases it."""
    if not ptr:  # never string_at(NULL): that is a segfault
        raise error()
    try:
        return json.loads(ctypes.string_at(ptr).decode())
    finally:
        load().gmlake_free_string(ptr)
