#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: PyTorch's own test/test_cuda.py tests of graphs, pools,
# memory stats and snapshots, run natively and through GMLake's native door
# (`gmlake run --`, embedded lake), each test's outcome side by side.
#
# The GPU machine has no network, so the tests travel from here: put
# PyTorch's test/test_cuda.py (of 2.11, or a little newer) at
# .gpu/pytorch_tests/test_cuda_full.py (ignored by git: PyTorch's code is not
# ours to commit). tests/gpu/pytorch_test_cuda_conftest.py, copied beside it,
# selects the allocator's tests (graphs, pools, memory stats, snapshots) and
# stands in for what a newer file imports that 2.11 lacks, printing each.
# Then, with carry [".gpu"] after tests/gpu/bundle_python.sh:
#   bash tests/gpu/pytorch_test_cuda.sh [PYTEST -k EXPRESSION]
# Prints one line per test (native, gmlake) and the counts; exit status 0 when
# every test that passes natively passes under GMLake.
# With a file newer than the installed torch, run it in groups, each in its
# own processes: a test of an API 2.11 lacks can abort natively, or leave a
# capture open that fails every later test (docs/benchmarks.md, run 7):
#   bash tests/gpu/pytorch_test_cuda.sh "TestMemPool"
#   bash tests/gpu/pytorch_test_cuda.sh "TestCudaAllocator"
#   bash tests/gpu/pytorch_test_cuda.sh "TestBlockStateAbsorption or graph"
# and set GMLAKE_CACHE_DIR so that the door is built once for all of them.
set -uo pipefail
root="$(pwd)"
src="${root}/.gpu/pytorch_tests/test_cuda_full.py"
[[ -f "${src}" ]] || { echo "no ${src}: fetch PyTorch's test_cuda.py first (see the header)" >&2; exit 2; }
source tests/gpu/wheel_venv.sh
work="$(mktemp -d /tmp/gmlake-pttests.XXXXXX)"
# Named test_cuda.py: test_memory_snapshot looks for the file's name in the
# recorded stack frames.
cp "${src}" "${work}/test_cuda.py"
cp "${root}/tests/gpu/pytorch_test_cuda_conftest.py" "${work}/conftest.py"
cd "${work}"
export GMLAKE_CACHE_DIR="${GMLAKE_CACHE_DIR:-$(mktemp -d /tmp/gmlake-door-cache.XXXXXX)}"
unset GMLAKE_CONF GMLAKE_TORCH_DOOR PYTORCH_CUDA_ALLOC_CONF
args=(-m pytest test_cuda.py -q -p no:cacheprovider -rN --tb=short)
"${PY}" -c "import pytest_timeout" 2>/dev/null && args+=(--timeout=180)
[[ -n "${1:-}" ]] && args+=(-k "$1")
t0=$SECONDS
OUTCOMES_FILE="${work}/native.jsonl" timeout "${TIMEOUT:-540}" "${PY}" "${args[@]}" > native.log 2>&1
echo "native: $(tail -1 native.log) ($((SECONDS - t0)) s)"
grep -m1 "^stand-ins:" native.log | cut -c1-600
t0=$SECONDS
OUTCOMES_FILE="${work}/gmlake.jsonl" GMLAKE_TORCH_DOOR=native timeout "${TIMEOUT:-540}" \
  "${GMLAKE_BIN}/gmlake" run --conf lake:embedded -- "${PY}" "${args[@]}" > gmlake.log 2>&1
echo "gmlake: $(tail -1 gmlake.log) ($((SECONDS - t0)) s)"
grep -m1 -E "PyTorch allocator door" gmlake.log | cut -c1-200
"${PY}" "${root}/tests/gpu/outcomes_table.py" native.jsonl gmlake.jsonl > table.md
rc=$?
cat table.md
# The logs and the table come back too, from the device tool's $OUT.
if [[ -n "${OUT:-}" ]]; then
  cp native.log gmlake.log table.md native.jsonl gmlake.jsonl "${OUT}/"
fi
exit "${rc}"
