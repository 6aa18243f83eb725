#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# Builds the GPU test binaries here and packs them, with the shared libraries
# they need, into .gpu/ (ignored by git) for the GPU machine, which has no
# Bazel and none of Debian's libraries (see docs/gpu.md):
#
#   .gpu/bin/<name>      every binary, flat (the label's name)
#   .gpu/lib/            every shared library ldd shows, except the C/C++
#                        runtime the GPU machine has itself (newer there)
#   .gpu/MANIFEST        targets, commit, build time, files
#
# Usage (from anywhere in the checkout):
#   tests/gpu/build_bundle.sh [EXTRA_TARGET ...]
# e.g. tests/gpu/build_bundle.sh //tools:gmlake-replay
# Extra targets must be cc_binary/cc_test rules; they land in .gpu/bin/ too.
# Then, on the GPU machine: bash tests/gpu/run_conformance.sh (with carry
# [".gpu"]), which runs the tests and prints where the extras are.
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"

# The tests the GPU run needs, and the peer binary the conformance suite
# starts in a second process (fork+exec) to import exported chunks.
targets=(
  //common:cuda_backend_test
  //tests:vmm_conformance_cuda_test
  //tests:vmm_peer
)
targets+=("$@")

bazel build --config=ci -c opt "${targets[@]}"

# Only what this script makes: .gpu/wheel (bundle_python.sh) and the
# fetched .gpu/pytorch_tests stay.
rm -rf .gpu/bin .gpu/lib .gpu/MANIFEST
mkdir -p .gpu/bin .gpu/lib

# Libraries left to the GPU machine's own system: the C library family and
# the compiler runtime (Ubuntu 24.04's are newer than Debian 12's, and
# backward compatible). Everything else (Abseil, gRPC, protobuf, our own
# _solib_k8 libraries) travels.
skip='^(linux-vdso|ld-linux|libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt)\.so'

label_to_path() {  # //pkg/sub:name -> bazel-bin/pkg/sub/name
  local label="$1" pkg name
  label="${label#//}"
  pkg="${label%%:*}"
  name="${label##*:}"
  [[ "${label}" == *:* ]] || name="${pkg##*/}"
  echo "bazel-bin/${pkg}/${name}"
}

for t in "${targets[@]}"; do
  bin="$(label_to_path "${t}")"
  if [[ ! -x "${bin}" ]]; then
    echo "build_bundle: ${t} did not produce an executable at ${bin}" >&2
    exit 1
  fi
  cp -L "${bin}" .gpu/bin/
  # ldd lines: "libfoo.so.1 => /path/libfoo.so.1 (0x...)"; a "not found"
  # here would be missing there too.
  if ldd "${bin}" | grep -q "not found"; then
    echo "build_bundle: ${bin} has unresolved libraries:" >&2
    ldd "${bin}" | grep "not found" >&2
    exit 1
  fi
  ldd "${bin}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    while read -r soname path; do
      if [[ "${soname}" =~ ${skip} ]]; then continue; fi
      [[ -e ".gpu/lib/${soname}" ]] || cp -L "${path}" ".gpu/lib/${soname}"
    done
done

# The libcuda check of cuda_backend_test: nothing may depend on it.
if for f in .gpu/bin/*; do ldd "$f"; done | grep -q libcuda; then
  echo "build_bundle: a binary links libcuda; it must be loaded with dlopen" >&2
  exit 1
fi

{
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(ldd --version | head -1)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ' (plus uncommitted changes)')"
  echo "targets: ${targets[*]}"
  (cd .gpu && find bin lib -type f | sort | xargs ls -l | awk '{print $5, $9}')
} > .gpu/MANIFEST

echo "build_bundle: $(ls .gpu/bin | wc -l) binaries, $(ls .gpu/lib | wc -l) libraries, $(du -sh .gpu | cut -f1) in .gpu/"
