#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine (carry [".gpu"] after tests/gpu/bundle_python.sh here),
# from the repository root:
#   bash tests/gpu/wheel_test.sh
# The wheel as a user installs it: a fresh venv with the system's
# site-packages (PyTorch), `pip install gmlake-*.whl`, and everything run
# from a folder outside the checkout, with nothing of the checkout on any
# path:
#   1. the module and its library come from the venv; ldd of every bundled
#      file resolves inside the wheel but for the C/C++ runtime;
#   2. PyTorch's memory calls, record_stream, too-late error, memory_viz
#      snapshot (torch_memory_calls.py, under `gmlake run`);
#   3. training, unedited, under `gmlake run` and `python -m gmlake`
#      (llama_train.py --allocator native: its memory figures are GMLake's);
#   4. gmlaked and gmlakectl from the venv, and DDP on NPROC ranks leasing
#      from that gmlaked through the launcher.
# Prints PASS/FAIL per step; files in $OUT.
set -uo pipefail
source tests/gpu/wheel_venv.sh
OUT="${OUT:-$(mktemp -d /tmp/gmlake-wheel.XXXXXX)}"
NPROC="${NPROC:-$(nvidia-smi -L | wc -l)}"
(( NPROC > 2 )) && NPROC=2
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
cd "${WORKLOADS}"
failed=0
step() {
  echo "STEP $1: $2"
  if [[ "$1" == FAIL ]]; then failed=$((failed + 1)); fi
}

site="$("${PY}" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
lib="$("${PY}" -c 'import gmlake; print(gmlake.library_path())' 2>&1)"
[[ "${lib}" == "$(readlink -f "${site}")"/gmlake/lib/libgmlake.so ]] \
  && step PASS "library from the venv: ${lib}" || step FAIL "library: ${lib}"
bad=""
system='^(linux-vdso|ld-linux|libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt)\.so'
for f in "${site}"/gmlake/lib/*.so* "${site}"/gmlake/bin/*; do
  while read -r soname arrow target _; do
    [[ "${arrow}" == "=>" && ! "${soname}" =~ ${system} ]] || continue
    [[ "$(readlink -f "${target}")" == "$(readlink -f "${site}")"/gmlake/lib/* ]] \
      || bad+=" ${f##*/}:${soname}=>${target}"
  done < <(ldd "${f}")
done
[[ -z "${bad}" ]] && step PASS "ldd: every bundled library from the wheel" \
  || step FAIL "ldd:${bad}"
echo "C library here: $(ldd --version | head -1)"

"${GMLAKE_BIN}/gmlake" run -- "${PY}" torch_memory_calls.py --out "${OUT}" \
  > "${OUT}/memory_calls.log" 2>&1
rc=$?
grep -E "^CHECK" "${OUT}/memory_calls.log"
(( rc == 0 )) && step PASS "PyTorch's memory calls (snapshot: ${OUT}/gmlake_snapshot.pickle)" \
  || step FAIL "PyTorch's memory calls (exit ${rc}, ${OUT}/memory_calls.log)"

for how in "gmlake run --" "python -m gmlake"; do
  if [[ "${how}" == "gmlake run --" ]]; then
    cmd=("${GMLAKE_BIN}/gmlake" run -- "${PY}" llama_train.py)
  else
    cmd=("${PY}" -m gmlake llama_train.py)
  fi
  timeout 600 "${cmd[@]}" --allocator native --model llama1b --mode lora_ckpt \
    --steps "${STEPS:-8}" > "${OUT}/train.log" 2>&1
  result="$(grep '^RESULT' "${OUT}/train.log" | tail -1)"
  started="$(grep -c '^gmlake: ' "${OUT}/train.log")"
  echo "${how}: ${result}"
  [[ -n "${result}" && "${started}" -ge 1 ]] \
    && step PASS "training under '${how}' (GMLake start-up lines: ${started})" \
    || step FAIL "training under '${how}': $(tail -3 "${OUT}/train.log")"
done

sockdir="$(mktemp -d /tmp/gmlake-sock.XXXXXX)"
"${GMLAKE_BIN}/gmlaked" --socket="${sockdir}/gmlaked.sock" \
  --fd_socket="${sockdir}/fd.sock" --capacity=0.9 --prefer_reclaim \
  > "${OUT}/gmlaked.log" 2>&1 &
daemon=$!
for _ in $(seq 1 100); do [[ -S "${sockdir}/gmlaked.sock" ]] && break; sleep 0.2; done
"${GMLAKE_BIN}/gmlakectl" --socket="${sockdir}/gmlaked.sock" status \
  && step PASS "gmlaked and gmlakectl from the venv" \
  || step FAIL "gmlakectl status: $(tail -3 "${OUT}/gmlaked.log")"
GMLAKE_CONF="lake:daemon,socket:${sockdir}/gmlaked.sock" timeout 900 \
  "${GMLAKE_BIN}/gmlake" run -- "${PY}" -m torch.distributed.run --standalone \
  --nproc_per_node "${NPROC}" ddp_train.py --allocator native --steps "${STEPS:-8}" \
  > "${OUT}/ddp_daemon.log" 2>&1
grep -E '^RESULT|^gmlake:' "${OUT}/ddp_daemon.log" | cut -c1-300
[[ "$(grep -c '^RESULT' "${OUT}/ddp_daemon.log")" -eq "${NPROC}" ]] \
  && grep -q "gmlaked" "${OUT}/ddp_daemon.log" \
  && step PASS "DDP on ${NPROC} ranks leasing from the venv's gmlaked" \
  || step FAIL "DDP through gmlaked (${OUT}/ddp_daemon.log)"
"${GMLAKE_BIN}/gmlakectl" --socket="${sockdir}/gmlaked.sock" status
kill -INT "${daemon}"; wait "${daemon}" 2>/dev/null
echo "wheel_test: ${failed} failed; files in ${OUT}"
exit $(( failed > 0 ))
