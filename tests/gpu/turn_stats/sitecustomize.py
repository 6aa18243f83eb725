# Copyright 2026 The GMLake Authors.
#
# For diagnosis on the GPU machine: GMLake's counters at every turn switch of
# workloads/colocate.py, whose scripts stay unedited. With this folder on
# PYTHONPATH (behind gmlake/_boot, which runs this file after arming GMLake)
# and GMLAKE_TURN_STATS=FILE, a thread of each role watches the pair's turn
# file (--dir D: D/turn) and, whenever it changes, appends one JSON line to
# FILE: the role, the turn file's new content, the time, and every gmlake.*
# counter (under native PyTorch: its own counts of cudaMalloc, cudaFree and
# of allocations retried after freeing the cache, as torch.*).
# tests/gpu/turn_stats_table.py makes per-turn deltas of them.
import json as _json
import os as _os
import sys as _sys
import threading as _threading
import time as _time


def _turn_file():
    argv = _sys.argv
    if "--dir" not in argv or len(argv) < 2:
        return None
    role = argv[1] if argv[1] in ("train", "infer") else None
    d = argv[argv.index("--dir") + 1] if argv.index("--dir") + 1 < len(argv) else None
    return (role, _os.path.join(d, "turn")) if role and d else None


_TORCH_KEYS = ("num_alloc_retries", "num_device_alloc", "num_device_free")


def _snapshot():
    try:
        gm = _sys.modules.get("gmlake")
        torch = _sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return {}
        if gm is None:
            st = torch.cuda.memory_stats()
            return {"torch." + k: st.get(k, 0) for k in _TORCH_KEYS}
        return {k: v for k, v in gm.memory_stats().items() if k.startswith("gmlake.")}
    except Exception as e:  # diagnosis only: never break the workload
        return {"error": repr(e)[:200]}


def _watch(role, path, out):
    last = None
    while True:
        try:
            with open(path) as f:
                now = f.read().strip()
        except OSError:
            now = last
        if now != last and now:
            line = dict(role=role, pid=_os.getpid(), turn=now, t=_time.time(), stats=_snapshot())
            with open(out, "a") as f:
                f.write(_json.dumps(line) + "\n")
            last = now
        _time.sleep(0.002)


def _start():
    out = _os.environ.get("GMLAKE_TURN_STATS")
    found = _turn_file()
    if not out or found is None:
        return
    role, path = found
    _threading.Thread(target=_watch, args=(role, path, out), daemon=True).start()


_start()
