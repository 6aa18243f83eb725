#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: replays the shipped traces through the allocator on the
# cuda backend (real chunks, real mappings on the H200), and in the same call
# times PyTorch's own allocator on the same request streams
# (workloads/pytorch_hotpath.py) and checks libgmlake.so as PyTorch's
# pluggable allocator. The traces and workloads come with the checkout; it
# needs the bundle:
#   tests/gpu/build_bundle.sh //tools:gmlake-replay //client:libgmlake.so
# Writes JSON lines and the figures of memory over time (figures/*.svg) to
# $OUT (default a temp dir) and prints the tables.
set -uo pipefail
root="$(pwd)"
OUT="${OUT:-$(mktemp -d /tmp/gmlake-gpu.XXXXXX)}"
export LD_LIBRARY_PATH="${root}/.gpu/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

echo "== gmlake-replay, cuda backend (measured run), accounting (bisection)"
.gpu/bin/gmlake-replay --backend=cuda --capacity --json --progress=false \
  --baseline=traces/baselines.json --plot_dir="${OUT}/figures" traces \
  > "${OUT}/replay_cuda.jsonl"
python3 - "${OUT}/replay_cuda.jsonl" <<'PY'
import json, sys
print("%-22s %9s %9s %9s %8s %8s %9s %12s %11s" % ("trace", "res/live", "cap/live", "native", "calls",
      "2nd half", "driver s", "set_access s", "p50/p99 ns"))
for line in open(sys.argv[1]):
    d = json.loads(line)
    s = d.get("driver_seconds_by_kind", {})
    print("%-22s %9.3f %9.3f %9.3f %8d %8d %9.3f %12.3f %5.0f/%-5.0f" % (d["trace"], d["reserved_over_live"],
          d.get("min_capacity_over_live", 0), d.get("pytorch_native", {}).get("peak_reserved_over_live", 0),
          d["driver_calls"], d["driver_calls_second_half"], d["driver_seconds"],
          s.get("set_access", 0), d["ns_per_op_p50"], d["ns_per_op_p99"]))
PY

echo "== PyTorch's allocator on the same requests (pytorch_hotpath.py)"
for conf in "" "expandable_segments:True"; do
  PYTORCH_CUDA_ALLOC_CONF="${conf}" timeout 240 python3 workloads/pytorch_hotpath.py \
    traces/llama1b_lora_ckpt.trace.gz traces/llama1b_infer.trace.gz \
    traces/llama3b_full_ckpt.trace.gz 2>&1 | grep -E "HOT|Error|error" | tee -a "${OUT}/pytorch_hotpath.txt"
done

echo "== libgmlake.so as PyTorch's pluggable allocator"
GMLAKE_LIB="${root}/.gpu/bin/libgmlake.so" timeout 120 python3 tests/gpu/torch_pluggable.py 2>&1 | tail -20
