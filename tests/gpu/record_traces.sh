#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: records allocation traces of real runs (native PyTorch)
# for traces/, one run at a time, each with its RESULT line, and packs them
# into $OUT/traces.tgz. Runs that would start after BUDGET_S seconds are
# skipped, so the pack always comes back. Then the baselines:
#   bash tests/gpu/trace_baselines.sh (replay_capacity.py, native and expandable)
# Usage: bash tests/gpu/record_traces.sh [NAME ...]  (default: all below)
set -uo pipefail
OUT="${OUT:-$(mktemp -d /tmp/gmlake-traces.XXXXXX)}"
BUDGET_S="${BUDGET_S:-500}"
export PYTHONUNBUFFERED=1
w=workloads
dir=$(mktemp -d /tmp/gmlake-rec.XXXXXX)
declare -A runs=(
  [llama3b_lora_offload]="$w/llama_train.py --model llama3b --mode lora_offload --steps 12"
  [llama7b_lora_ckpt]="$w/llama_train.py --model llama7b --mode lora_ckpt --steps 10"
  [llama3b_lora_ckpt]="$w/llama_train.py --model llama3b --mode lora_ckpt --steps 12"
  [llama7b_full_ckpt]="$w/llama_train.py --model llama7b --mode full_ckpt --steps 8"
  [llama3b_infer_large]="$w/llama_train.py --model llama3b --mode infer_large --steps 6"
  [llama1b_hf_trainer_dynamic]="$w/trace_run.py @ $w/hf_trainer_dynamic.py --steps 24"
  [colocate_train]="$w/trace_run.py @ $w/colocate.py train --dir $dir/c --alone --turns 3"
  [colocate_infer]="$w/trace_run.py @ $w/colocate.py infer --dir $dir/c --alone --turns 2 --infer-new 96 --infer-batch 200"
  # The pair's long decode on one H100 (INFER_NEW=320 INFER_BATCH=48):
  # traces/colocate_infer_long, recorded 2026-12-07.
  [colocate_infer_long]="$w/trace_run.py @ $w/colocate.py infer --dir $dir/c --alone --turns 2 --infer-new 320 --infer-batch 48"
)
order=(llama3b_lora_offload llama7b_lora_ckpt llama1b_hf_trainer_dynamic llama3b_infer_large colocate_train
  colocate_infer llama7b_full_ckpt llama3b_lora_ckpt colocate_infer_long)
(($#)) && order=("$@")
start=$SECONDS
for name in "${order[@]}"; do
  if ((SECONDS - start > BUDGET_S)); then echo "SKIP $name (time budget)"; continue; fi
  cmd=${runs[$name]}
  t="$dir/$name.trace.gz"
  if [[ $cmd == *"trace_run.py @"* ]]; then cmd=${cmd/@/$t}; else cmd="$cmd --trace $t"; fi
  echo "== $name: python3 $cmd"
  t0=$SECONDS
  timeout 150 python3 $cmd 2>&1 | grep -E "^RESULT|Error|error" | cut -c1-600
  echo "TIME $name $((SECONDS - t0)) s, $(stat -c %s "$t" 2>/dev/null || echo 0) bytes"
done
(cd "$dir" && tar czf "$OUT/traces.tgz" ./*.trace.gz)
ls -la "$dir"
