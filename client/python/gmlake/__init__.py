# Copyright 2026 The GMLake Authors.
"""GMLake for PyTorch: libgmlake.so as PyTorch's CUDA allocator, no patching
of PyTorch itself.

Without editing a script:

    gmlake run -- torchrun --nproc_per_node 8 train.py
    python -m gmlake train.py

or in the script, before the first CUDA call (before torch.cuda.set_device):

    import gmlake
    gmlake.enable()

PyTorch's memory calls then report GMLake's figures (torch.cuda.memory_stats,
memory_allocated, max_memory_reserved, memory_summary, empty_cache,
set_per_process_memory_fraction, memory._snapshot, ...); so do the functions
here. Options: GMLAKE_CONF (docs/tuning.md). libgmlake.so is found through
GMLAKE_LIB, else in the installed wheel, else in a checkout's bazel-bin.
"""
__version__ = "0.1.0"

from . import _lib
from . import _snapshot
from . import _torch
from ._lib import GMLakeError
from ._lib import library_path

__all__ = [
    "GMLakeError", "enable", "is_enabled", "describe", "memory_stats",
    "reset_peak_stats", "reset_accumulated_stats", "empty_cache",
    "set_capacity", "set_memory_fraction", "memory_fraction",
    "record_memory_history", "memory_snapshot", "dump_snapshot",
    "library_path",
]


def enable(conf=None):
    """Makes GMLake PyTorch's CUDA allocator and opens the lake.

    Call it before anything initialises CUDA; it raises GMLakeError naming
    the fix when that already happened, and checks this before opening a
    lake. A second call with the same options does nothing. `conf`: options
    as GMLAKE_CONF ("key:value,...", docs/tuning.md); default GMLAKE_CONF.
    """
    _torch.enable(conf, open_lake_now=True)


def is_enabled():
    """Whether GMLake is PyTorch's allocator in this process."""
    return _torch.is_enabled()


def describe():
    """Which backend and lake serve this process (None before the first
    allocation or enable())."""
    d = _lib.load().gmlake_describe()
    return d.decode() if d else None


def memory_stats(device=None):
    """torch.cuda.memory_stats()'s keys and meanings for `device` (default:
    PyTorch's current device), plus GMLake's own (gmlake.*)."""
    return _torch.stats(device)


def reset_peak_stats(device=None):
    _torch.reset_peaks(device)


def reset_accumulated_stats(device=None):
    _torch.reset_accumulated(device)


def empty_cache():
    """Gives cached free memory back to the lake; returns the bytes."""
    return _torch.empty_cache()


def set_capacity(nbytes, device=None):
    """Caps what this process may hold on `device` (0: no cap)."""
    _lib.check(_lib.load().gmlake_set_capacity(_torch._device(device),
                                               int(nbytes)))


def set_memory_fraction(fraction, device=None):
    """The capacity as a fraction [0, 1] of the device's memory (0: none new)."""
    _torch.set_memory_fraction(fraction, device)


def memory_fraction(device=None):
    return _torch.memory_fraction(device)


def record_memory_history(enabled="all", context="all", stacks="all",
                          max_entries=100000, clear_history=False):
    """Starts (or with enabled=None stops) recording alloc/free/segment
    events for memory_snapshot()'s device_traces; see
    torch.cuda.memory._record_memory_history."""
    _snapshot.record_history(enabled, context, stacks, max_entries,
                             clear_history)


def set_memory_metadata(metadata):
    """The "user_metadata" of every history event recorded from now on (""
    for none); torch.cuda.memory._set_memory_metadata."""
    _snapshot.set_metadata(metadata)


def memory_snapshot():
    """torch.cuda.memory._snapshot()'s dictionary for GMLake."""
    return _snapshot.snapshot()


def dump_snapshot(path="dump_snapshot.pickle"):
    """Writes memory_snapshot() as the pickle PyTorch's memory_viz opens
    (pytorch.org/memory_viz)."""
    _snapshot.dump(path)
