#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: gmlaked (cuda backend) killed with -9 and started
# again under two clients replaying traces, with nvidia-smi's used memory
# at each step (docs/daemon.md, "Restarts"):
#   1. chunks that only the dead daemon held (--precreate, free) are gone
#      with it: used memory falls by about that much at the kill;
#   2. the clients keep theirs, reconnect, are adopted, and finish;
#   3. a client killed while the daemon is down frees its chunks at once.
# Needs the bundle:
#   tests/gpu/build_bundle.sh //daemon:gmlaked //tools:gmlakectl \
#     //tests/integration:trace_client
# Exit 0 when all three held; the table goes to $OUT/restart.txt.
set -uo pipefail
root="$(pwd)"
OUT="${OUT:-$(mktemp -d /tmp/gmlake-gpu.XXXXXX)}"
export LD_LIBRARY_PATH="${root}/.gpu/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
bin="${root}/.gpu/bin"
dir="$(mktemp -d /tmp/gmlake-restart.XXXXXX)"
sock="${dir}/gmlaked.sock"
precreate_gib=12  # on device 0 (its free part is what only gmlaked holds)
report="${OUT}/restart.txt"
failed=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "${daemon:-}" ] && kill -9 "$daemon" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

used_mib() {  # device 0, after the driver settles
  sleep 2
  nvidia-smi --id=0 --query-gpu=memory.used --format=csv,noheader,nounits | tr -d ' '
}
ngpus=$(nvidia-smi -L | wc -l)
start_daemon() {  # $1: --precreate of device 0 (the others: none)
  local precreate="$1"
  for _ in $(seq 2 "$ngpus"); do precreate+=",0"; done
  "${bin}/gmlaked" --backend=cuda --capacity=16GiB --precreate="$precreate" \
    --socket="$sock" --fd_socket="${dir}/fd.sock" >>"${OUT}/gmlaked.log" 2>&1 &
  daemon=$!
  for _ in $(seq 600); do
    "${bin}/gmlakectl" --socket="$sock" --timeout=1s health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "gmlaked did not start; see ${OUT}/gmlaked.log"; exit 1
}
start_client() {  # $1: trace, $2: output file, $3: loops
  "${bin}/trace_client" --socket="$sock" --trace="traces/$1.trace.gz" \
    --loops="$3" --end=0.5 --event_sleep_us=1500 --progress_every=10000 \
    >"$2" 2>&1 &
  pids+=($!)
}
wait_for() {  # $1: file, $2: text
  for _ in $(seq 1200); do grep -q "$2" "$1" && return 0; sleep 0.1; done
  echo "no '$2' in $1:"; cat "$1"; return 1
}
say() { echo "$*" | tee -a "$report"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$report"
base=$(used_mib)
start_daemon "${precreate_gib}GiB"
# Loops so that both outlive the restart (~10 s in): lora_ckpt replays
# fast, ~3 s a loop.
start_client llama1b_lora_ckpt "${OUT}/client_a.txt" 20
start_client llama1b_infer "${OUT}/client_b.txt" 3
wait_for "${OUT}/client_a.txt" "ok progress" && wait_for "${OUT}/client_b.txt" "ok progress" || exit 1
"${bin}/gmlakectl" --socket="$sock" status | tee -a "$report"
before=$(used_mib)
# Read last, just before the kill: the clients keep leasing free chunks.
free_mib=$("${bin}/gmlakectl" --socket="$sock" status --json | python3 -c \
  'import json,sys; print(json.load(sys.stdin)["devices"][0]["free_bytes"] >> 20)')
kill -9 "$daemon"; wait "$daemon" 2>/dev/null
after_kill=$(used_mib)
start_daemon 0
wait_for "${OUT}/client_a.txt" "reconnected" && wait_for "${OUT}/client_b.txt" "reconnected" || failed=1
after_restart=$(used_mib)
"${bin}/gmlakectl" --socket="$sock" status | tee -a "$report"
wait_for "${OUT}/client_a.txt" "ok done" || failed=1
wait_for "${OUT}/client_b.txt" "ok done" || failed=1

# 3. A client killed while the daemon is down.
start_client llama1b_lora_ckpt "${OUT}/client_c.txt" 20
wait_for "${OUT}/client_c.txt" "ok progress" || exit 1
with_c=$(used_mib)
kill -9 "$daemon"; wait "$daemon" 2>/dev/null
kill -9 "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null
without_c=$(used_mib)
start_daemon 0

say "used MiB: at start ${base}; two clients mid-trace ${before}; after kill -9 of gmlaked ${after_kill}; after its restart ${after_restart}"
say "used MiB: third client mid-trace ${with_c}; after gmlaked and that client were killed ${without_c}"
freed=$((before - after_kill))
# gmlaked's free chunks of device 0 and its own CUDA context (~0.5 GiB).
# The clients go on leasing (from the driver now) between the two readings
# of used memory, so the fall is somewhat less than the free chunks.
if [ "$free_mib" -lt 1024 ] || [ "$freed" -lt $((free_mib * 3 / 4)) ]; then
  say "FAIL: the kill freed ${freed} MiB; gmlaked alone held ${free_mib} MiB of free chunks (want >= 1 GiB, 75% of it freed)"; failed=1
else
  say "ok: the kill freed ${freed} MiB: the ${free_mib} MiB of free chunks only gmlaked held, and its context"
fi
for f in "${OUT}"/client_[ab].txt; do
  line=$(grep -m1 "reconnected" "$f")
  adopted=$(sed -n 's/.*it adopted \([0-9]*\) of the \([0-9]*\) chunks.*/\1 \2/p' <<<"$line")
  read -r got held <<<"${adopted:-0 1}"
  if [ "$got" -eq 0 ] || grep -q "could not export" "$f"; then
    say "FAIL: $(basename "$f"): adopted ${got} of ${held} chunks: $(grep -m1 'could not export' "$f")"; failed=1
  else
    say "ok: $(basename "$f"): the restarted gmlaked adopted ${got} of the ${held} chunks it held"
  fi
done
# The new gmlaked's own CUDA context is ~0.5 GiB; a copy of what the
# clients hold (~10 GiB) would be far more.
if [ "$after_restart" -gt $((after_kill + 1024)) ]; then
  say "FAIL: the restart grew used memory by $((after_restart - after_kill)) MiB (adoption must not copy; gmlaked's context is ~0.5 GiB)"; failed=1
else
  say "ok: the restart grew used memory by $((after_restart - after_kill)) MiB: gmlaked's own context, no copy"
fi
if [ "$((with_c - without_c))" -lt 256 ]; then
  say "FAIL: killing the third client with gmlaked down freed only $((with_c - without_c)) MiB"; failed=1
else
  say "ok: killing the third client with gmlaked down freed $((with_c - without_c)) MiB"
fi
grep -h "ok done\|reconnected\|^err" "${OUT}"/client_[ab].txt | tee -a "$report"
[ "$failed" -eq 0 ] && say "restart_frees_memory: all held" || say "restart_frees_memory: FAILED"
exit "$failed"
