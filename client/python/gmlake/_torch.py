# Copyright 2026 The GMLake Authors.
"""GMLake as PyTorch's CUDA allocator, and PyTorch's memory calls routed to it.

The native door (gmlake/_door.py: a CUDAAllocator subclass compiled against
the installed torch) is used where it can be built; it serves CUDA graphs,
MemPool, cacheInfo and the rest of PyTorch's allocator interface. Else
PyTorch's CUDAPluggableAllocator takes malloc and free; its optional hooks
(record_stream, empty_cache, memory fraction) are set from here. Its
statistics, snapshot and history calls raise "does not yet support" under a
pluggable allocator, so the torch._C functions that torch.cuda.memory calls
for them are replaced by GMLake's: torch.cuda.memory_allocated,
max_memory_allocated, memory_reserved, max_memory_reserved, memory_stats,
memory_summary, reset_peak_memory_stats, reset_accumulated_memory_stats,
get_per_process_memory_fraction, memory._snapshot, memory._dump_snapshot and
memory._record_memory_history then work unchanged, for the device they name
(docs/stats.md lists what cannot work).
"""
import ctypes
import os
import sys
import threading

from . import _alloc_settings
from . import _lib
from . import _snapshot
from ._lib import GMLakeError

TOO_LATE = (
    "gmlake: too late to enable GMLake in this process: PyTorch has already "
    "initialised CUDA (torch.cuda.set_device, a CUDA tensor, "
    "torch.cuda.init(), ...), so its own caching allocator is in use and "
    "cannot be swapped. Call gmlake.enable() before the first CUDA call (in "
    "particular before torch.cuda.set_device), or start the program without "
    "editing it: `gmlake run -- torchrun ... train.py` or "
    "`python -m gmlake train.py`.")

# The hooks of PyTorch's pluggable allocator and GMLake's functions for them.
_HOOKS = (
    ("set_record_stream_fn", "gmlake_torch_record_stream"),
    ("set_reset_fn", "gmlake_torch_empty_cache"),
    ("set_memory_fraction_fn", "gmlake_torch_set_memory_fraction"),
)

_lock = threading.RLock()
_enabled_conf = None  # the GMLAKE_CONF text once enabled
_routed = {}          # torch._C name -> PyTorch's function it replaced
# Which door GMLake entered PyTorch by: "native" (gmlake/_door.py, a
# CUDAAllocator subclass) or "pluggable" (CUDAPluggableAllocator); None
# before enable().
door_in_use = None


def is_enabled():
    return _enabled_conf is not None


def _conf_text(conf):
    return conf if conf is not None else os.environ.get("GMLAKE_CONF", "")


def check_conf(conf=None):
    """Checks options (GMLAKE_CONF by default) without starting anything."""
    if _lib.load().gmlake_check_conf(_conf_text(conf).encode()) != 0:
        raise GMLakeError("gmlake: bad GMLAKE_CONF: " + _lib.last_error())


def open_lake(conf=None):
    """Starts the allocator now (it otherwise starts at the first allocation)."""
    _lib.check(_lib.load().gmlake_init(_conf_text(conf).encode()))


def enable(conf=None, open_lake_now=True):
    """Makes GMLake PyTorch's CUDA allocator. Idempotent."""
    global _enabled_conf
    text = _conf_text(conf)
    check_conf(text)
    with _lock:
        if _enabled_conf is not None:
            if text != _enabled_conf:
                raise GMLakeError(
                    f"gmlake: already enabled with GMLAKE_CONF={_enabled_conf!r}; "
                    f"it cannot change to {text!r} in a running process")
            if open_lake_now:
                open_lake(text)
            return
        try:
            import torch
        except ImportError as e:
            raise GMLakeError(
                "gmlake: enable() makes GMLake PyTorch's allocator, but PyTorch "
                f"cannot be imported here ({e}); install torch, or use the C "
                "API (gmlake.h) without it") from e
        if not hasattr(torch._C, "_cuda_customAllocator"):
            raise GMLakeError(
                "gmlake: this PyTorch has no CUDA support "
                f"(torch {torch.__version__}); install a CUDA build")
        # Before anything opens a lake: is PyTorch's own allocator in use?
        if torch.cuda.is_initialized():
            raise GMLakeError(TOO_LATE)
        was_open = _lib.load().gmlake_is_initialized() != 0
        if open_lake_now:
            open_lake(text)
        elif conf is not None:
            os.environ["GMLAKE_CONF"] = conf  # read at the first allocation
        try:
            missing = _install_allocator(torch)
        except BaseException:
            if not was_open:  # leave nothing open that PyTorch will not use
                _lib.load().gmlake_shutdown()
            raise
        _route(torch, missing)
        _enabled_conf = text
    if "set_record_stream_fn" in missing:
        print("gmlake: this PyTorch cannot tell a pluggable allocator about "
              "Tensor.record_stream; memory used on a second stream may be "
              "reused before that stream is done with it", file=sys.stderr)


