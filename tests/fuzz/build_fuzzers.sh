#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (libFuzzer needs clang's coverage
# instrumentation; the rest of the tree builds with gcc), with
# AddressSanitizer and UndefinedBehaviorSanitizer, against Debian's gRPC,
# Protobuf and Abseil. Run by the genrule //tests/fuzz:fuzzers.
#
#   build_fuzzers.sh GENDIR OUTDIR SOURCE...
#
# Every *_fuzzer.cc among the sources becomes OUTDIR/<name>; every other .cc
# is code under test, compiled once and linked into each.
set -euo pipefail
gendir=$1
outdir=$2
shift 2
cxx=${FUZZ_CXX:-clang++-14}
command -v "$cxx" >/dev/null || cxx=clang++
if ! command -v "$cxx" >/dev/null; then
  echo "build_fuzzers.sh: clang++ is missing (bash tools/install_deps.sh installs clang)" >&2
  exit 1
fi
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -I. -I"$gendir"
  -fsanitize=address,undefined -fno-sanitize=vptr
  -fno-sanitize-recover=undefined -Wno-unused-command-line-argument)
objdir=$(mktemp -d)
trap 'rm -rf "$objdir"' EXIT
libs=()
fuzzers=()
for src in "$@"; do
  case "$src" in
    *_fuzzer.cc) fuzzers+=("$src") ;;
    *.cc) libs+=("$src") ;;
  esac
done
# Code under test: coverage-instrumented for the fuzzer, two at a time.
running=0
for src in "${libs[@]}"; do
  "$cxx" "${flags[@]}" -fsanitize=fuzzer-no-link -c "$src" \
    -o "$objdir/$(echo "$src" | tr / _).o" &
  running=$((running + 1))
  if ((running >= 2)); then
    wait -n
    running=$((running - 1))
  fi
done
while ((running > 0)); do
  wait -n
  running=$((running - 1))
done
link=$(pkg-config --libs grpc++ protobuf absl_status absl_statusor \
  absl_strings absl_str_format absl_synchronization absl_time \
  absl_flat_hash_map absl_hash absl_random_random)
for f in "${fuzzers[@]}"; do
  name=$(basename "$f" .cc)
  "$cxx" "${flags[@]}" -fsanitize=fuzzer "$f" "$objdir"/*.o $link -pthread \
    -o "$outdir/$name"
done
