#!/usr/bin/env python3
# Copyright 2026 The GMLake Authors.
"""Replays the start of a real allocation trace (traces) through
libgmlake with its history recorded, and writes the snapshot memory_viz
opens: GMLake's own alloc/free/segment_map/segment_unmap events on an H200
training run's request stream, on the host backend (no GPU needed).

    PYTHONPATH=client/python python3 tools/memory_viz_demo.py \\
        traces/llama1b_lora_ckpt.trace.gz gmlake_snapshot.pickle \\
        [--events 40000]
"""
import argparse
import gzip
import sys

import gmlake


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=40000,
                    help="trace lines to replay")
    ap.add_argument("--conf", default="backend:host,lake:embedded,log:false")
    args = ap.parse_args()

    lib = gmlake._lib.load()
    gmlake._lib.check(lib.gmlake_init(args.conf.encode()))
    gmlake.record_memory_history(stacks="python", max_entries=10**7)
    live = {}
    with gzip.open(args.trace, "rt") as f:
        for n, line in enumerate(f):
            if n > args.events:
                break
            parts = line.split()
            if not parts or parts[0] not in ("a", "F"):
                continue
            addr, size, stream = int(parts[1]), int(parts[2]), int(parts[3])
            if parts[0] == "a":
                p = lib.gmlake_malloc(size, 0, stream)
                if not p:
                    sys.exit("replay: " + gmlake._lib.last_error())
                live[addr] = p
            elif addr in live:
                gmlake._lib.check(lib.gmlake_free(live.pop(addr)))
    gmlake.dump_snapshot(args.out)
    s = gmlake.memory_stats(0)
    snap = gmlake.memory_snapshot()
    print(f"memory_viz_demo: {len(snap['device_traces'][0])} events, "
          f"{len(live)} live, {s['allocated_bytes.all.current'] / 2**30:.2f} GiB "
          f"allocated, {s['reserved_bytes.all.current'] / 2**30:.2f} GiB reserved "
          f"(peak {s['allocated_bytes.all.peak'] / 2**30:.2f} / "
          f"{s['reserved_bytes.all.peak'] / 2**30:.2f}), "
          f"{s['gmlake.stitches']} stitches -> {args.out}")


if __name__ == "__main__":
    main()
