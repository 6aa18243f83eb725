#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# The wheel as a user installs it: a fresh venv (no Bazel, no checkout on any
# path), pip install --no-index, then from a folder outside the checkout:
# import gmlake and load its library, allocate through it (host backend),
# the console scripts (gmlake, gmlaked, gmlakectl), and ldd of every bundled
# file resolving inside the wheel but for the C and C++ runtime.
# Usage: wheel_test.sh WHEEL
set -euo pipefail
wheel="$(readlink -f "$1")"
work="${TEST_TMPDIR:-$(mktemp -d)}/wheel_test"
rm -rf "${work}"
mkdir -p "${work}/elsewhere"
cd "${work}/elsewhere"
unset GMLAKE_LIB GMLAKE_CONF GMLAKE_ENABLE PYTHONPATH

python3 -m venv "${work}/venv"
"${work}/venv/bin/pip" install --no-index --no-cache-dir --quiet "${wheel}"
py="${work}/venv/bin/python"
# A sanitizer's runtime the bundled library needs loaded first (.bazelrc's
# tsan config), for the venv's interpreter and what it starts.
if [[ -n "${GMLAKE_TEST_PRELOAD:-}" ]]; then export LD_PRELOAD="${GMLAKE_TEST_PRELOAD}"; fi
site="$("${py}" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"

fail() { echo "wheel_test: FAIL: $*" >&2; exit 1; }

"${py}" - "${site}" <<'PY' || fail "the module from the venv"
import ctypes, os, sys
import gmlake
site = sys.argv[1]
assert gmlake.__file__.startswith(site), gmlake.__file__
path = gmlake.library_path()
assert path.startswith(os.path.realpath(site)), path
lib = gmlake._lib.load()
gmlake._lib.check(lib.gmlake_init(b"backend:host,lake:embedded,log:false"))
p = lib.gmlake_malloc(3 << 20, 0, 0)
assert p, gmlake._lib.last_error()
ctypes.memset(p, 7, 3 << 20)
assert gmlake.memory_stats(0)["allocated_bytes.all.current"] == 3 << 20
assert "embedded lake" in gmlake.describe()
print("wheel_test: module", gmlake.__version__, "library", path)
PY

out="$("${work}/venv/bin/gmlaked" --help 2>&1 || true)"
grep -q "Usage: gmlaked" <<<"${out}" || fail "gmlaked --help said: ${out}"
out="$("${work}/venv/bin/gmlakectl" --help 2>&1 || true)"
grep -q "Usage: gmlakectl" <<<"${out}" || fail "gmlakectl --help said: ${out}"
out="$("${work}/venv/bin/gmlakectl" --socket="${work}/none.sock" status 2>&1 || true)"
grep -q "none.sock" <<<"${out}" || fail "gmlakectl without a daemon said: ${out}"
"${work}/venv/bin/gmlake" run -- "${py}" -c \
  'import gmlake._hook as h, os; assert h.armed("torch"); assert os.environ["GMLAKE_ENABLE"] == "1"' \
  || fail "gmlake run"

# Every bundled file finds its libraries inside the wheel.
system='^(linux-vdso|ld-linux|libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt)\.so'
for f in "${site}"/gmlake/lib/*.so* "${site}"/gmlake/bin/*; do
  while read -r soname arrow target _; do
    [[ "${arrow}" == "=>" ]] || continue
    [[ "${soname}" =~ ${system} ]] && continue
    [[ "${target}" == "not" ]] && fail "${f}: ${soname} not found"
    [[ "$(readlink -f "${target}")" == "$(readlink -f "${site}")"/gmlake/lib/* ]] \
      || fail "${f}: ${soname} resolves outside the wheel: ${target}"
  done < <(ldd "${f}")
done
echo "wheel_test: PASS ($(ls "${site}"/gmlake/lib | wc -l) libraries in gmlake/lib)"
