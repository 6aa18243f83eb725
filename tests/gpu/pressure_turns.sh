#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: issue 17's pressure counts on the cuda backend. Two
# processes replay real traces in turns (gmlake-replay --lake, 3 rounds)
# through one gmlaked (--backend=cuda) whose capacity is the plan's (1.05 x
# the floor, below the sum of their peaks), then gmlaked's counters: failed
# leases, pressure rounds per turn switch, lease calls and chunks per GiB
# leased, bytes returned against bytes asked, requests undelivered. The CI
# twin on the host backend is //tests:lake_share_test
# (TurnsCostAboutOneRoundPerSwitchAndNoFailedLease).
# Needs the bundle:
#   tests/gpu/build_bundle.sh //tools:gmlake-replay //daemon:gmlaked \
#     //tools:gmlakectl
# Exit 0 when no lease failed; the figures go to $OUT/pressure_turns.txt.
set -uo pipefail
root="$(pwd)"
OUT="${OUT:-$(mktemp -d /tmp/gmlake-gpu.XXXXXX)}"
export LD_LIBRARY_PATH="${root}/.gpu/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
bin="${root}/.gpu/bin"
dir="$(mktemp -d /tmp/gmlake-turns.XXXXXX)"
sock="${dir}/gmlaked.sock"
traces=(traces/llama1b_full_ckpt.trace.gz traces/llama1b_infer.trace.gz)
cleanup() {
  [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  | tee "${OUT}/pressure_turns.txt"
cap=$("${bin}/gmlake-replay" --lake --lake_plan "${traces[@]}" | python3 -c \
  'import json,sys; print(json.load(sys.stdin)["capacity_bytes"])')
ngpus=$(nvidia-smi -L | wc -l)
caps="$cap"
for _ in $(seq 2 "$ngpus"); do caps+=",0"; done
"${bin}/gmlaked" --backend=cuda --capacity="$caps" --socket="$sock" \
  --fd_socket="${dir}/fd.sock" ${GMLAKED_FLAGS:-} >"${OUT}/gmlaked.log" 2>&1 &
daemon=$!
for _ in $(seq 600); do
  "${bin}/gmlakectl" --socket="$sock" --timeout=1s health >/dev/null 2>&1 && break
  sleep 0.1
done
timeout 400 "${bin}/gmlake-replay" --lake --lake_socket="$sock" --lake_rounds=3 \
  --progress=false "${traces[@]}" 2>&1 | tee -a "${OUT}/pressure_turns.txt"
"${bin}/gmlakectl" --socket="$sock" status --json >"${OUT}/status.json"
python3 - "${OUT}/status.json" <<'PY' | tee -a "${OUT}/pressure_turns.txt"
import json, sys
st = json.load(open(sys.argv[1]))
g = lambda k: int(st.get(k, 0))
gib = g("leased_bytes_total") / float(1 << 30)
switches = 5  # 3 rounds of 2 processes: 6 turns
print("leases served %d, failed %d" % (g("leases_served"), g("leases_failed")))
print("pressure rounds %d (%.1f per turn switch), requests %d, undelivered %d"
      % (g("pressure_rounds"), g("pressure_rounds") / switches,
         g("pressure_requests_sent"), g("pressure_undelivered")))
if gib > 0:
    print("%.2f GiB leased: %.1f lease calls and %.1f chunks per GiB"
          % (gib, g("leases_served") / gib, g("leased_chunks_total") / gib))
print("pressure asked %.2f GiB, %.2f GiB came back"
      % (g("pressure_asked_bytes") / float(1 << 30),
         g("pressure_returned_bytes") / float(1 << 30)))
sys.exit(1 if g("leases_failed") else 0)
PY
