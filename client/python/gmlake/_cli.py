# Copyright 2026 The GMLake Authors.
"""Console entry points of the wheel: gmlaked and gmlakectl, bundled in
gmlake/bin with the libraries they need in gmlake/lib."""
import os
import sys


def _exec(name):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
    if not os.path.exists(path):
        print(f"gmlake: {name} is not part of this installation (no {path}); "
              "it comes with the gmlake wheel (bazel build -c opt //:wheel), or run "
              f"the checkout's bazel-bin binary", file=sys.stderr)
        raise SystemExit(127)
    os.execv(path, [path] + sys.argv[1:])


def gmlaked():
    _exec("gmlaked")


def gmlakectl():
    _exec("gmlakectl")


def gmlake():
    from . import _launcher
    raise SystemExit(_launcher.main())
