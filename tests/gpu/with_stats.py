# Copyright 2026 The GMLake Authors.
"""Runs a Python script unedited and, at its exit, prints GMLake's own
counters (stitches, host waits, driver calls and time) as one line:
GMLAKE_STATS {json}. For diagnosis runs on the GPU machine:

  gmlake run -- python3 tests/gpu/with_stats.py SCRIPT [ARGS...]
"""
import atexit
import json
import runpy
import sys


def _dump():
    try:
        import gmlake
        s = gmlake.memory_stats()
        print("GMLAKE_STATS", json.dumps({k: v for k, v in s.items() if k.startswith("gmlake.")}), flush=True)
    except Exception as e:  # not under GMLake, or CUDA never started
        print("GMLAKE_STATS_UNAVAILABLE", repr(e)[:200], flush=True)


atexit.register(_dump)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
