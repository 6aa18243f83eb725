#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine: packs the torch and CUDA headers the native door
# (client/python/gmlake/_torch_allocator.cc) includes, and only those, into
# ${OUT}/door_headers.tgz, so that the door can be syntax-checked on a
# machine without torch:
#   tar xzf door_headers.tgz -C /tmp/door_headers
#   bash tests/door_syntax_check.sh /tmp/door_headers
# Run from the repository root (carry [".gpu"] after tests/gpu/bundle_python.sh).
set -euo pipefail
source tests/gpu/wheel_venv.sh
read -r torch_dir cuda_include < <("${PY}" - <<'PY'
import os, torch
from gmlake import _door
d = os.path.dirname(torch.__file__)
print(d, _door._cuda_include(d))
PY
)
inc="${torch_dir}/include"
deps="$(mktemp)"
for std in c++20 c++17; do
  if g++ -std="${std}" -M -I "${inc}" -I "${inc}/torch/csrc/api/include" \
      -I "${cuda_include}" -I client client/python/gmlake/_torch_allocator.cc \
      > "${deps}.raw" 2>/dev/null; then
    break
  fi
done
# Every header outside the checkout and the compiler's own, as its path.
tr ' \\' '\n\n' < "${deps}.raw" | grep '^/' | grep -v -E '^/usr/(include|lib/gcc)/' | sort -u > "${deps}"
echo "${torch_dir} ${cuda_include}" > "${OUT}/door_headers_roots.txt"
tar czf "${OUT}/door_headers.tgz" -T "${deps}" 2>/dev/null
echo "door_headers: $(wc -l < "${deps}") headers, $(du -h "${OUT}/door_headers.tgz" | cut -f1)"
