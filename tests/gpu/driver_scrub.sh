#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: whether memory one process wrote and freed reaches
# another process unzeroed through cuMemCreate (tests/gpu/driver_scrub_probe.py),
# with the writer still alive and after it exited; the reader under the
# embedded lake and under gmlaked with chunks the client makes. Needs
# .gpu/wheel (tests/gpu/bundle_python.sh). Prints SCRUB lines.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "${here}/wheel_venv.sh"
GIB="${GIB:-100}"
flag="$(mktemp -u /tmp/gmlake-scrub.XXXXXX)"
sock="$(mktemp -d /tmp/gmlake-sock.XXXXXX)"
"${GMLAKE_BIN}/gmlaked" --socket="${sock}/g.sock" --fd_socket="${sock}/fd.sock" > /tmp/scrub_gmlaked.log 2>&1 &
daemon=$!
for _ in $(seq 1 100); do [[ -S "${sock}/g.sock" ]] && break; sleep 0.1; done
for lake in "lake:embedded" "lake:daemon,socket:${sock}/g.sock"; do
  for writer in alive exited; do
    GMLAKE_ENABLE=0 "${PY}" "${here}/driver_scrub_probe.py" write "${GIB}" "${flag}" &
    w=$!
    for _ in $(seq 1 600); do [[ -f "${flag}" ]] && break; sleep 0.1; done
    if [[ "${writer}" == exited ]]; then rm -f "${flag}"; wait "${w}"; fi
    echo -n "writer ${writer}, reader ${lake%%,*}: "
    GMLAKE_CONF="${lake}" "${GMLAKE_BIN}/gmlake" run -- "${PY}" "${here}/driver_scrub_probe.py" read "${GIB}" 2>&1 | grep '^SCRUB'
    rm -f "${flag}"; wait "${w}" 2>/dev/null
  done
done
kill -TERM "${daemon}"; wait "${daemon}" 2>/dev/null
