#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: the hand-off benchmark (tools/handoff.h) on the cuda
# backend, for 1, 10 and 40 GiB, with the allocator's default chunks (a
# large request in large chunks, client/chunk_sizing.h) and with
# large_chunk:0 (every chunk of gmlaked's 2 MiB unit). Needs the bundle:
#   tests/gpu/build_bundle.sh //tools:gmlake-handoff //daemon:gmlaked
# Run from the repository root (carry [".gpu"]):
#   bash tests/gpu/handoff.sh
# Environment: SIZES ("1GiB 10GiB 40GiB"), CONFS ("large_chunk:1GiB
# large_chunk:0"), BACKEND (cuda; host to try it on a machine without a
# GPU), OUT.
# Writes handoff.jsonl (one JSON object per run) and prints a table of them.
set -uo pipefail
root="$(pwd)"
OUT="${OUT:-$(mktemp -d /tmp/gmlake-handoff.XXXXXX)}"
export LD_LIBRARY_PATH="${root}/.gpu/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
for size in ${SIZES:-1GiB 10GiB 40GiB}; do
  for conf in ${CONFS:-large_chunk:1GiB large_chunk:0}; do
    echo "== ${size} with ${conf}"
    timeout 120 .gpu/bin/gmlake-handoff --backend="${BACKEND:-cuda}" --bytes="${size}" \
      --conf="${conf}" --gmlaked=.gpu/bin/gmlaked --progress=false \
      --json 2>> "${OUT}/handoff_${size}_${conf/:/_}.log" >> "${OUT}/handoff.jsonl" \
      || tail -3 "${OUT}/handoff_${size}_${conf/:/_}.log"
  done
done
python3 - "${OUT}/handoff.jsonl" <<'PY'
import json, sys
print("%-8s %7s %9s %9s %9s %9s %9s %9s %9s %9s" % ("bytes", "chunks", "avg MiB", "total ms", "gmlaked", "reclaim", "import", "map", "access", "rest"))
for line in open(sys.argv[1]):
    r = json.loads(line)
    ph = {p["name"]: p["seconds"] * 1e3 for p in r["phases"]}
    print("%-8s %7d %9.0f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f" % (
        "%dGiB" % (r["bytes"] >> 30), r["chunks"], r["bytes"] / max(r["chunks"], 1) / 2**20,
        r["total_seconds"] * 1e3, r["daemon_handoff_seconds"] * 1e3, ph["reclaim"],
        ph["import"], ph["map"], ph["access"], ph["lease and transfer (rest)"]))
PY
echo "runs: ${OUT}/handoff.jsonl"
