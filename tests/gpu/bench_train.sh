#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: the training benchmark of docs/benchmarks.md, native
# and GMLake interleaved (A B A B ...), 3 repetitions of 40 steps each, same
# batches, every run and the medians printed (tests/gpu/train_bench.py).
# With two GPUs, two modes run at once, one per GPU, each interleaved on
# its own GPU. Needs the bundle (tests/gpu/build_bundle.sh
# //client:libgmlake.so) and .gpu/workloads (the workload scripts).
#   bash tests/gpu/bench_train.sh GPU0_MODES GPU1_MODES
# where a mode list is comma-separated model/mode pairs, e.g.
#   bash tests/gpu/bench_train.sh llama1b/full_ckpt,llama1b/lora_ckpt \
#     llama1b/full_offload,llama3b/full_ckpt
# Environment: REPS (3), STEPS (40), ALLOCATORS (native,gmlake), OUT.
set -uo pipefail
root="$(pwd)"
OUT="${OUT:-$(mktemp -d /tmp/gmlake-bench.XXXXXX)}"
export LD_LIBRARY_PATH="${root}/.gpu/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
export PYTHONPATH="${root}/client/python${PYTHONPATH:+:${PYTHONPATH}}"
export GMLAKE_LIB="${root}/.gpu/bin/libgmlake.so" PYTHONUNBUFFERED=1
bench="${root}/tests/gpu/train_bench.py"

run_list() {  # gpu, comma-separated model/mode list
  local gpu="$1" item
  IFS=, read -ra items <<< "$2"
  for item in "${items[@]}"; do
    CUDA_VISIBLE_DEVICES="${gpu}" python3 "${bench}" --model "${item%%/*}" \
      --mode "${item##*/}" --reps "${REPS:-3}" --steps "${STEPS:-40}" \
      --allocators "${ALLOCATORS:-native,gmlake}" \
      --workload "${root}/.gpu/workloads/llama_train.py" \
      --json "${OUT}/train_gpu${gpu}.jsonl"
  done
}

nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
run_list 0 "$1" > "${OUT}/bench_gpu0.txt" 2>&1 &
[ -n "${2:-}" ] && run_list 1 "$2" > "${OUT}/bench_gpu1.txt" 2>&1 &
wait
cat "${OUT}"/bench_gpu*.txt
