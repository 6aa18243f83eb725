#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test
# (bazel test -c opt //...), then builds everything again with Clang's lock
# checker (--config=clang: -Wthread-safety as errors), and prints one line:
# "N passed, N failed" (test cases of this invocation only, from the
# reports its build event file names: tools/test_results.py; a failed Clang
# build counts as one failure), after "N skipped (...)" when tests skipped
# (GPU tests without a GPU). Exit code: bazel's (0 when all passed).
# Extra arguments go to bazel test, e.g. --config=asan.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh || exit 1
config=()
[ -n "${CI:-}" ] && config=(--config=ci)
events=$(mktemp /tmp/gmlake-test-events.XXXXXX)
trap 'rm -f "$events"' EXIT
# Optimised (-c opt) as users run it, which keeps the trace replays of the
# suite short; --config=asan/tsan set their own -O1 after it.
bazel test "${config[@]}" -c opt "$@" --build_event_json_file="$events" //... 2>&1
rc=$?
echo "gmlake: building everything with Clang's lock checker (--config=clang)"
# Unoptimised: the lock checker needs only the front end.
bazel build "${config[@]}" --config=clang -c fastbuild //... 2>&1
clang_rc=$?
if [ "$clang_rc" -ne 0 ]; then
  echo "gmlake: the Clang lock-checking build failed (exit $clang_rc): see its errors above"
  [ "$rc" -eq 0 ] && rc=$clang_rc
fi
python3 tools/test_results.py "$events" "$rc"
exit $rc