def _install_allocator(torch):
    """Installs GMLake as PyTorch's allocator through the native door where
    it can be built, else the pluggable one, and says which. Returns the
    pluggable hooks this PyTorch lacks."""
    global door_in_use
    from . import _door
    try:
        path = _door.install(_lib.loaded_path(), torch)
    except _door.Unavailable as e:
        if "already initialized" in str(e):
            raise GMLakeError(TOO_LATE) from e
        missing = _install_pluggable(torch)
        door_in_use = "pluggable"
        print("gmlake: PyTorch allocator door: pluggable (%s)" % e,
              file=sys.stderr)
        return missing
    door_in_use = "native"
    print("gmlake: PyTorch allocator door: native CUDAAllocator subclass (%s)"
          % path, file=sys.stderr)
    return []


def _install_pluggable(torch):
    lib = _lib.load()
    # Out of memory raises torch.OutOfMemoryError where the shim can be
    # built, else a RuntimeError with PyTorch's wording (gmlake/_oom.py).
    from . import _oom
    path, malloc_name, free_name = _oom.entry_points(lib, _lib.loaded_path(),
                                                     torch)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, malloc_name,
                                                     free_name)
    raw = alloc.allocator()
    missing = []
    for setter, symbol in _HOOKS:
        set_hook = getattr(raw, setter, None)
        if set_hook is None:
            missing.append(setter)
            continue
        set_hook(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:
        if "already initialized" in str(e):
            raise GMLakeError(TOO_LATE) from e
        raise
    return missing


def current_device():
    """PyTorch's current CUDA device once CUDA is up, else 0."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return 0


def _device(device):
    return current_device() if device is None else int(device)


def _flat_stats(device):
    return _lib.take_json(_lib.load().gmlake_stats_json(_device(device)))


def stats(device=None):
    """One device's statistics, flat and sorted as torch.cuda.memory_stats()."""
    return dict(sorted(_flat_stats(device).items()))


def nested_stats(device=None):
    """The same, nested as torch._C._cuda_memoryStats returns them
    ("allocated_bytes.all.current" -> ["allocated_bytes"]["all"]["current"])."""
    out = {}
    for key, value in _flat_stats(device).items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def reset_peaks(device=None):
    _lib.check(_lib.load().gmlake_reset_peaks(_device(device)))


def reset_accumulated(device=None):
    _lib.check(_lib.load().gmlake_reset_accumulated(_device(device)))


def memory_fraction(device=None):
    f = _lib.load().gmlake_memory_fraction(_device(device))
    if f < 0:
        raise _lib.error()
    return f


def set_memory_fraction(fraction, device=None):
    _lib.check(_lib.load().gmlake_set_memory_fraction(_device(device),
                                                       float(fraction)))


def empty_cache():
    return _lib.load().gmlake_empty_cache()


def _record_history(enabled="all", context="all", stacks="all",
                    max_entries=sys.maxsize, clear_history=False, *more,
                    **more_kw):
    # Under the native door PyTorch's own entry point runs first: it checks
    # the arguments, installs what compile_context=True and annotations need
    # (record-function callbacks that call the door's pushCompileContext),
    # and hands the door its stack recorder. gmlake's own call then sets the
    # history exactly ("state", contexts, max_entries) as without the door.
    original = _routed.get("_cuda_record_memory_history")
    if door_in_use == "native" and original is not None:
        original(enabled, context, stacks, max_entries, clear_history, *more,
                 **more_kw)
    _snapshot.record_history(enabled, context, stacks, max_entries,
                             clear_history)


def _memory_snapshot(mempool_id=None, *unused, **unused_kw):
    # torch.cuda.memory_snapshot(mempool_id) and MemPool.snapshot() pass the
    # pool; torch.cuda.memory._snapshot() passes None.
    return _snapshot.snapshot(mempool_id)


def _settings_setter(name):
    def set_allocator_settings(conf, *args, **kwargs):
        original = _routed.get(name)
        result = original(conf, *args, **kwargs) if original is not None else None
        _alloc_settings.note(conf)
        return result
    return set_allocator_settings


def _route(torch, missing_hooks):
    """Points the torch._C functions behind torch.cuda.memory at GMLake."""
    routes = {
        "_cuda_memoryStats": nested_stats,
        "_cuda_resetPeakMemoryStats": reset_peaks,
        "_cuda_resetAccumulatedMemoryStats": reset_accumulated,
        "_cuda_getMemoryFraction": memory_fraction,
        "_cuda_memorySnapshot": _memory_snapshot,
        "_cuda_record_memory_history": _record_history,
        "_cuda_record_memory_history_legacy": _snapshot.record_history_legacy,
        "_cuda_setMemoryMetadata": _snapshot.set_metadata,
    }
    # torch.cuda.memory._set_allocator_settings: PyTorch parses the string
    # (and refuses a bad one), then the snapshot reports it.
    for name in ("_accelerator_setAllocatorSettings",
                 "_cuda_cudaCachingAllocator_set_allocator_settings"):
        if hasattr(torch._C, name):
            routes[name] = _settings_setter(name)
    # Without the pluggable allocator's own hooks, at least the Python calls.
    if "set_reset_fn" in missing_hooks:
        routes["_cuda_emptyCache"] = lambda: empty_cache()
    if "set_memory_fraction_fn" in missing_hooks:
        routes["_cuda_setMemoryFraction"] = (
            lambda fraction, device: set_memory_fraction(fraction, device))
    for name, fn in routes.items():
        if name not in _routed:
            _routed[name] = getattr(torch._C, name, None)
        setattr(torch._C, name, fn)
