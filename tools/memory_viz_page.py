#!/usr/bin/env python3
# Copyright 2026 The GMLake Authors.
"""Opens a snapshot pickle in PyTorch's memory_viz, offline, and optionally
takes a headless-Chromium screenshot of it.

memory_viz is PyTorch's page (torch/utils/viz/MemoryViz.js, the one behind
pytorch.org/memory_viz); GMLake does not ship it. Give its path from a
PyTorch 2.x installation. It imports d3 from a CDN; this page gives it
Debian's d3 5 (node-d3) instead, so nothing is fetched.

    python3 tools/memory_viz_page.py SNAPSHOT.pickle \\
        --memory_viz .../torch/utils/viz/MemoryViz.js \\
        [--view 'Active Memory Timeline'] [--html page.html] [--png shot.png]

On a machine with PyTorch, the same page without this script:
torch.cuda._memory_viz.trace_plot(pickle.load(open(SNAPSHOT, 'rb'))).
"""
import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile

VIEWS = ("Active Memory Timeline", "Allocator State History",
         "Active Cached Segment Timeline")


def page(snapshot_bytes, memory_viz_js, d3_js, view):
    # memory_viz decodes base64 in whole 3-byte groups, unpadded.
    data = snapshot_bytes + b"\0" * (-len(snapshot_bytes) % 3)
    files = json.dumps([{"name": "snapshot.pickle",
                         "base64": base64.b64encode(data).decode()}])
    js = memory_viz_js
    # Its CDN imports become the d3 5 loaded by the first script.
    js = re.sub(r'^import \* as d3 from .*$', "const d3 = window.d3;", js,
                flags=re.M)
    js = re.sub(r'^import \{([^}]*)\} from .*$',
                lambda m: f"const {{{m.group(1)}}} = window.d3;", js, flags=re.M)
    js = js.replace("export function", "function")
    if "import " in js.split("const schemeTableau10")[0].replace("'use strict';", ""):
        raise SystemExit("memory_viz_page: MemoryViz.js imports something new")
    # A page as tall as the window, so the views scroll inside themselves.
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><style>"
            "html, body {height: 100%; margin: 0}</style></head><body>\n"
            f"<script>{d3_js}</script>\n<script type='module'>\n{js}\n"
            f"add_local_files({files}, {json.dumps(view)});\n</script>\n"
            "</body></html>\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("snapshot")
    ap.add_argument("--memory_viz", required=True, help="MemoryViz.js")
    ap.add_argument("--d3", default="/usr/share/nodejs/d3/dist/d3.min.js",
                    help="d3 version 5 (Debian: node-d3)")
    ap.add_argument("--view", default=VIEWS[0], choices=VIEWS)
    ap.add_argument("--html", help="where to write the page")
    ap.add_argument("--png", help="screenshot with headless Chromium")
    ap.add_argument("--size", default="1400,900")
    args = ap.parse_args()
    with open(args.snapshot, "rb") as f:
        snap = f.read()
    html = page(snap, open(args.memory_viz).read(), open(args.d3).read(),
                args.view)
    path = args.html or os.path.join(tempfile.mkdtemp(), "memory_viz.html")
    with open(path, "w") as f:
        f.write(html)
    print(f"memory_viz_page: {path}")
    if args.png:
        shot = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
             "--hide-scrollbars", f"--window-size={args.size}",
             "--virtual-time-budget=20000", "--enable-logging=stderr",
             f"--screenshot={os.path.abspath(args.png)}", "file://" + path],
            capture_output=True, text=True, timeout=300)
        errors = [l for l in shot.stderr.splitlines()
                  if "CONSOLE" in l and ("Error" in l or "error" in l)]
        if shot.returncode != 0 or errors or not os.path.exists(args.png):
            sys.exit("memory_viz_page: Chromium: " + "\n".join(
                errors or shot.stderr.splitlines()[-5:]))
        print(f"memory_viz_page: {args.png}")


if __name__ == "__main__":
    main()
