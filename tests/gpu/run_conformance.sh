#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# Runs the cuda backend's tests on the GPU machine, from the bundle that
# tests/gpu/build_bundle.sh made in .gpu/ (see docs/gpu.md). Run from the
# repository root:
#   bash tests/gpu/run_conformance.sh
# Prints the GPU and driver, runs each test binary with
# --gtest_output=json:$OUT/<name>.json (OUT defaults to a fresh directory
# under /tmp), prints PASS/FAIL/SKIP per test, the backend's one-line
# description (driver, devices, granularity) and the call timings, and ends
# with "N passed, N failed, N skipped". Exit status: 0 when every binary
# passed, 1 otherwise.
#
# GMLAKE_GPU_TESTS="a b" runs those binaries of .gpu/bin instead of the
# default two; GMLAKE_GPU_TEST_TIMEOUT (seconds, default 150) bounds each.
set -uo pipefail

root="$(pwd)"
bundle="${root}/.gpu"
if [[ ! -d "${bundle}/bin" ]]; then
  echo "run_conformance: no ${bundle}/bin; run tests/gpu/build_bundle.sh first" >&2
  exit 1
fi
OUT="${OUT:-$(mktemp -d /tmp/gmlake-gpu.XXXXXX)}"
mkdir -p "${OUT}"
tests=(${GMLAKE_GPU_TESTS:-cuda_backend_test vmm_conformance_cuda_test})
per_test_timeout="${GMLAKE_GPU_TEST_TIMEOUT:-150}"

echo "== machine: $(uname -srm), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"), $(ldd --version 2>&1 | head -1)"
echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "== nvidia-smi -L"
nvidia-smi -L || echo "(nvidia-smi failed)"
echo "== driver: $(nvidia-smi --query-gpu=driver_version,name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
echo "== bundle"
cat "${bundle}/MANIFEST" 2>/dev/null | head -3

export LD_LIBRARY_PATH="${bundle}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
# The conformance suite starts the peer binary by path (outside Bazel there
# are no runfiles).
export GMLAKE_VMM_PEER="${bundle}/bin/vmm_peer"
# Keep multicast off, as the machine's notes ask, for anything we start.
export NCCL_NVLS_ENABLE=0

# Prints one line per test of a gtest JSON report, then the backend
# description and timings recorded as properties.
report() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
props = {}
for suite in r.get("testsuites", []):
    for t in suite.get("testsuite", []):
        name = f'{suite["name"]}.{t["name"]}'
        if t.get("failures"):
            v = "FAIL"
        elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
            v = "SKIP"
        else:
            v = "PASS"
        counts[v] += 1
        print(f"  {v}  {name}  ({t.get('time', '?')})")
        for f in t.get("failures", []):
            print("        " + f.get("failure", "").replace("\n", "\n        ")[:2000])
        for k, val in t.items():
            if k == "backend" or k.startswith("us_"):
                props[k] = val
if "backend" in props:
    print("  seen: " + props.pop("backend"))
if props:
    print("  mean us per call: " + ", ".join(f"{k[3:]} {v}" for k, v in props.items()))
print("  COUNTS %d %d %d" % (counts["PASS"], counts["FAIL"], counts["SKIP"]))
PY
}

total_pass=0 total_fail=0 total_skip=0 failed_bins=()
for t in "${tests[@]}"; do
  bin="${bundle}/bin/${t}"
  echo
  echo "== ${t}"
  if [[ ! -x "${bin}" ]]; then
    echo "  FAIL  ${t}: not in the bundle"
    failed_bins+=("${t}"); total_fail=$((total_fail + 1)); continue
  fi
  start_ns=$(date +%s%N)
  timeout "${per_test_timeout}" "${bin}" --gtest_output="json:${OUT}/${t}.json" \
    > "${OUT}/${t}.log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start_ns) / 1000000))
  grep -E '^\[ (INFO|TIMING) ' "${OUT}/${t}.log" | awk '!seen[$0]++' | sed 's/^/  /'
  if [[ -f "${OUT}/${t}.json" ]]; then
    summary="$(report "${OUT}/${t}.json")"
    echo "${summary}" | grep -v '^  COUNTS'
    read -r p f s < <(echo "${summary}" | awk '/^  COUNTS/ {print $2, $3, $4}')
    p=${p:-0} f=${f:-1} s=${s:-0}
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + s))
  else
    echo "  (no JSON report; the last lines of its output:)"
    tail -40 "${OUT}/${t}.log" | sed 's/^/  | /'
    total_fail=$((total_fail + 1))
  fi
  echo "  exit ${rc} after ${ms} ms"
  [[ ${rc} -eq 0 ]] || failed_bins+=("${t}")
done

echo
echo "== ${total_pass} passed, ${total_fail} failed, ${total_skip} skipped"
if [[ ${#failed_bins[@]} -gt 0 ]]; then
  echo "== failing binaries: ${failed_bins[*]} (full logs in ${OUT})"
  exit 1
fi
exit 0
