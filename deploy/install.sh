#!/usr/bin/env bash
# Copyright 2026 The GMLake Authors.
#
# Installs gmlaked from a build of this checkout (docs/daemon.md,
# "Operations"):
#
#   bazel build --config=ci //daemon:gmlaked //tools:gmlakectl
#   sudo deploy/install.sh
#   sudo systemctl daemon-reload && sudo systemctl enable --now gmlaked
#
# What goes where (DESTDIR=DIR installs under DIR instead of /, for
# packaging and tests):
#   /usr/local/bin/gmlaked, /usr/local/bin/gmlakectl
#   /etc/gmlake/gmlaked.flags          kept if it exists (the new sample
#                                      goes to gmlaked.flags.new)
#   /etc/systemd/system/gmlaked.service
#   /usr/local/share/doc/gmlake/       daemon.md (the unit's
#                                      Documentation=), README.md
#
# Upgrading is the same command, then `systemctl restart gmlaked`.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
destdir="${DESTDIR:-}"
bin_dir="${GMLAKE_BIN_DIR:-${root}/bazel-bin}"

for b in "${bin_dir}/daemon/gmlaked" "${bin_dir}/tools/gmlakectl"; do
  if [[ ! -x "${b}" ]]; then
    echo "install.sh: ${b} is missing: run" \
      "bazel build --config=ci //daemon:gmlaked //tools:gmlakectl first" >&2
    exit 1
  fi
done

install -d "${destdir}/usr/local/bin" "${destdir}/etc/gmlake" \
  "${destdir}/etc/systemd/system" "${destdir}/usr/local/share/doc/gmlake"
install -m 0755 "${bin_dir}/daemon/gmlaked" "${bin_dir}/tools/gmlakectl" \
  "${destdir}/usr/local/bin/"
if [[ -e "${destdir}/etc/gmlake/gmlaked.flags" ]]; then
  install -m 0644 "${root}/deploy/gmlaked.flags" \
    "${destdir}/etc/gmlake/gmlaked.flags.new"
  echo "install.sh: kept /etc/gmlake/gmlaked.flags; the new sample is" \
    "gmlaked.flags.new beside it" >&2
else
  install -m 0644 "${root}/deploy/gmlaked.flags" \
    "${destdir}/etc/gmlake/gmlaked.flags"
fi
install -m 0644 "${root}/deploy/gmlaked.service" \
  "${destdir}/etc/systemd/system/gmlaked.service"
install -m 0644 "${root}/docs/daemon.md" "${root}/README.md" \
  "${destdir}/usr/local/share/doc/gmlake/"
echo "install.sh: installed under ${destdir:-/}; now: systemctl daemon-reload" \
  "&& systemctl enable --now gmlaked (or restart, to upgrade)" >&2
