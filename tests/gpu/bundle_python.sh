#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# Here (no GPU): builds the wheel and packs what the Python GPU scripts need
# into .gpu/ (ignored by git), for the GPU machine (carry [".gpu"]):
#   .gpu/wheel/gmlake-*.whl   the wheel (bazel build -c opt //:wheel)
#   .gpu/workloads/*.py       workloads/ of the checkout
# The GPU machine needs nothing else of this machine: the wheel bundles
# libgmlake.so, gmlaked, gmlakectl and every library they load.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
bazel build --config=ci //:wheel
rm -rf .gpu/wheel
mkdir -p .gpu/wheel .gpu/workloads
cp bazel-bin/packaging/gmlake-*.whl .gpu/wheel/
cp workloads/*.py .gpu/workloads/
echo "bundle_python: $(ls .gpu/wheel) and $(ls .gpu/workloads | wc -l) workloads in .gpu/"
