# Copyright 2026 The GMLake Authors.
"""Checks a snapshot pickle against what PyTorch's memory_viz readers use.

Two readers open these files: torch/cuda/_memory_viz.py (segsum, trace,
segments, memory) in Python, and torch/utils/viz/MemoryViz.js, the page
behind pytorch.org/memory_viz, which has its own unpickler. The checks here
are written from those readers' requirements (not from their code):

- the pickle: protocol 2..4, and only the opcodes MemoryViz.js's unpickler
  implements; integers within 8 bytes (it reads LONG1 into a BigInt64);
- segments: the fields both read, block sizes that tile the segment exactly
  (segsum asserts it), block states they know;
- traces: actions they know, with addr/size/stream (and device_free for an
  oom), and, replayed backwards from the final state as the "Allocator State
  History" view does, every live block inside a mapped segment at every step,
  and every unmapped range inside one.

    python3 viz_check.py SNAPSHOT.pickle   # prints OK or what is wrong
"""
import io
import pickle
import pickletools
import sys

# The opcodes MemoryViz.js's unpickle() handles.
VIEWER_OPCODES = {
    "PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST",
    "EMPTY_TUPLE", "DICT", "LIST", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "APPEND", "APPENDS", "SETITEM", "SETITEMS", "SHORT_BINUNICODE",
    "BINUNICODE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT",
    "NEWTRUE", "NEWFALSE", "NONE", "MEMOIZE", "BINPUT", "LONG_BINPUT",
    "BINGET", "LONG_BINGET",
}
BLOCK_STATES = {"active_allocated", "active_pending_free", "inactive"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc",
           "segment_free", "segment_map", "segment_unmap", "oom", "snapshot"}
SEGMENT_KEYS = ("device", "address", "total_size", "stream", "blocks",
                "allocated_size", "segment_type")
BLOCK_KEYS = ("size", "state", "requested_size")


def check_pickle_bytes(data):
    """Problems with the pickle's encoding, as a list of strings."""
    problems = []
    for op, arg, pos in pickletools.genops(io.BytesIO(data)):
        if op.name == "PROTO" and not 2 <= arg <= 4:
            problems.append(f"pickle protocol {arg}: memory_viz reads 2..4")
        if op.name not in VIEWER_OPCODES:
            problems.append(f"opcode {op.name} at {pos}: memory_viz cannot read it")
        if op.name == "LONG1" and not -(2**63) <= arg < 2**63:
            problems.append(f"integer {arg} at {pos} is over 8 bytes")
    return problems


def _inside(ranges, addr, size):
    return any(a <= addr and addr + size <= a + s for a, s in ranges)


def _map(ranges, addr, size):
    """Adds a mapped range, joined with the ranges it touches (mapped pages
    side by side are one segment)."""
    lo, hi = addr, addr + size
    kept = []
    for a, s in ranges:
        if a + s == lo or hi == a:
            lo, hi = min(lo, a), max(hi, a + s)
        else:
            kept.append((a, s))
    kept.append((lo, hi - lo))
    ranges[:] = kept


def _unmap(ranges, addr, size, what):
    for i, (a, s) in enumerate(ranges):
        if a <= addr and addr + size <= a + s:
            del ranges[i]
            if a < addr:
                ranges.append((a, addr - a))
            if addr + size < a + s:
                ranges.append((addr + size, a + s - addr - size))
            return None
    return f"{what}: [{addr:#x}, +{size}) is not inside a mapped segment"


def check_snapshot(snap):
    """Problems with the snapshot's content, as a list of strings."""
    problems = []
    if set(snap) < {"segments", "device_traces"}:
        return [f"keys {sorted(snap)}: need segments and device_traces"]
    segments_of = {}
    live_of = {}
    for seg in snap["segments"]:
        missing = [k for k in SEGMENT_KEYS if k not in seg]
        if missing:
            problems.append(f"segment {seg.get('address')}: no {missing}")
            continue
        addr, total = seg["address"], 0
        for b in seg["blocks"]:
            missing = [k for k in BLOCK_KEYS if k not in b]
            if missing:
                problems.append(f"block in segment {seg['address']:#x}: no {missing}")
                continue
            if b["state"] not in BLOCK_STATES:
                problems.append(f"block state {b['state']!r} unknown to memory_viz")
            if b["state"] != "inactive":
                if b["requested_size"] > b["size"]:
                    problems.append(f"block {addr:#x}: requested more than its size")
                live_of.setdefault(seg["device"], []).append((addr, b["size"]))
            addr += b["size"]
            total += b["size"]
        if total != seg["total_size"]:
            problems.append(
                f"segment {seg['address']:#x}: blocks cover {total} of "
                f"{seg['total_size']} bytes (segsum asserts they tile it)")
        segments_of.setdefault(seg["device"], []).append(
            (seg["address"], seg["total_size"]))
    for device, trace in enumerate(snap["device_traces"]):
        problems += _check_trace(device, trace, segments_of.get(device, []),
                                 live_of.get(device, []))
    return problems


def _check_trace(device, trace, segments, live):
    problems = []
    for i, e in enumerate(trace):
        if e.get("action") not in ACTIONS:
            problems.append(f"device {device} event {i}: action {e.get('action')!r}")
            return problems
        need = ("size", "device_free") if e["action"] == "oom" else (
            "addr", "size", "stream")
        if any(k not in e for k in need):
            problems.append(f"device {device} event {i}: needs {need}: {e}")
            return problems
    # Backwards from the end, as the state-history view replays it.
    ranges = list(segments)
    blocks = {addr: size for addr, size in live}
    for i in range(len(trace) - 1, -1, -1):
        e = trace[i]
        where = f"device {device}, undoing event {i} ({e['action']})"
        if e["action"] == "alloc":
            if not _inside(ranges, e["addr"], e["size"]):
                problems.append(f"device {device} event {i}: block "
                                f"[{e['addr']:#x}, +{e['size']}) allocated "
                                "outside every mapped segment")
                return problems
            blocks.pop(e["addr"], None)
        elif e["action"] in ("free_requested", "free_completed"):
            blocks[e["addr"]] = e["size"]
        elif e["action"] in ("segment_map", "segment_alloc"):
            bad = _unmap(ranges, e["addr"], e["size"], where)
            if bad:
                problems.append(bad)
                return problems
        elif e["action"] in ("segment_unmap", "segment_free"):
            _map(ranges, e["addr"], e["size"])
        for addr, size in blocks.items():
            if not _inside(ranges, addr, size):
                problems.append(f"{where}: block [{addr:#x}, +{size}) lies "
                                "outside every mapped segment")
                return problems
    return problems


def check_file(path):
    with open(path, "rb") as f:
        data = f.read()
    problems = check_pickle_bytes(data)
    if not problems:
        problems = check_snapshot(pickle.loads(data))
    return problems


if __name__ == "__main__":
    found = check_file(sys.argv[1])
    for p in found:
        print(p)
    print("OK" if not found else f"{len(found)} problems")
    sys.exit(1 if found else 0)
