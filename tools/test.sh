#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test
# (bazel test //...), then prints one line: "N passed, N failed" (test cases,
# from every test's XML report). Exit code: bazel's (0 when all passed).
# Extra arguments go to bazel test, e.g. --config=asan.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh || exit 1
config=()
[ -n "${CI:-}" ] && config=(--config=ci)
bazel test "${config[@]}" "$@" //... 2>&1
rc=$?
# Count test cases from the XML reports of this run's tests.
passed=0
failed=0
while IFS= read -r xml; do
  read -r t f e < <(sed -n 's/.*<testsuites[^>]* tests="\([0-9]*\)" failures="\([0-9]*\)"[^>]* errors="\([0-9]*\)".*/\1 \2 \3/p' "$xml" | head -1)
  if [ -z "${t:-}" ]; then
    # A test that is not gtest: its exit code is the whole verdict.
    read -r t f < <(sed -n 's/.*<testsuite[^>]* tests="\([0-9]*\)" failures="\([0-9]*\)".*/\1 \2/p' "$xml" | head -1)
    e=0
  fi
  t=${t:-0}; f=${f:-0}; e=${e:-0}
  failed=$((failed + f + e))
  passed=$((passed + t - f - e))
done < <(find -L bazel-testlogs/ -name test.xml 2>/dev/null)
[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "$passed passed, $failed failed"
exit $rc
