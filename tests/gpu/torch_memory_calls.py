# Copyright 2026 The GMLake Authors.
#
# On the GPU machine, started without editing (the launcher enables GMLake):
#   gmlake run -- python torch_memory_calls.py --out DIR
# PyTorch's own memory calls against GMLake's figures, empty_cache, the memory
# fraction, record_stream on a side stream, the too-late error, and a
# memory_viz snapshot (DIR/gmlake_snapshot.pickle, checked by viz_check.py).
# Prints CHECK lines and one line: MEMCALLS {json}; exit 1 if a check failed.
import argparse
import json
import os
import pickle
import subprocess
import sys

import torch
import gmlake
import viz_check

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=".")
args = ap.parse_args()
results = {}


def check(name, ok, detail=""):
    results[name] = bool(ok)
    print(f"CHECK {'PASS' if ok else 'FAIL'} {name} {detail}", flush=True)


MiB = 1 << 20
check("launcher enabled GMLake at import torch", gmlake.is_enabled())
if not gmlake.is_enabled():
    gmlake.enable()
torch.cuda.set_device(0)
torch.cuda.memory._record_memory_history(max_entries=200000)

x = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
y = torch.randn(1024, 1024, device="cuda")
s = gmlake.memory_stats(0)
a = torch.cuda.memory_allocated()
check("memory_allocated is GMLake's", a == s["allocated_bytes.all.current"]
      and a >= 260 * MiB, f"{a} vs {s['allocated_bytes.all.current']}")
r = torch.cuda.memory_reserved()
check("memory_reserved is GMLake's", r == s["reserved_bytes.all.current"] >= a,
      f"{r}")
peak = torch.cuda.max_memory_allocated()
del x
torch.cuda.synchronize()
check("max_memory_allocated keeps the peak",
      torch.cuda.max_memory_allocated() == peak >= 260 * MiB, f"{peak}")
check("max_memory_reserved", torch.cuda.max_memory_reserved() >= peak)
torch.cuda.reset_peak_memory_stats()
check("reset_peak_memory_stats",
      torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated())
stats = torch.cuda.memory_stats()
core = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
        "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
missing = [f"{k}.{p}.{m}" for k in core for p in ("all", "large_pool", "small_pool")
           for m in ("current", "peak", "allocated", "freed")
           if f"{k}.{p}.{m}" not in stats]
check("memory_stats has PyTorch's full key set", not missing, str(missing[:4]))
summary = torch.cuda.memory_summary()
check("memory_summary", "PyTorch CUDA memory summary" in summary
      and "GPU reserved memory" in summary)
print(summary)
r0 = torch.cuda.memory_reserved()
torch.cuda.empty_cache()
r1 = torch.cuda.memory_reserved()
check("empty_cache gives cached memory back", r1 < r0, f"{r0} -> {r1}")
torch.cuda.reset_accumulated_memory_stats()
check("reset_accumulated_memory_stats",
      torch.cuda.memory_stats()["allocated_bytes.all.allocated"] == 0)
torch.cuda.set_per_process_memory_fraction(0.5)
check("set_per_process_memory_fraction is GMLake's capacity",
      abs(gmlake.memory_fraction(0) - 0.5) < 1e-6
      and abs(torch.cuda.get_per_process_memory_fraction() - 0.5) < 1e-6)
torch.cuda.set_per_process_memory_fraction(1.0)

# record_stream: memory still being written on a busy side stream. GMLake
# may hand the same address to the current stream, behind a device-side wait
# for the side stream's work (cuStreamWaitEvent, no host wait); what must
# hold is that the new tensor's writes land after the side stream's.
side = torch.cuda.Stream()
t = torch.ones(64 * MiB, dtype=torch.uint8, device="cuda")
ptr = t.data_ptr()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    torch.cuda._sleep(2_000_000_000)  # about a second
    t.add_(1)
t.record_stream(side)
del t
u = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
u.fill_(7)
torch.cuda.synchronize()
how = "same address, after a device-side wait" if u.data_ptr() == ptr else "another address"
check("record_stream: memory busy on a side stream is not overwritten by its next user",
      bool((u == 7).all()), how)
del u

snap_path = os.path.join(args.out, "gmlake_snapshot.pickle")
torch.cuda.memory._dump_snapshot(snap_path)
problems = viz_check.check_file(snap_path)
check("memory_viz can open the snapshot", not problems, str(problems[:3]))
with open(snap_path, "rb") as f:
    snap = pickle.load(f)
trace = snap["device_traces"][0]
here = os.path.basename(__file__)
named = [e for e in trace if e["action"] == "alloc"
         and any(os.path.basename(fr["filename"]) == here for fr in e["frames"])]
check("history names this script's lines", named, f"{len(trace)} events")
torch.cuda.memory._record_memory_history(enabled=None)

code = ("import torch, gmlake\ntorch.cuda.set_device(0)\n"
        "try:\n    gmlake.enable()\nexcept gmlake.GMLakeError as e:\n    print('ERR', e)\n"
        "print('lake', gmlake._lib.load().gmlake_is_initialized())\n")
env = {k: v for k, v in os.environ.items() if k != "GMLAKE_ENABLE"}
late = subprocess.run([sys.executable, "-c", code], capture_output=True,
                      text=True, env=env).stdout
check("enable() after set_device: a clear error, no lake opened",
      "too late" in late and "gmlake run" in late and "lake 0" in late,
      late.strip().splitlines()[0] if late.strip() else "")
gmlake.enable()  # again: nothing happens
check("enable() is idempotent", gmlake.describe() is not None,
      gmlake.describe() or "")
print("MEMCALLS", json.dumps(dict(results=results, torch=torch.__version__,
                                  describe=gmlake.describe())), flush=True)
sys.exit(0 if all(results.values()) else 1)
