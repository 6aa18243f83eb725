#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: the colocation pair's inference role alone
# (workloads/colocate.py infer, 3 turns) under GMLake's embedded lake with
# several GMLAKE_CONF settings, interleaved REPS times, with GMLake's
# counters (stitches, maps, unmaps, driver time). For policies the trace
# replays price in calls, to see what the calls cost on the GPU:
#   CONFS="grow_reach:0 grow_reach:0.0625" REPS=2 bash tests/gpu/infer_confs.sh
# Needs the wheel bundle (tests/gpu/bundle_python.sh). Lines: INFER.
set -uo pipefail
OUT="${OUT:-$(mktemp -d /tmp/gmlake-infer.XXXXXX)}"
mkdir -p "${OUT}"
export PYTHONUNBUFFERED=1
here="$(cd "$(dirname "$0")" && pwd)"
source "${here}/wheel_venv.sh"
REPS="${REPS:-2}"
read -r -a confs <<< "${CONFS:-grow_reach:0}"
infer() {  # label, then the command's environment and prefix
  local label="$1"; shift
  local t0=$SECONDS
  env "$@" "${PY}" "${here}/with_stats.py" "${WORKLOADS}/colocate.py" infer --alone --dir /tmp/alone \
    --turns 3 --infer-new 64 --infer-batch "${INFER_BATCH:-150}" > "${OUT}/infer.log" 2>&1
  python3 - "${label}" "$((SECONDS - t0))" "${OUT}/infer.log" <<'PY'
import json, sys
label, secs, log = sys.argv[1], sys.argv[2], sys.argv[3]
res, st = {}, {}
for line in open(log):
    if line.startswith("RESULT "): res = json.loads(line[7:])
    if line.startswith("GMLAKE_STATS "): st = json.loads(line[13:])
keys = ("stitches", "chunks_stolen", "reactivations", "driver_calls.map", "driver_calls.unmap",
        "driver_calls.set_access", "driver_calls.create", "driver_us", "driver_time_us.set_access",
        "driver_time_us.unmap")
print("INFER", json.dumps(dict(label=label, wall_s=int(secs), turns=res.get("turns"), ok=res.get("ok"),
      error=res.get("error"), peak_allocated_gib=res.get("peak_allocated_gib"),
      peak_reserved_gib=res.get("peak_reserved_gib"),
      **{k: st.get("gmlake." + k) for k in keys})))
PY
}
[[ "${NATIVE:-1}" == 1 ]] && infer native GMLAKE_ENABLE=0
for rep in $(seq 1 "${REPS}"); do
  for c in "${confs[@]}"; do
    infer "${c}" GMLAKE_CONF="lake:embedded,${c}" "${GMLAKE_BIN}/gmlake" run --
  done
done
