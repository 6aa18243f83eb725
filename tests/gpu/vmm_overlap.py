# Copyright 2026 The GMLake Authors.
"""On the GPU machine: does a VMM call on a second thread overlap with the
main thread's work?

The question behind unmapping a stitch's old views (0.54-0.57 s of the
colocation pair's first inference turn on an H100, docs/benchmarks.md) on a
thread of their own instead of in malloc. The main thread runs launch-bound
torch ops (as a decode step does) or maps and sets access (as a stitch
does); the second thread runs rounds of unmap, or of map and set access,
over N chunks of 2 MiB. Prints OVERLAP {json}: the cost per chunk alone and
beside the other thread, and the launch loop's seconds alone and beside it.

    python3 tests/gpu/vmm_overlap.py [N]
"""
import ctypes
import json
import sys
import threading
import time

import torch

cu = ctypes.CDLL("libcuda.so.1")
CHUNK = 2 << 20


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compression", ctypes.c_ubyte), ("rdma", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int),
                ("location", Location), ("win32", ctypes.c_void_p),
                ("flags", AllocFlags)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


PINNED, DEVICE, READ_WRITE = 1, 1, 3
u64, size_t = ctypes.c_uint64, ctypes.c_size_t


def check(result, what):
    if result != 0:
        raise RuntimeError(f"{what} failed: CUresult {result}")


class Chunks:
    """N chunks of 2 MiB and two address ranges to map them at."""

    def __init__(self, n):
        self.n = n
        prop = AllocProp(PINNED, 0, Location(DEVICE, 0), None, AllocFlags())
        self.access = AccessDesc(Location(DEVICE, 0), READ_WRITE)
        self.handles = []
        for _ in range(n):
            h = u64()
            check(cu.cuMemCreate(ctypes.byref(h), size_t(CHUNK), ctypes.byref(prop), u64(0)),
                  "cuMemCreate")
            self.handles.append(h.value)
        self.ranges = []
        for _ in range(2):
            p = u64()
            check(cu.cuMemAddressReserve(ctypes.byref(p), size_t(n * CHUNK), size_t(0), u64(0),
                                         u64(0)), "cuMemAddressReserve")
            self.ranges.append(p.value)

    def map(self, r):
        base = self.ranges[r]
        for i, h in enumerate(self.handles):
            addr = u64(base + i * CHUNK)
            check(cu.cuMemMap(addr, size_t(CHUNK), size_t(0), u64(h), u64(0)), "cuMemMap")
            check(cu.cuMemSetAccess(addr, size_t(CHUNK), ctypes.byref(self.access), size_t(1)),
                  "cuMemSetAccess")

    def unmap(self, r):
        base = self.ranges[r]
        for i in range(self.n):
            check(cu.cuMemUnmap(u64(base + i * CHUNK), size_t(CHUNK)), "cuMemUnmap")

    def timed_round(self, kind):
        """Seconds of one round: "unmap" unmaps range 0 (then maps it again,
        untimed); "map" maps range 1 and sets access (then unmaps it)."""
        if kind == "unmap":
            t0 = time.perf_counter()
            self.unmap(0)
            spent = time.perf_counter() - t0
            self.map(0)
        else:
            t0 = time.perf_counter()
            self.map(1)
            spent = time.perf_counter() - t0
            self.unmap(1)
        return spent


def launch_loop(x, n=30000):
    t0 = time.perf_counter()
    for _ in range(n):
        x.mul_(1.0000001)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def beside(chunks, kind, context, work):
    """Runs `work` on this thread while another runs `kind` rounds; returns
    what `work` returned and the other thread's mean seconds a round."""
    stop, rounds = threading.Event(), []

    def other():
        check(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        while not stop.is_set():
            rounds.append(chunks.timed_round(kind))

    t = threading.Thread(target=other)
    t.start()
    time.sleep(0.05)
    result = work()
    stop.set()
    t.join()
    return result, sum(rounds) / max(1, len(rounds))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    context = ctypes.c_void_p()
    check(cu.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
    chunks = Chunks(n)
    chunks.map(0)
    x = torch.ones(1 << 16, device="cuda")
    launch_loop(x, 3000)
    out = {"chunks": n}

    def add(key, value):
        out.setdefault(key, []).append(round(value, 4))

    per_chunk_us = 1e6 / n
    for _ in range(3):
        add("launch_alone_s", launch_loop(x))
        for kind in ("unmap", "map"):
            add(f"{kind}_alone_us", chunks.timed_round(kind) * per_chunk_us)
            seconds, other = beside(chunks, kind, context, lambda: launch_loop(x))
            add(f"launch_beside_{kind}_s", seconds)
            add(f"{kind}_beside_launches_us", other * per_chunk_us)
        seconds, _ = beside(chunks, "unmap", context, lambda: chunks.timed_round("map"))
        add("map_beside_unmap_us", seconds * per_chunk_us)
    print("OVERLAP", json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
