#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: the colocation benchmark of docs/benchmarks.md. A
# trainer and an inference engine take turns on one GPU
# (workloads/colocate.py pair, unedited), with the allocator chosen outside
# it: native, expandable segments, native with --empty-cache (what users
# write by hand today), and GMLake (`gmlake run --`, through a gmlaked with
# its defaults), interleaved A B C D A B C D ..., REPS times. After each
# GMLake run: gmlakectl status --json (leases, pressure rounds), and 2 s
# after the job ends, how much of the card a plain PyTorch process gets.
# Needs the wheel bundle (tests/gpu/bundle_python.sh).
#   bash tests/gpu/colocate_bench.sh        # REPS=3 TURNS=4 SETTINGS=...
#   (PAIR_TIMEOUT bounds each pair, NATIVE_TIMEOUT native's alone)
#   STATS=1: the allocator's counters at every turn switch of each run
#   (GMLake's, or native PyTorch's cudaMalloc/cudaFree calls and retries), in
#   OUT/turnstats_SETTING_REP.jsonl (tests/gpu/turn_stats_table.py)
#   GMLAKED_LOG_FLAGS=--verbose: gmlaked logs each lease and pressure
#   request, with its size and whom it is for (OUT/gmlaked_SETTING_REP.log;
#   by turn: tests/gpu/pressure_requests.py OUT)
#   SETTINGS="gmlake gmlake_NAME": GMLake again with CONF_NAME's allocator
#   options (GMLAKE_CONF) and DFLAGS_NAME's gmlaked flags, e.g.
#   DFLAGS_m32=--pressure_peak_margin_divisor=32
set -uo pipefail
OUT="${OUT:-$(mktemp -d /tmp/gmlake-colocate.XXXXXX)}"
mkdir -p "${OUT}"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/wheel_venv.sh"
source "$(dirname "$0")/bench_out.sh"
source "$(dirname "$0")/pair_watch.sh"
clear_bench_out "${OUT}"
REPS="${REPS:-3}"
TURNS="${TURNS:-4}"
SETTINGS="${SETTINGS:-native expandable empty_cache gmlake}"
# Sized on the H200 (docs/benchmarks.md): native peaks 66.6 + ~125 GiB
# reserved (>= 1.1 x the card), each peak plus the other's idle live fits.
SIZE=(--turns "${TURNS}" --infer-new "${INFER_NEW:-64}" --infer-batch "${INFER_BATCH:-200}")
sockdir="$(mktemp -d /tmp/gmlake-sock.XXXXXX)"
log="${OUT}/colocate.jsonl"
: > "${log}"

card_free_after() {  # what a plain PyTorch process gets, 2 s after a job
  sleep 2
  "${PY}" - <<'PY'
import json, torch
free, total = torch.cuda.mem_get_info()
got = 0
try:
    x = torch.empty(int(free * 0.98), dtype=torch.uint8, device="cuda"); got = x.numel(); del x
except torch.OutOfMemoryError:
    pass
print("PLAIN", json.dumps(dict(free_gib=free / 2**30, total_gib=total / 2**30, allocated_gib=got / 2**30)))
PY
}

