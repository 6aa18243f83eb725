#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: gmlaked on the cuda backend, as an operator runs it.
#   1. health: gmlakectl health exits 0 while gmlaked serves;
#   2. a client leases 4 GiB (2048 chunks, each exported on demand) and
#      exits; the daemon holds no descriptor per chunk; the memory stays
#      created (the driver's used memory shows it) until --release_idle
#      (3 s here), then
#      goes back to the driver: created bytes fall to 0 and nvidia-smi's
#      used memory returns to where it was;
#   3. the metrics endpoint serves the same books;
#   4. SIGTERM: exit 0, the driver has all back (its context too), health
#      exits 1.
# Prints one PASS/FAIL line per check and exits 1 if any failed. Needs the
# bundle:
#   tests/gpu/build_bundle.sh //daemon:gmlaked //tools:gmlakectl \
#       //tests/integration:lake_client
set -uo pipefail
root="$(pwd)"
export LD_LIBRARY_PATH="${root}/.gpu/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
dir="$(mktemp -d /tmp/gml.ops.XXXXXX)"
sock="${dir}/gmlaked.sock"
ctl() { .gpu/bin/gmlakectl --socket="${sock}" --timeout=5s "$@"; }
failed=0
check() {  # check NAME CONDITION-EXIT-CODE DETAIL
  if [[ "$2" == 0 ]]; then echo "PASS $1 ($3)"; else echo "FAIL $1 ($3)"; failed=1; fi
}
used_mib() { nvidia-smi --id=0 --query-gpu=memory.used --format=csv,noheader,nounits | tr -d ' '; }
created() { ctl status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["devices"][0]["created_bytes"])'; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
.gpu/bin/gmlaked --backend=cuda --capacity=8GiB --release_idle=3s \
  --metrics_address=127.0.0.1:0 --socket="${sock}" --fd_socket="${dir}/fd.sock" \
  2> "${dir}/log" &
daemon=$!
for _ in $(seq 100); do ctl health >/dev/null 2>&1 && break; sleep 0.2; done
ctl health; check health_serving $? "gmlakectl health"
base=$(used_mib)

# 2048 chunks of 2 MiB; the client answers one line per command.
{ echo "acquire 0 2048"; sleep 2; echo "quit"; } |
  .gpu/bin/lake_client --socket="${sock}" --name=ops-check > "${dir}/client" 2>&1
grep -q "^ok" "${dir}/client"; check lease_4GiB $? "$(tr '\n' ' ' < "${dir}/client")"
c=$(created); held=$(used_mib)
[[ "${c}" == 4294967296 ]]; check held_after_exit $? "created ${c} bytes right after the client exited"
[[ $((held - base)) -ge 4000 ]]; check driver_shows_it $? "used ${base} -> ${held} MiB"
ctl status | sed -n '/held, and why/,$p'
# --export_on_demand: 2048 chunks held, yet no descriptor per chunk.
fds=$(ls "/proc/${daemon}/fd" | wc -l)
[[ "${fds}" -lt 512 ]]; check descriptors_not_per_chunk $? "${fds} open while holding 2048 chunks"

url=$(grep -o 'http://[^ ]*/metrics' "${dir}/log")
python3 - "$url" <<'PY'; check metrics $? "scraped ${url}"
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
line = [l for l in text.splitlines() if l.startswith('gmlake_info{')]
print(line[0] if line else "no gmlake_info")
sys.exit(0 if line and 'backend="cuda"' in line[0] else 1)
PY

# Released within the idle time plus the daemon's 1 s round, generously.
for _ in $(seq 60); do [[ "$(created)" == 0 ]] && break; sleep 0.5; done
c=$(created); after=$(used_mib)
[[ "${c}" == 0 ]]; check released_to_driver $? "created ${c} bytes after --release_idle=3s"
# The daemon's own CUDA context (~0.5 GiB) stays while it runs: the 4 GiB
# must come back now, and the context at the daemon's exit (below).
[[ $((held - after)) -ge 4000 ]]; check driver_has_it_back $? "used ${base} -> ${held} -> ${after} MiB (the rest is gmlaked's CUDA context)"
# The log line follows the zeroing and the release (outside the lock).
for _ in $(seq 40); do grep -q "(--release_idle)" "${dir}/log" && break; sleep 0.25; done
grep "(--release_idle)" "${dir}/log" | tail -1

kill -TERM "${daemon}"; wait "${daemon}"; check sigterm_exit $? "gmlaked exit code"
stopped=$(used_mib)
[[ $((stopped - base)) -le 256 ]]; check driver_has_all_back $? "used ${base} before gmlaked, ${stopped} MiB after it stopped"
ctl health >/dev/null 2>&1; [[ $? == 1 ]]; check health_after_stop $? "gmlakectl health exits 1"
rm -rf "${dir}"
exit "${failed}"
