#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: the colocation trainer's start and exit
# (tests/gpu/start_phases.py) natively, under GMLake's embedded lake and
# through a gmlaked with its defaults, interleaved REPS times. One line a
# run: STARTEXIT {json}, the phases plus exit_s (from the script's last
# line to the process gone, by the shell's clock) and total_s.
#   REPS=3 bash tests/gpu/start_phases.sh
# Needs the wheel bundle (tests/gpu/bundle_python.sh).
set -uo pipefail
OUT="${OUT:-$(mktemp -d /tmp/gmlake-phases.XXXXXX)}"
mkdir -p "${OUT}"
here="$(cd "$(dirname "$0")" && pwd)"
source "${here}/wheel_venv.sh"
sockdir="$(mktemp -d /tmp/gmlake-sock.XXXXXX)"
one() {  # label, then the command's environment and prefix
  local label="$1"; shift
  local t0 t1 line
  t0=$(date +%s%N)
  line=$(env START_NS="${t0}" "$@" "${PY}" "${here}/start_phases.py" 2>"${OUT}/${label}.err" | grep '^PHASES ')
  t1=$(date +%s%N)
  python3 - "${label}" "${t0}" "${t1}" "${line#PHASES }" <<'PY'
import json, sys
label, t0, t1, js = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
d = json.loads(js) if js else {"error": "no PHASES line"}
end = d.pop("end_ns", t1)
print("STARTEXIT", json.dumps(dict(label=label, total_s=round((t1 - t0) / 1e9, 3),
      exit_s=round((t1 - end) / 1e9, 3), **d)))
PY
}
for rep in $(seq 1 "${REPS:-3}"); do
  one native GMLAKE_ENABLE=0
  one embedded GMLAKE_CONF=lake:embedded "${GMLAKE_BIN}/gmlake" run --
  start_gmlaked "${sockdir}" "${OUT}/gmlaked.log"
  one daemon GMLAKE_CONF="lake:daemon,socket:${sockdir}/gmlaked.sock" "${GMLAKE_BIN}/gmlake" run --
  stop_gmlaked
done
