#!/usr/bin/env bash
# GMLake's main job, on a fresh machine of this kind:
#   1. installs what is missing and builds gmlaked, gmlakectl, gmlake-replay;
#   2. starts gmlaked (on the GPU if there is one, else on the host backend)
#      with a lake of 1.05 x what three processes ever have live at once,
#      reclaiming idle caches before it creates chunks (--prefer_reclaim);
#   3. runs the lake-share demo through it: a trainer (llama1b full
#      fine-tuning), an inference engine and a LoRA job, each its own
#      process with its own allocator, busy in turns while the others idle
#      with their caches; prints its table and `gmlakectl status`;
#   4. replays every shipped trace through the allocator alone and prints
#      what it needed beside what PyTorch needed;
#   5. says where the figures are: memory over time for the demo and for
#      every trace replayed (SVG, in figures/ or $GMLAKE_FIGURES; open them
#      in a browser).
# Ctrl-C stops everything cleanly. Extra arguments go to step 4's
# gmlake-replay (e.g. --json). The traces are the repository's traces/;
# GMLAKE_TRACES=DIR replays another folder of them (with the three demo
# traces and a baselines.json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
config=()
[ -n "${CI:-}" ] && config=(--config=ci)
echo "gmlake: building gmlaked, gmlakectl, gmlake-replay ..." >&2
# Optimised (-c opt): the replay's timings and the demo's speed are the
# product's, not a debug build's.
bazel build "${config[@]}" -c opt --noshow_progress //daemon:gmlaked //tools:gmlakectl \
  //tools:gmlake-replay >&2
bin=bazel-bin
backend=host
if [ -e /dev/nvidiactl ] || ldconfig -p 2>/dev/null | grep -q libcuda.so.1; then
  backend=cuda
fi
traces=${GMLAKE_TRACES:-traces}
demo=("$traces/llama1b_full_ckpt.trace.gz" "$traces/llama1b_infer.trace.gz"
  "$traces/llama1b_lora_ckpt.trace.gz")

figures=${GMLAKE_FIGURES:-figures}
mkdir -p "$figures"
dir=$(mktemp -d /tmp/gml.XXXXXX)
daemon_pid=""
cleanup() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'echo "gmlake: interrupted" >&2; exit 130' INT TERM

plan=$("$bin/tools/gmlake-replay" --lake --lake_plan --progress=false "${demo[@]}")
capacity=$(echo "$plan" | sed 's/.*"capacity_bytes":\([0-9]*\).*/\1/')
"$bin/daemon/gmlaked" --backend="$backend" --socket="$dir/gmlaked.sock" \
  --fd_socket="$dir/fd.sock" --capacity="$capacity" --host_capacity=64GiB \
  --prefer_reclaim &
daemon_pid=$!
for _ in $(seq 100); do
  [ -S "$dir/gmlaked.sock" ] && break
  sleep 0.1
done

echo
"$bin/tools/gmlake-replay" --lake --lake_socket="$dir/gmlaked.sock" \
  --backend="$backend" --plot="$figures/lake-share.svg" "${demo[@]}"
echo
echo "gmlakectl status (the lake after the demo):"
"$bin/tools/gmlakectl" --socket="$dir/gmlaked.sock" status
kill -TERM "$daemon_pid"
wait "$daemon_pid" || true
daemon_pid=""

echo
echo "The allocator alone on every shipped trace ($backend backend):"
rbackend=$backend
[ "$backend" = cuda ] && rbackend=auto
"$bin/tools/gmlake-replay" --backend="$rbackend" --capacity \
  --baseline="$traces/baselines.json" --plot_dir="$figures" "$@" "$traces"
echo
echo "Figures of memory over time (SVG; open them in a browser):"
echo "  $figures/lake-share.svg  the demo: each process and the node"
for f in "$traces"/*.trace.gz; do
  name=$(basename "$f" .trace.gz)
  echo "  $figures/$name.svg"
done
