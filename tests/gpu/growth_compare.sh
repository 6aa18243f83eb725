#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: growth through gmlaked against the embedded lake and
# native PyTorch (issue 17), in one call, runs interleaved:
#   1. gmlake-growth-bench, leasing ahead in the background on and off;
#   2. llama1b's creation and first two steps (tests/gpu/first_steps.py):
#      native, embedded, gmlaked (chunks the process makes), gmlaked with
#      make_chunks:false (chunks gmlaked makes and exports), REPS times (with GMLake's counters: driver time by call, time in the
#      lake's acquires);
#   3. the colocation pair's inference role alone (its stitches and driver
#      time, tests/gpu/with_stats.py), native and GMLake embedded.
# Needs the bundles (tests/gpu/build_bundle.sh //tools:gmlake-growth-bench
# //daemon:gmlaked; tests/gpu/bundle_python.sh). Lines: GROWTH/FIRST/INFER.
# PARTS picks the parts ("bench first infer"; the wheel alone does for
# "first infer").
set -uo pipefail
PARTS="${PARTS:-bench first infer}"
has() { [[ " ${PARTS} " == *" $1 "* ]]; }
OUT="${OUT:-$(mktemp -d /tmp/gmlake-growth.XXXXXX)}"
export PYTHONUNBUFFERED=1
here="$(cd "$(dirname "$0")" && pwd)"
source "${here}/wheel_venv.sh"
REPS="${REPS:-3}"
sock="$(mktemp -d /tmp/gmlake-sock.XXXXXX)"
if has bench; then
LD_LIBRARY_PATH="${PWD}/.gpu/lib" .gpu/bin/gmlake-growth-bench --backend=cuda \
  --bytes=8GiB --reps=2 --gmlaked="${PWD}/.gpu/bin/gmlaked" \
  --conf=lease_ahead_background:false --json > "${OUT}/growth_off.json" 2>/dev/null
LD_LIBRARY_PATH="${PWD}/.gpu/lib" .gpu/bin/gmlake-growth-bench --backend=cuda \
  --bytes=8GiB --reps=2 --gmlaked="${PWD}/.gpu/bin/gmlaked" --json > "${OUT}/growth_on.json" 2>/dev/null
for f in off on; do
  python3 -c "import json,sys; [print('GROWTH', sys.argv[2], r['pattern'], r['lake'], round(r['seconds'],3), round(r['x_embedded'],2), r['lease_calls']) for r in json.load(open(sys.argv[1]))['runs']]" "${OUT}/growth_${f}.json" "$f"
done
fi
if has first; then
"${GMLAKE_BIN}/gmlaked" --socket="${sock}/g.sock" --fd_socket="${sock}/fd.sock" > "${OUT}/gmlaked.log" 2>&1 &
daemon=$!
for _ in $(seq 1 100); do [[ -S "${sock}/g.sock" ]] && break; sleep 0.1; done
first() {  # label, then the command's environment and prefix
  local label="$1"; shift
  local line
  env "$@" "${PY}" "${here}/first_steps.py" > "${OUT}/first_${label}.out" 2>"${OUT}/first_${label}.err"
  line="$(grep '^FIRST_STEPS' "${OUT}/first_${label}.out")"
  echo "FIRST ${label} ${line#FIRST_STEPS }"
  # Where GMLake's time went: driver time by call, time in acquires.
  grep -h '^GMLAKE_STATS' "${OUT}/first_${label}.out" | python3 -c "import json,sys
for l in sys.stdin:
    s = json.loads(l.split(' ', 1)[1])
    print('FIRST_STATS ${label}', {k[7:].replace('driver_time_us.', ''): v for k, v in s.items() if k.startswith('gmlake.driver_time_us.') and v or k in ('gmlake.acquire_us', 'gmlake.chunks_acquired', 'gmlake.driver_us')})"
}
for rep in $(seq 1 "${REPS}"); do
  first native GMLAKE_ENABLE=0
  first embedded GMLAKE_CONF=lake:embedded "${GMLAKE_BIN}/gmlake" run --
  first gmlaked GMLAKE_CONF="lake:daemon,socket:${sock}/g.sock" "${GMLAKE_BIN}/gmlake" run --
  first gmlaked_import GMLAKE_CONF="lake:daemon,socket:${sock}/g.sock,make_chunks:false" "${GMLAKE_BIN}/gmlake" run --
done
kill -TERM "${daemon}"; wait "${daemon}" 2>/dev/null
fi
has infer || exit 0
infer() {
  local label="$1"; shift
  local t0=$SECONDS
  env "$@" "${PY}" "${here}/with_stats.py" "${WORKLOADS}/colocate.py" infer --alone --dir /tmp/alone \
    --turns 3 --infer-new 64 --infer-batch "${INFER_BATCH:-150}" > "${OUT}/infer_${label}.log" 2>&1
  echo "INFER ${label} $((SECONDS - t0)) s $(grep -h '^RESULT' "${OUT}/infer_${label}.log" | cut -c1-300)"
  grep -h '^GMLAKE_STATS' "${OUT}/infer_${label}.log" | cut -c1-1500
}
infer native GMLAKE_ENABLE=0
infer embedded GMLAKE_CONF=lake:embedded "${GMLAKE_BIN}/gmlake" run --
infer expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
