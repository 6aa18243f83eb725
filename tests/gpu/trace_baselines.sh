#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: what PyTorch itself needs on each trace given (peak
# reserved with no cap, smallest cap that still runs; native and
# expandable_segments), as the CAP lines traces/baselines.json is made from.
#   TIMEOUT=200 bash tests/gpu/trace_baselines.sh traces/NEW.trace.gz ...  > caps.jsonl
# (TIMEOUT: seconds per trace and allocator, the bisection included)
set -uo pipefail
export PYTHONUNBUFFERED=1
for t in "$@"; do
  for a in native expandable; do
    timeout "${TIMEOUT:-200}" python3 workloads/replay_capacity.py --allocator "$a" "$t" 2>&1 | grep -E "^CAP|Error" | cut -c1-600
  done
done
