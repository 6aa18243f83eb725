# Copyright 2026 The GMLake Authors.
#
# Sourced by the GPU scripts: a fresh venv outside the checkout, with the
# system's site-packages (PyTorch 2.11 is installed there) and the wheel from
# .gpu/wheel (tests/gpu/bundle_python.sh). Sets VENV, PY, GMLAKE_BIN and
# WORKLOADS (the workload scripts, copied outside the checkout too), and
# unsets everything that could find gmlake elsewhere. Defines start_gmlaked
# and stop_gmlaked for the scripts that run through a gmlaked.
root="$(pwd)"
wheel="$(ls "${root}"/.gpu/wheel/gmlake-*.whl 2>/dev/null | head -1)"
if [[ -z "${wheel}" ]]; then
  echo "no wheel in .gpu/wheel: run tests/gpu/bundle_python.sh here first" >&2
  exit 2
fi
VENV="${VENV:-$(mktemp -d /tmp/gmlake-venv.XXXXXX)}"
if [[ ! -x "${VENV}/bin/python" ]]; then
  python3 -m venv --system-site-packages "${VENV}"
  # --system-site-packages reaches the base interpreter's packages only. Where
  # python3 is itself a venv (the GPU machine's: /opt/torch/.venv, which holds
  # PyTorch), a .pth file adds its site-packages, as a user's venv on top of
  # a conda or image venv would.
  parent="$(python3 -c 'import sys, sysconfig
if sys.prefix != sys.base_prefix: print(sysconfig.get_paths()["purelib"])')"
  if [[ -n "${parent}" ]]; then
    echo "${parent}" > "$("${VENV}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/parent_venv.pth"
  fi
fi
"${VENV}/bin/pip" install --no-index --no-deps --force-reinstall --quiet "${wheel}"
unset GMLAKE_LIB GMLAKE_ENABLE PYTHONPATH LD_LIBRARY_PATH
PY="${VENV}/bin/python"
GMLAKE_BIN="${VENV}/bin"
WORKLOADS="$(mktemp -d /tmp/gmlake-workloads.XXXXXX)"
cp "${root}"/.gpu/workloads/*.py "${WORKLOADS}/"
cp "${root}"/tests/gpu/torch_memory_calls.py "${root}"/client/python/viz_check.py \
  "${WORKLOADS}/"
export PATH="${VENV}/bin:${PATH}"
echo "venv ${VENV}: $("${PY}" -c 'import gmlake, torch; print("gmlake", gmlake.__version__, "from", gmlake.__file__, "| torch", torch.__version__)')"

# start_gmlaked DIR LOG [FLAGS]: a gmlaked, its sockets in DIR
# (DIR/gmlaked.sock, DIR/fd.sock), its output in LOG; returns once its
# control socket is there (10 s at most). GMLAKED_PID is its pid. Its
# defaults, but for FLAGS (space-separated), which change its policy for a
# setting compared against the defaults, and GMLAKED_LOG_FLAGS, which only
# change what it logs (--verbose: every lease and pressure request, to read
# a run's rounds per turn switch).
start_gmlaked() {
  # shellcheck disable=SC2086  # word-split on purpose: several flags
  "${GMLAKE_BIN}/gmlaked" --socket="$1/gmlaked.sock" --fd_socket="$1/fd.sock" \
    ${GMLAKED_LOG_FLAGS:-} ${3:-} > "$2" 2>&1 &
  GMLAKED_PID=$!
  for _ in $(seq 1 100); do [[ -S "$1/gmlaked.sock" ]] && break; sleep 0.1; done
}
# stop_gmlaked: SIGTERM (gmlaked gives its chunks back) and wait for it.
stop_gmlaked() {
  kill -TERM "${GMLAKED_PID}"; wait "${GMLAKED_PID}" 2>/dev/null
}
