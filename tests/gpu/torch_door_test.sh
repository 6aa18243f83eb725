#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine (carry [".gpu"] after tests/gpu/bundle_python.sh here),
# from the repository root:
#   bash tests/gpu/torch_door_test.sh
# PyTorch's graph, pool, stats, cuDNN, IPC and reduce-overhead tests
# (tests/gpu/torch_door_test.py, each in its own process) three ways, from
# the wheel in a fresh venv:
#   native     PyTorch's own allocator
#   door       `gmlake run --`, the native door (a CUDAAllocator subclass
#              compiled here on first use: gmlake/_door.py)
#   pluggable  `gmlake run --` with GMLAKE_TORCH_DOOR=pluggable
#   daemon     the native door with its chunks leased from a gmlaked
#              (lake:daemon), as a node runs it
# Prints the start-up line of each door, one JSON line per test and run,
# and a table of all three; files in $OUT. Exit status 0 when every test
# that passes natively passes through the native door.
set -uo pipefail
root="$(pwd)"
source tests/gpu/wheel_venv.sh
OUT="${OUT:-$(mktemp -d /tmp/gmlake-door.XXXXXX)}"
export GMLAKE_CACHE_DIR="${GMLAKE_CACHE_DIR:-$(mktemp -d /tmp/gmlake-door-cache.XXXXXX)}"
TEST="${WORKLOADS}/torch_door_test.py"
cp "${root}/tests/gpu/torch_door_test.py" "${TEST}"
cd "${WORKLOADS}"
unset GMLAKE_CONF GMLAKE_TORCH_DOOR PYTORCH_CUDA_ALLOC_CONF
# The embedded lake: no gmlaked needed.
conf="lake:embedded"

# Builds the door once (the tests then find it cached) and shows the lines.
for door in native pluggable; do
  GMLAKE_TORCH_DOOR="${door}" timeout 600 gmlake run --conf "${conf}" -- "${PY}" -c \
    "import torch, gmlake._torch as t; torch.ones(1, device='cuda'); print('door in use:', t.door_in_use)" \
    > "${OUT}/startup_${door}.txt" 2>&1
  grep -E "PyTorch allocator door|door in use|rror" "${OUT}/startup_${door}.txt" | cut -c1-300
done

"${PY}" "${TEST}" --label native > "${OUT}/native.jsonl" 2>&1
grep '^{' "${OUT}/native.jsonl"
GMLAKE_TORCH_DOOR=native gmlake run --conf "${conf}" -- "${PY}" "${TEST}" --label door \
  > "${OUT}/door.jsonl" 2>&1
grep '^{' "${OUT}/door.jsonl"
GMLAKE_TORCH_DOOR=pluggable gmlake run --conf "${conf}" -- "${PY}" "${TEST}" --label pluggable \
  > "${OUT}/pluggable.jsonl" 2>&1
grep '^{' "${OUT}/pluggable.jsonl"

# The native door again, its chunks leased from a real gmlaked.
sockdir="$(mktemp -d /tmp/gmlake-door-sock.XXXXXX)"
"${GMLAKE_BIN}/gmlaked" --socket="${sockdir}/gmlaked.sock" --fd_socket="${sockdir}/fd.sock" \
  > "${OUT}/gmlaked.log" 2>&1 &
daemon=$!
for _ in $(seq 1 100); do [[ -S "${sockdir}/gmlaked.sock" ]] && break; sleep 0.1; done
GMLAKE_TORCH_DOOR=native gmlake run --conf "lake:daemon,socket:${sockdir}/gmlaked.sock" -- \
  "${PY}" "${TEST}" --label daemon > "${OUT}/daemon.jsonl" 2>&1
grep '^{' "${OUT}/daemon.jsonl"
"${GMLAKE_BIN}/gmlakectl" --socket="${sockdir}/gmlaked.sock" status | head -20
kill "${daemon}"; wait "${daemon}" 2>/dev/null
grep -E "leak|lost|crash|rror" "${OUT}/gmlaked.log" | head -5

"${PY}" "${TEST}" --table "${OUT}/native.jsonl" "${OUT}/door.jsonl" "${OUT}/pluggable.jsonl" \
  "${OUT}/daemon.jsonl" | tee "${OUT}/table.md"

# Every test that passes natively must pass through the native door.
"${PY}" - "${OUT}/native.jsonl" "${OUT}/door.jsonl" "${OUT}/daemon.jsonl" <<'EOF'
import json, sys
def load(p):
    return {r["test"]: r for r in (json.loads(l) for l in open(p) if l.startswith("{"))}
native = load(sys.argv[1])
status = 0
for path in sys.argv[2:]:
    door = load(path)
    bad = [t for t, r in native.items() if r["pass"] and not door.get(t, {}).get("pass")]
    print("DOOR", path.rsplit("/", 1)[-1], "PASS" if not bad else
          "FAIL (pass natively, fail through the door: %s)" % ", ".join(bad))
    status |= 1 if bad else 0
sys.exit(status)
EOF
