# Copyright 2026 The GMLake Authors.
"""Does the driver hand one process memory another process wrote? The
question behind chunks a gmlaked client makes itself (docs/daemon.md,
"Chunks the client makes"): gmlaked cannot zero those, so it relies on the
driver scrubbing memory between processes. Run by tests/gpu/driver_scrub.sh:

  python3 driver_scrub_probe.py write GIB FLAG   # fill GIB with 0xAB, free
                                                 # it, touch FLAG, wait
  gmlake run -- python3 driver_scrub_probe.py read GIB  # count 0xAB bytes

The reader allocates through GMLake (cuMemCreate chunks) and prints
SCRUB {"gib": ..., "marked_bytes": N}: N > 0 would mean the driver handed it
the writer's data.
"""
import json
import os
import sys
import time

import torch

mode, gib = sys.argv[1], float(sys.argv[2])
n = int(gib * 2**30)
if mode == "write":
    flag = sys.argv[3]
    x = torch.full((n,), 0xAB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    del x
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    open(flag, "w").close()
    # Alive, holding its context but none of that memory, while the reader
    # runs (the reader removes the flag when done).
    for _ in range(600):
        if not os.path.exists(flag):
            break
        time.sleep(0.1)
else:
    y = torch.empty((n,), dtype=torch.uint8, device="cuda")
    marked = 0
    step = 2**30  # a GiB at a time: the comparison's result is as large
    for i in range(0, n, step):
        marked += int((y[i:i + step] == 0xAB).sum().item())
    print("SCRUB", json.dumps({"gib": gib, "marked_bytes": marked,
                               "reserved_gib": round(torch.cuda.memory_reserved() / 2**30, 2)}),
          flush=True)