run_one() {  # setting, rep
  local s="$1" rep="$2" d
  d="$(mktemp -d /tmp/gmlake-pair.XXXXXX)"
  local cmd=("${PY}" "${WORKLOADS}/colocate.py" pair --dir "${d}" "${SIZE[@]}")
  case "$s" in
    expandable) export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ;;
    empty_cache) cmd+=(--empty-cache) ;;
    gmlake | gmlake_*)
      # gmlake_NAME: GMLake with GMLAKE_CONF's extra options from CONF_NAME
      # (e.g. SETTINGS="gmlake gmlake_old" CONF_old=held_chunk_divisor:0)
      # and gmlaked's extra flags from DFLAGS_NAME (e.g.
      # DFLAGS_m32=--pressure_peak_margin_divisor=32).
      local extra="" dflags="" var="CONF_${s#gmlake_}" dvar="DFLAGS_${s#gmlake_}"
      [[ "$s" == gmlake_* ]] && extra=",${!var:-}" && dflags="${!dvar:-}"
      start_gmlaked "${sockdir}" "${OUT}/gmlaked_${s}_${rep}.log" "${dflags}"
      cmd=("${GMLAKE_BIN}/gmlake" run -- "${cmd[@]}")
      export GMLAKE_CONF="lake:daemon,socket:${sockdir}/gmlaked.sock${extra}" ;;
  esac
  if [[ "${STATS:-0}" == 1 ]]; then
    export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)/turn_stats"
    export GMLAKE_TURN_STATS="${OUT}/turnstats_${s}_${rep}.jsonl"
  fi
  local t0=$SECONDS
  # Where a role runs out of memory, colocate.py's partner writes the turn
  # over its "done-" mark and waits for it (docs/benchmarks.md, fourth
  # session): watch_pair ends that wait within seconds; NATIVE_TIMEOUT
  # still bounds native alone.
  local limit="${PAIR_TIMEOUT:-420}"
  [[ "$s" == native ]] && limit="${NATIVE_TIMEOUT:-${limit}}"
  timeout "${limit}" "${cmd[@]}" > "${OUT}/pair_${s}_${rep}.log" 2>&1 &
  local pid=$!
  watch_pair "${d}" "${pid}" | sed "s/^/${s} rep ${rep}: /" | tee -a "${OUT}/watch.log"
  wait "${pid}"
  local rc=$?
  unset PYTORCH_CUDA_ALLOC_CONF GMLAKE_CONF PYTHONPATH GMLAKE_TURN_STATS
  grep -E '^(RESULT|PAIR)' "${OUT}/pair_${s}_${rep}.log" | while read -r kind json; do
    echo "{\"setting\": \"${s}\", \"rep\": ${rep}, \"kind\": \"${kind}\", \"data\": ${json}}" >> "${log}"
  done
  # A pair that printed nothing (killed at its limit) still gets its row.
  if ! grep -q '^PAIR' "${OUT}/pair_${s}_${rep}.log"; then
    echo "{\"setting\": \"${s}\", \"rep\": ${rep}, \"kind\": \"PAIR\", \"data\": {\"ok\": false, \"error\": \"no result within ${limit} s (rc ${rc})\"}}" >> "${log}"
  fi
  echo "== ${s} rep ${rep}: rc ${rc}, $((SECONDS - t0)) s"
  grep -E '^(RESULT|PAIR)' "${OUT}/pair_${s}_${rep}.log" | cut -c1-400
  if [[ "$s" == gmlake* ]]; then
    "${GMLAKE_BIN}/gmlakectl" --socket="${sockdir}/gmlaked.sock" status --json > "${OUT}/status_${s}_${rep}.json" 2>&1
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('STATUS', sys.argv[2], json.dumps({k: v for k, v in d.items() if not isinstance(v, (list, dict))}))" "${OUT}/status_${s}_${rep}.json" "$s" 2>&1 | tee -a "${OUT}/status.txt"
    card_free_after | tee -a "${OUT}/plain_after.txt"
    stop_gmlaked
  fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# GMLake compiles its native door into PyTorch once per torch install
# (~6 s, kept in GMLAKE_CACHE_DIR): a first-install cost, like the
# machine's cold first CUDA run, so both are paid here, untimed, before the
# reps (WARM=0: not).
if [[ "${WARM:-1}" != 0 ]]; then
  t0=$SECONDS
  "${PY}" -c "import torch; torch.zeros(1, device='cuda')" > /dev/null 2>&1
  GMLAKE_CONF=lake:embedded "${GMLAKE_BIN}/gmlake" run -- "${PY}" -c \
    "import torch; torch.zeros(1, device='cuda')" > "${OUT}/warm.log" 2>&1
  rc=$?
  echo "WARM: native and GMLake's door, $((SECONDS - t0)) s (rc ${rc})"
fi
for rep in $(seq 1 "${REPS}"); do
  for s in ${SETTINGS}; do run_one "$s" "$rep"; done
done
python3 "$(dirname "$0")/colocate_table.py" "${log}" | tee "${OUT}/table.md"
