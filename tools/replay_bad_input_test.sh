#!/usr/bin/env bash
# gmlake-replay as a new user meets it with files that are not traces: each
# is refused (exit 1) with the file, the line and what was expected.
set -uo pipefail
bin="${TEST_SRCDIR}/gmlake/tools/gmlake-replay"
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/bad.XXXXXX")
failures=0
# expect NAME PATTERN: gmlake-replay on $dir/NAME.trace.gz fails, and its
# stderr has PATTERN (a fixed string).
expect() {
  local err rc
  err=$("$bin" --progress=false "$dir/$1.trace.gz" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 1 ] || ! grep -qF -- "$2" <<<"$err"; then
    echo "FAIL $1: exit $rc, stderr: $err (wanted: $2)"
    failures=$((failures + 1))
  else
    echo "ok   $1: $(tail -1 <<<"$err")"
  fi
}
head -c 5000 /dev/urandom | tr -d '\n' | gzip >"$dir/garbage.trace.gz"
expect garbage "$dir/garbage.trace.gz:1: expected a '#' comment or 'ACTION ADDR SIZE STREAM'"
printf '# h\na 1 4096 0\na 1 4096 0\n' | gzip >"$dir/double.trace.gz"
expect double "$dir/double.trace.gz:3: 'a' allocates address 1, which line 2 allocated"
printf '# h\na 1 4096 0\nF 2 0 0\n' | gzip >"$dir/unknown_free.trace.gz"
expect unknown_free "$dir/unknown_free.trace.gz:3: 'F' frees address 2, which is not allocated"
printf '# h\n' | gzip >"$dir/empty.trace.gz"
expect empty "no allocations"
rm -rf "$dir"
exit $((failures > 0))
