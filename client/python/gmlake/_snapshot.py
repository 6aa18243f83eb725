# Copyright 2026 The GMLake Authors.
"""Snapshots and history in the shape PyTorch's memory_viz reads."""
import pickle
import sys

from . import _alloc_settings
from . import _lib

# memory_viz (pytorch.org/memory_viz, torch/utils/viz/MemoryViz.js) unpickles
# in JavaScript and accepts protocols 2 to 4 only.
VIEWER_PICKLE_PROTOCOL = 4

_STACKS = {None: 0, "python": 1, "all": 2}
# PyTorch's context: which events carry their stack.
_CONTEXTS = {None: 0, "state": 1, "alloc": 2, "all": 3}


def snapshot(mempool_id=None):
    """torch.cuda.memory._snapshot()'s dictionary: "segments" (every mapped
    segment of every device, with its blocks; only those of pool
    `mempool_id` when one is given, as torch.cuda.memory_snapshot(id) and
    MemPool.snapshot() ask) and "device_traces" (one list of events per
    device, oldest first, while history is recorded), with PyTorch's
    "allocator_settings" (_alloc_settings.py) and "external_annotations"."""
    snap = _lib.take_json(_lib.load().gmlake_snapshot_json())
    snap["allocator_settings"] = _alloc_settings.settings()
    snap.setdefault("external_annotations", [])
    return of_pool(snap, mempool_id)


def of_pool(snap, mempool_id):
    """`snap` with segment_pool_id as PyTorch gives it (a tuple, which
    callers put in sets and compare with MemPool.id and graph.pool(); JSON
    has lists), keeping the segments of pool `mempool_id` only, unless it is
    None or (0, 0) (all, as PyTorch's). torch.cuda.memory_snapshot passes
    (id0, id1, include_traces), (0, 0, ...) for every pool; without traces
    the device traces are empty."""
    for seg in snap.get("segments", []):
        if isinstance(seg.get("segment_pool_id"), list):
            seg["segment_pool_id"] = tuple(seg["segment_pool_id"])
    if mempool_id is None:
        return snap
    key = tuple(mempool_id)
    pool = key[:2]
    if len(key) > 2 and not key[2]:
        snap["device_traces"] = [[] for _ in snap.get("device_traces", [])]
    if pool != (0, 0):
        snap["segments"] = [s for s in snap.get("segments", [])
                            if s.get("segment_pool_id") == pool]
    return snap


def dump(path, snap=None):
    """Writes `snap` (default: a snapshot now) as the pickle memory_viz opens."""
    if snap is None:
        snap = snapshot()
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=VIEWER_PICKLE_PROTOCOL)


def record_history(enabled="all", context="all", stacks="all",
                   max_entries=sys.maxsize, clear_history=False):
    """PyTorch's torch.cuda.memory._record_memory_history for GMLake.

    enabled: "all" records every alloc/free/segment event; "state" records
    none, and keeps the stack of each live block (a snapshot's
    blocks[].frames); None stops both.
    context: which stacks are kept: live blocks' with "state", and the
    history's allocations (and what they map) with "alloc", and its frees
    too with "all"; None keeps none.
    stacks: "python" (Python frames) or "all" (Python and C++ frames).
    max_entries: keep the last this many events per device.
    """
    if enabled not in (None, "state", "all"):
        raise ValueError(f"enabled must be None, 'state' or 'all', not {enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(
            f"context must be None, 'state', 'alloc' or 'all', not {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', not {stacks!r}")
    if int(max_entries) < 0:
        raise ValueError(f"max_entries must not be negative, not {max_entries}")
    entries = int(max_entries) if enabled == "all" else 0
    if enabled is None:
        context = None
    kind = _STACKS[stacks] if context is not None else _STACKS[None]
    _lib.check(_lib.load().gmlake_record_history(
        min(entries, 2**64 - 1), kind, _CONTEXTS[context],
        1 if clear_history else 0))


def set_metadata(metadata):
    """torch.cuda.memory._set_memory_metadata: the "user_metadata" of every
    history event recorded from now on ("" for none)."""
    if not isinstance(metadata, str):
        raise TypeError(f"metadata must be a str, not {type(metadata).__name__}")
    _lib.check(_lib.load().gmlake_set_history_metadata(metadata.encode()))


def record_history_legacy(enabled, record_context=True,
                          trace_alloc_max_entries=1,
                          trace_alloc_record_context=False, device=None,
                          record_context_cpp=False, clear_history=False,
                          *unused, **unused_kw):
    """The boolean form PyTorch still accepts (_record_memory_history(True))."""
    record_history(
        "all" if enabled else None,
        context="all" if (record_context or trace_alloc_record_context) else None,
        stacks="all" if record_context_cpp else "python",
        max_entries=trace_alloc_max_entries if enabled else 0,
        clear_history=clear_history)
