# Copyright 2026 The GMLake Authors.
#
# Sourced by tests/gpu/colocate_bench.sh. Its OUT folder, used again (a
# warm machine keeps /tmp between calls), starts over: the turn counters
# and status lines are appended to, and colocate_table.py reads any
# turnstats file without a result line as a run killed at its limit.
# Files the caller put there itself stay.
clear_bench_out() {  # OUT
  rm -f -- "$1"/turnstats_*.jsonl "$1"/status_*.json "$1"/pair_*.log \
    "$1"/gmlaked_*.log "$1"/status.txt "$1"/plain_after.txt "$1"/colocate.jsonl \
    "$1"/watch.log
}
