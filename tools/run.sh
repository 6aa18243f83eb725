#!/usr/bin/env bash
# GMLake's main job: installs what is missing, builds, and replays the real
# training and inference traces in ../shared/traces through the stitching
# allocator, printing what it needed beside what PyTorch needed (on the GPU
# when there is one, else on the host backend).
# Extra arguments go to gmlake-replay (e.g. --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
config=()
[ -n "${CI:-}" ] && config=(--config=ci)
echo "gmlake: building (bazel build //tools:gmlake-replay) ..." >&2
bazel build "${config[@]}" --noshow_progress //tools:gmlake-replay >&2
backend=host
if [ -e /dev/nvidiactl ] || ldconfig -p 2>/dev/null | grep -q libcuda.so.1; then
  backend=auto
fi
traces=${GMLAKE_TRACES:-../shared/traces}
echo "gmlake: replaying $traces on the $backend backend" >&2
exec ./bazel-bin/tools/gmlake-replay --backend="$backend" --capacity \
  --baseline="$traces/baselines.json" "$@" "$traces"
