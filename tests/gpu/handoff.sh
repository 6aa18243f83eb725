#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: the hand-off benchmark (tools/handoff.h) on the cuda
# backend, for 1, 10 and 40 GiB, with gmlaked's chunks of the granularity
# (2 MiB) and of 64 MiB. Needs the bundle:
#   tests/gpu/build_bundle.sh //tools:gmlake-handoff //daemon:gmlaked
# Run from the repository root (carry [".gpu"]):
#   bash tests/gpu/handoff.sh
# Environment: SIZES ("1GiB 10GiB 40GiB"), CHUNKS ("2MiB 64MiB"), BACKEND
# (cuda; host to try it on a machine without a GPU), OUT.
# Writes handoff.jsonl (one JSON object per run) and prints a table of them.
set -uo pipefail
root="$(pwd)"
OUT="${OUT:-$(mktemp -d /tmp/gmlake-handoff.XXXXXX)}"
export LD_LIBRARY_PATH="${root}/.gpu/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
for size in ${SIZES:-1GiB 10GiB 40GiB}; do
  for chunk in ${CHUNKS:-2MiB 64MiB}; do
    echo "== ${size} in chunks of ${chunk}"
    timeout 120 .gpu/bin/gmlake-handoff --backend="${BACKEND:-cuda}" --bytes="${size}" \
      --chunk_size="${chunk}" --gmlaked=.gpu/bin/gmlaked --progress=false \
      --json 2>> "${OUT}/handoff_${size}_${chunk}.log" >> "${OUT}/handoff.jsonl" \
      || tail -3 "${OUT}/handoff_${size}_${chunk}.log"
  done
done
python3 - "${OUT}/handoff.jsonl" <<'PY'
import json, sys
print("%-8s %-7s %7s %9s %9s %9s %9s %9s %9s" % ("bytes", "chunk", "chunks", "total ms", "reclaim", "import", "map", "access", "rest"))
for line in open(sys.argv[1]):
    r = json.loads(line)
    ph = {p["name"]: p["seconds"] * 1e3 for p in r["phases"]}
    print("%-8s %-7s %7d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f" % (
        "%dGiB" % (r["bytes"] >> 30), "%dMiB" % (r["chunk_size"] >> 20), r["chunks"],
        r["total_seconds"] * 1e3, ph["reclaim"], ph["import"], ph["map"], ph["access"],
        ph["lease and transfer (rest)"]))
PY
echo "runs: ${OUT}/handoff.jsonl"
