#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# Checks that every entry point in common/cuda_driver.h is asked from the
# driver with the ABI version whose prototype cuda.h declares: for each
# X(name, version) pair, decltype(&::name) must be the toolkit's
# PFN_<name>_v<version> typedef from <cudaTypedefs.h>. A wrong pair would make
# cuGetProcAddress hand back a function with another signature (e.g.
# cuCtxSynchronize, which takes a context since CUDA 13.0), which crashes or
# corrupts at run time only on a GPU machine; this catches it at CI time.
set -euo pipefail

CUDA_INCLUDE="${CUDA_INCLUDE:-/usr/local/cuda/include}"
if [[ ! -f "${CUDA_INCLUDE}/cudaTypedefs.h" ]]; then
  echo "SKIP: ${CUDA_INCLUDE}/cudaTypedefs.h not found (no CUDA toolkit headers)"
  exit 0
fi
CXX="${CXX:-c++}"

# The header as Bazel placed it in the runfiles tree (or the checkout when
# run by hand from the repository root).
root="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}"
if [[ ! -f "${root}/common/cuda_driver.h" ]]; then root="$(pwd)"; fi
header="${root}/common/cuda_driver.h"

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
cat > "${tmp}/abi_check.cc" <<CC
#include <type_traits>
#include <cudaTypedefs.h>
#include "common/cuda_driver.h"
#define GMLAKE_CHECK_ABI(name, v)                                       \\
  static_assert(std::is_same<decltype(&::name), PFN_##name##_v##v>::value, \\
                #name ": cuda.h's prototype is not the ABI of CUDA " #v);
GMLAKE_CUDA_DRIVER_ENTRY_POINTS(GMLAKE_CHECK_ABI)
GMLAKE_CUDA_DRIVER_OPTIONAL_ENTRY_POINTS(GMLAKE_CHECK_ABI)
// cuGetProcAddress itself is found with dlsym as cuGetProcAddress_v2.
static_assert(std::is_same<decltype(&::cuGetProcAddress),
                           PFN_cuGetProcAddress_v12000>::value,
              "cuGetProcAddress is not cuGetProcAddress_v2");
int main() { return 0; }
CC
"${CXX}" -std=c++17 -fsyntax-only -I"${root}" -isystem "${CUDA_INCLUDE}" \
  "${tmp}/abi_check.cc"
n=$(grep -cE '^  X\(cu[A-Za-z0-9_]+, [0-9]+\)' "${header}")
echo "PASS: ${n} entry points of cuda_driver.h match cudaTypedefs.h"
