#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: PyTorch's own test/test_cuda.py tests of graphs, pools,
# memory stats and snapshots, run natively and through GMLake's native door
# (`gmlake run --`, embedded lake), each test's outcome side by side.
#
# The GPU machine has no network, so the tests travel from here: fetch
# test/test_cuda.py of the installed PyTorch (2.11) and keep the classes
# TestCuda, TestCudaMallocAsync, TestBlockStateAbsorption, TestMemPool and
# TestCudaOptims.test_graph_optims in .gpu/pytorch_tests/test_cuda_subset.py
# (ignored by git: PyTorch's code is not ours to commit). Then, with carry
# [".gpu"] after tests/gpu/bundle_python.sh:
#   bash tests/gpu/pytorch_test_cuda.sh [PYTEST -k EXPRESSION]
# Prints one line per test (native, gmlake) and the counts; exit status 0 when
# every test that passes natively passes under GMLake.
set -uo pipefail
root="$(pwd)"
src="${root}/.gpu/pytorch_tests/test_cuda_subset.py"
[[ -f "${src}" ]] || { echo "no ${src}: fetch PyTorch's test_cuda.py first (see the header)" >&2; exit 2; }
source tests/gpu/wheel_venv.sh
work="$(mktemp -d /tmp/gmlake-pttests.XXXXXX)"
# Named test_cuda.py: test_memory_snapshot looks for the file's name in the
# recorded stack frames.
cp "${src}" "${work}/test_cuda.py"
cd "${work}"
# expecttest is missing on the GPU machine: a stand-in travels beside the tests.
export PYTHONPATH="${root}/.gpu/pytorch_tests/shim"
export GMLAKE_CACHE_DIR="${GMLAKE_CACHE_DIR:-$(mktemp -d /tmp/gmlake-door-cache.XXXXXX)}"
unset GMLAKE_CONF GMLAKE_TORCH_DOOR PYTORCH_CUDA_ALLOC_CONF
args=(-m pytest test_cuda.py -q -p no:cacheprovider --timeout=180 -rN)
[[ -n "${1:-}" ]] && args+=(-k "$1")
t0=$SECONDS
timeout "${TIMEOUT:-540}" "${PY}" "${args[@]}" --junitxml=native.xml > native.log 2>&1
echo "native: $(tail -1 native.log) ($((SECONDS - t0)) s)"
t0=$SECONDS
GMLAKE_TORCH_DOOR=native timeout "${TIMEOUT:-540}" "${GMLAKE_BIN}/gmlake" run --conf lake:embedded -- \
  "${PY}" "${args[@]}" --junitxml=gmlake.xml > gmlake.log 2>&1
echo "gmlake: $(tail -1 gmlake.log) ($((SECONDS - t0)) s)"
grep -m1 -E "PyTorch allocator door" gmlake.log | cut -c1-200
"${PY}" "${root}/tests/gpu/junit_table.py" native.xml gmlake.xml
