#!/usr/bin/env bash
# Installs what building GMLake needs from Debian's archive, and nothing when
# it is all there already. Bazel 4.2.3 (WORKSPACE mode) with Debian's gRPC,
# Protobuf, Abseil and GoogleTest, and Clang 14 for the lock checker
# (--config=clang) and the fuzzers (tests/fuzz/, with pkg-config); never
# downloads anything else (docs/building.md). python3-venv, python3-wheel
# and patchelf build and test the wheel (packaging/).
set -euo pipefail
packages=(bazel-bootstrap bazel-rules-java libgrpc++-dev protobuf-compiler-grpc
  libprotobuf-dev protobuf-compiler libabsl-dev libgtest-dev libgmock-dev
  zlib1g-dev nlohmann-json3-dev g++ clang clang-14 pkg-config python3
  python3-yaml python3-venv python3-wheel patchelf)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "gmlake: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
