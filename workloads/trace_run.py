# Runs a Python program unedited and records the allocation trace that
# PyTorch's caching allocator received, in the traces/ format, when it ends:
#   python3 trace_run.py OUT.trace.gz program.py [its arguments...]
# For programs that have no --trace of their own (Hugging Face Trainer,
# colocate.py's roles). Only the first GPU's trace is written.
import gzip, runpy, sys

import torch

CODES = {"alloc": "a", "free_requested": "f", "free_completed": "F", "segment_alloc": "S", "segment_free": "s"}


def write_trace(path):
    with gzip.open(path, "wt") as f:
        f.write("# action addr size stream\n")
        for e in torch.cuda.memory._snapshot()["device_traces"][0]:
            if e["action"] in CODES:
                f.write(f"{CODES[e['action']]} {e['addr']} {e['size']} {e.get('stream', 0)}\n")


if __name__ == "__main__":
    out, program, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=3_000_000)
    sys.argv = [program] + rest
    code = 0
    try:
        runpy.run_path(program, run_name="__main__")
    except SystemExit as e:
        code = e.code or 0
    write_trace(out)
    print(f"trace_run: wrote {out}", flush=True)
    sys.exit(code)
