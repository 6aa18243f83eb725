# Copyright 2026 The GMLake Authors.
#
# Sourced by tests/gpu/colocate_bench.sh. Its OUT folder, used again (a
# warm machine keeps /tmp between calls), starts over: the turn counters
# and status lines are appended to, and colocate_table.py reads any
# turnstats file without a result line as a run killed at its limit.
# Files the caller put there itself stay.
clear_bench_out() {  # OUT
  local out="$1" f
  for f in "${out}"/turnstats_*.jsonl "${out}"/status_*.json \
    "${out}"/pair_*.log "${out}"/gmlaked_*.log "${out}"/status.txt \
    "${out}"/plain_after.txt "${out}"/colocate.jsonl; do
    [[ -f "${f}" ]] && rm -f "${f}"
  done
  return 0
}
