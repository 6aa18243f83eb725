#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: (1) the lake-share benchmark with gmlaked on the cuda
# backend (real chunks exported as descriptors, imported by three client
# processes); (2) real Llama training with each allocator
# (workloads/llama_train.py --allocator native|expandable|gmlake,
# same seed, same batches). Needs the bundle:
#   tests/gpu/build_bundle.sh //tools:gmlake-replay //client:libgmlake.so //daemon:gmlaked
set -uo pipefail
root="$(pwd)"
OUT="${OUT:-$(mktemp -d /tmp/gmlake-gpu.XXXXXX)}"
export LD_LIBRARY_PATH="${root}/.gpu/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"

echo "== lake-share on the cuda backend"
timeout 240 .gpu/bin/gmlake-replay --lake --backend=cuda --progress=false \
  --gmlaked=.gpu/bin/gmlaked --plot="${OUT}/lake_cuda.svg" \
  traces/llama1b_full_ckpt.trace.gz \
  traces/llama1b_infer.trace.gz traces/llama1b_lora_ckpt.trace.gz 2>&1 | tee "${OUT}/lake_cuda.txt"

echo "== llama_train.py, three allocators"
export PYTHONPATH="${root}/client/python${PYTHONPATH:+:${PYTHONPATH}}"
export GMLAKE_LIB="${root}/.gpu/bin/libgmlake.so"
for mode in lora_ckpt full_ckpt; do
  for a in native expandable gmlake; do
    timeout 200 python3 workloads/llama_train.py --allocator "$a" --model llama1b \
      --mode "$mode" --steps "${STEPS:-10}" 2>&1 | grep -E "RESULT|Error|error|gmlake:" | tail -3 \
      | tee -a "${OUT}/train.txt"
  done
done
