#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: one role of the colocation pair alone
# (workloads/colocate.py ROLE, 3 turns; ROLE=infer by default, or train)
# under GMLake with several GMLAKE_CONF settings, interleaved REPS times,
# with GMLake's counters (stitches, maps, unmaps, creates, driver time,
# time waiting for chunks). A setting with lake:daemon runs through a
# gmlaked started with its defaults for that run. For policies the trace
# replays price in calls, to see what the calls cost on the GPU:
#   CONFS="grow_reach:0 grow_reach:0.0625" REPS=2 bash tests/gpu/role_confs.sh
#   ROLE=train CONFS="lake:embedded lake:daemon" REPS=2 bash tests/gpu/role_confs.sh
# Needs the wheel bundle (tests/gpu/bundle_python.sh). NATIVE=0 leaves
# native PyTorch out; NATIVE=each runs it in every repetition. Lines: ROLE
# (one per run, JSON).
set -uo pipefail
OUT="${OUT:-$(mktemp -d /tmp/gmlake-role.XXXXXX)}"
mkdir -p "${OUT}"
export PYTHONUNBUFFERED=1
here="$(cd "$(dirname "$0")" && pwd)"
source "${here}/wheel_venv.sh"
REPS="${REPS:-2}"
ROLE="${ROLE:-infer}"
read -r -a confs <<< "${CONFS:-grow_reach:0}"
sockdir="$(mktemp -d /tmp/gmlake-sock.XXXXXX)"
run_role() {  # label, then the command's environment and prefix
  local label="$1"; shift
  local t0=$SECONDS log="${OUT}/${ROLE}.log"
  env "$@" "${PY}" "${here}/with_stats.py" "${WORKLOADS}/colocate.py" "${ROLE}" --alone \
    --dir /tmp/alone --turns 3 --infer-new 64 --infer-batch "${INFER_BATCH:-150}" > "${log}" 2>&1
  python3 - "${ROLE}" "${label}" "$((SECONDS - t0))" "${log}" <<'PY'
import json, sys
role, label, secs, log = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
res, st = {}, {}
for line in open(log):
    if line.startswith("RESULT "): res = json.loads(line[7:])
    if line.startswith("GMLAKE_STATS "): st = json.loads(line[13:])
keys = ("stitches", "chunks_stolen", "chunks_acquired", "reactivations", "acquire_us", "slow_path_us",
        "driver_calls.map", "driver_calls.unmap", "driver_calls.set_access", "driver_calls.create",
        "driver_us", "driver_time_us.set_access", "driver_time_us.unmap", "driver_time_us.create",
        "driver_time_us.map")
print("ROLE", json.dumps(dict(role=role, label=label, wall_s=int(secs), turns=res.get("turns"),
      ok=res.get("ok"), error=res.get("error"), peak_allocated_gib=res.get("peak_allocated_gib"),
      peak_reserved_gib=res.get("peak_reserved_gib"),
      **{k: st.get("gmlake." + k) for k in keys})))
PY
}
run_conf() {  # one GMLAKE_CONF setting; lake:daemon starts a gmlaked for it
  local c="$1"
  if [[ "${c}" == *lake:daemon* ]]; then
    start_gmlaked "${sockdir}" "${OUT}/gmlaked.log"
    run_role "${c}" GMLAKE_CONF="socket:${sockdir}/gmlaked.sock,${c}" "${GMLAKE_BIN}/gmlake" run --
    stop_gmlaked
  else
    run_role "${c}" GMLAKE_CONF="lake:embedded,${c}" "${GMLAKE_BIN}/gmlake" run --
  fi
}
# NATIVE=each runs native PyTorch in every repetition, interleaved.
[[ "${NATIVE:-1}" == 1 ]] && run_role native GMLAKE_ENABLE=0
for rep in $(seq 1 "${REPS}"); do
  [[ "${NATIVE:-1}" == each ]] && run_role native GMLAKE_ENABLE=0
  for c in "${confs[@]}"; do run_conf "${c}"; done
done
