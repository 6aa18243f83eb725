#!/usr/bin/env bash
# Copyright 2026 The GMLake Authors.
#
# Stages the build context of deploy/k8s/Containerfile in DIR: the built
# binaries (copied: bazel-bin is a link out of the checkout, which image
# builders do not follow), the sample flags and the docs.
#
#   bazel build --config=ci //daemon:gmlaked //tools:gmlakectl
#   deploy/k8s/stage_image.sh DIR
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin_dir="${GMLAKE_BIN_DIR:-${root}/bazel-bin}"
out="$1"
for b in "${bin_dir}/daemon/gmlaked" "${bin_dir}/tools/gmlakectl"; do
  if [[ ! -x "${b}" ]]; then
    echo "stage_image.sh: ${b} is missing: run" \
      "bazel build --config=ci //daemon:gmlaked //tools:gmlakectl first" >&2
    exit 1
  fi
done
mkdir -p "${out}/bin" "${out}/doc"
cp -L "${bin_dir}/daemon/gmlaked" "${bin_dir}/tools/gmlakectl" "${out}/bin/"
cp "${root}/deploy/gmlaked.flags" "${out}/gmlaked.flags"
cp "${root}/docs/daemon.md" "${root}/README.md" "${out}/doc/"
echo "stage_image.sh: context in ${out}; now docker build -f" \
  "deploy/k8s/Containerfile -t REGISTRY/gmlake/gmlaked:TAG ${out}" >&2
