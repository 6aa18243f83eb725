# Copyright 2026 The GMLake Authors.
"""Interleaved training benchmark: allocators A B C A B C ..., same batches.

Runs workloads/llama_train.py (copied to .gpu/workloads) once per
(repetition, allocator), each in a fresh process, and prints a table with
every run and the medians, plus GMLake's own counters (host waits, stitches,
driver calls) read from gmlake.memory_stats() at the end of each gmlake run.
Timings belong here, never in pass/fail tests (docs/benchmarks.md).

  python3 tests/gpu/train_bench.py --model llama1b --mode full_ckpt \
      --allocators native,gmlake --reps 3 --steps 40 [--conf GMLAKE_CONF]
      [--json OUT.jsonl]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="llama1b")
ap.add_argument("--mode", default="full_ckpt")
ap.add_argument("--allocators", default="native,gmlake")
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--conf", default="", help="GMLAKE_CONF for the gmlake runs")
ap.add_argument("--workload", default=".gpu/workloads/llama_train.py")
ap.add_argument("--json", default="", help="append one JSON line per run here")
ap.add_argument("--timeout", type=int, default=300)
ap.add_argument("--compile", default="", help="passed to the workload: torch.compile mode, e.g. reduce-overhead")
args = ap.parse_args()

# Runs the workload in this child, then prints GMLake's counters.
CHILD = r"""
import json, runpy, sys
script, allocator = sys.argv[1], sys.argv[2]
sys.argv = [script] + sys.argv[3:]
runpy.run_path(script, run_name="__main__")
if allocator == "gmlake":
    import gmlake
    s = gmlake.memory_stats()
    print("GMLAKE_STATS", json.dumps({k: v for k, v in s.items() if k.startswith("gmlake.")}), flush=True)
"""


def run_once(allocator):
    env = dict(os.environ)
    if allocator == "gmlake" and args.conf:
        env["GMLAKE_CONF"] = args.conf
    cmd = [sys.executable, "-c", CHILD, args.workload, allocator, "--allocator", allocator,
           "--model", args.model, "--mode", args.mode, "--steps", str(args.steps)]
    if args.compile:
        cmd += ["--compile", args.compile]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    result, stats = None, {}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
        elif line.startswith("GMLAKE_STATS "):
            stats = json.loads(line[len("GMLAKE_STATS "):])
    if result is None:
        tail = (p.stdout + p.stderr).strip().splitlines()[-15:]
        print("  %s failed (rc %d):\n    %s" % (allocator, p.returncode, "\n    ".join(tail)), flush=True)
    return result, stats


allocators = args.allocators.split(",")
runs = {a: [] for a in allocators}
print("== %s %s%s, %d steps, %d reps, order %s%s" % (args.model, args.mode, (" compile=" + args.compile) if args.compile else "", args.steps, args.reps,
      " ".join(allocators), (", GMLAKE_CONF=" + args.conf) if args.conf else ""), flush=True)
for rep in range(args.reps):
    for a in allocators:
        r, s = run_once(a)
        if r is None:
            continue
        r["gmlake_stats"] = s
        r["rep"] = rep
        r["conf"] = args.conf if a == "gmlake" else ""
        runs[a].append(r)
        extra = ""
        if s:
            extra = " host_waits=%d driver_ms=%.1f stitches=%d unmaps=%d maps=%d set_access=%d" % (
                s.get("gmlake.host_waits", -1), s.get("gmlake.driver_us", -1000) / 1e3,
                s.get("gmlake.stitches", -1),
                s.get("gmlake.driver_calls.unmap", -1), s.get("gmlake.driver_calls.map", -1),
                s.get("gmlake.driver_calls.set_access", -1))
        print("  rep %d %-10s tokens/s %8.0f  reserved/allocated %.3f%s" % (
            rep, a, r["tokens_per_s"], r["reserved_over_allocated"], extra), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(r) + "\n")

base = statistics.median([r["tokens_per_s"] for r in runs.get("native", [])]) if runs.get("native") else None
print("| %s %s | allocator | reserved / allocated (median) | tokens/s (every run) | median | vs native |" % (
    args.model, args.mode))
print("|---|---|---|---|---|---|")
for a in allocators:
    if not runs[a]:
        print("| | %s | failed | | | |" % a)
        continue
    tps = [r["tokens_per_s"] for r in runs[a]]
    med = statistics.median(tps)
    ratio = statistics.median([r["reserved_over_allocated"] for r in runs[a]])
    print("| | %s | %.3f | %s | %.0f | %s |" % (a, ratio, ", ".join("%.0f" % t for t in tps), med,
          ("%.3f" % (med / base)) if base else "-"), flush=True)
