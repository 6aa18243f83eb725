#!/usr/bin/env bash
# A bounded libFuzzer run of one target from its seed corpus (a copy: the
# corpus in the tree stays as it is). Passes when the fuzzer found nothing
# within FUZZ_SECONDS (default 20); otherwise prints the fuzzer's report
# and the input that failed, as hex, to add under tests/fuzz/crashes/.
#
#   run_fuzzer.sh FUZZER SEED_DIR
set -uo pipefail
fuzzer=$1
seeds=$2
seconds=${FUZZ_SECONDS:-20}
work=${TEST_TMPDIR:-$(mktemp -d)}
artifacts=${TEST_UNDECLARED_OUTPUTS_DIR:-$work}
mkdir -p "$work/corpus"
cp "$seeds"/* "$work/corpus/" 2>/dev/null || true
log="$work/fuzz.log"
"$fuzzer" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
  -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$work/corpus" >"$log" 2>&1
rc=$?
name=$(basename "$fuzzer")
if ((rc == 0)); then
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  echo "$name: nothing found in ${seconds}s (${execs:-?} inputs run)"
  exit 0
fi
echo "$name: FAILED (exit $rc); the fuzzer's report:"
tail -n 80 "$log"
for f in "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* \
         "$artifacts"/oom-*; do
  [ -f "$f" ] || continue
  echo "input $(basename "$f") (add it under tests/fuzz/crashes/ and fix):"
  od -An -tx1 -v "$f" | head -n 64
done
exit 1
