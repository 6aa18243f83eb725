#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: what a chunk costs through gmlaked, call by call
# (common/vmm_export_bench.cc: by chunk size and threads), and growth
# through gmlaked against the embedded lake (tools/growth_bench_main.cc),
# on the cuda backend. Needs the bundle:
#   tests/gpu/build_bundle.sh //common:vmm_export_bench \
#       //tools:gmlake-growth-bench //daemon:gmlaked
# Results under $OUT: export_bench.txt, growth.json.
set -uo pipefail
OUT="${OUT:-$(mktemp -d /tmp/gmlake-costs.XXXXXX)}"
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH="${PWD}/.gpu/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
.gpu/bin/vmm_export_bench --backend=cuda --sizes_mib="${SIZES:-2,8,32,128}" \
  --threads="${THREADS:-1,4,16}" --bytes_mib="${BYTES_MIB:-4096}" |
  tee "${OUT}/export_bench.txt"
.gpu/bin/gmlake-growth-bench --backend=cuda --bytes="${GROWTH:-8GiB}" \
  --reps="${REPS:-2}" --gmlaked="${PWD}/.gpu/bin/gmlaked" --json |
  tee "${OUT}/growth.json"
