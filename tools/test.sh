#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test
# (bazel test //...), then prints one line: "N passed, N failed" (test cases
# of this invocation only, from the reports its build event file names;
# tools/test_results.py), after "N skipped (...)" when tests skipped (GPU
# tests without a GPU). Exit code: bazel's (0 when all passed).
# Extra arguments go to bazel test, e.g. --config=asan.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh || exit 1
config=()
[ -n "${CI:-}" ] && config=(--config=ci)
events=$(mktemp /tmp/gmlake-test-events.XXXXXX)
trap 'rm -f "$events"' EXIT
bazel test "${config[@]}" "$@" --build_event_json_file="$events" //... 2>&1
rc=$?
python3 tools/test_results.py "$events" "$rc"
exit $rc
