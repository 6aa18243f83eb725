#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# Checks that the native door (client/python/gmlake/_torch_allocator.cc)
# compiles against the torch headers tests/gpu/door_headers.sh packed on
# the GPU machine, as C++17 and C++20 (the door builds with the first that
# works there):
#   bash tests/door_syntax_check.sh DIR   (DIR: where door_headers.tgz and
#                                          door_headers_roots.txt are)
set -euo pipefail
dir="$1"
root="$(mktemp -d /tmp/door-headers.XXXXXX)"
tar xzf "${dir}/door_headers.tgz" -C "${root}"
read -r torch_dir cuda_include < "${dir}/door_headers_roots.txt"
inc="${root}${torch_dir}/include"
rc=0
for std in c++17 c++20; do
  if g++ -std="${std}" -fsyntax-only -Wall -I "${inc}" \
      -I "${inc}/torch/csrc/api/include" -I "${root}${cuda_include}" \
      -I client client/python/gmlake/_torch_allocator.cc; then
    echo "door: compiles as ${std}"
  else
    echo "door: does not compile as ${std}"
    rc=1
  fi
done
exit "${rc}"
