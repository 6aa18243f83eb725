# Copyright 2026 The GMLake Authors.
"""python -m gmlake [--conf CONF] SCRIPT [ARGS...]
   python -m gmlake [--conf CONF] -m MODULE [ARGS...]
   python -m gmlake run [--conf CONF] -- COMMAND [ARGS...]   (as `gmlake run`)
   python -m gmlake env [--conf CONF]

Runs SCRIPT (or MODULE) as __main__ with GMLake as PyTorch's allocator, in
this process and in every Python process it starts."""
import os
import runpy
import sys

from . import _launcher

USAGE = __doc__


def _split_options(argv):
    """(conf, rest): --conf CONF / --conf=CONF before the script."""
    conf = None
    while argv:
        if argv[0] == "--conf" and len(argv) > 1:
            conf, argv = argv[1], argv[2:]
        elif argv[0].startswith("--conf="):
            conf, argv = argv[0][len("--conf="):], argv[1:]
        else:
            break
    return conf, argv


def main(argv):
    if argv and argv[0] in ("run", "env"):
        return _launcher.main(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 0 if argv else 2
    conf, argv = _split_options(argv)
    if not argv or argv == ["-m"]:
        print(USAGE, file=sys.stderr)
        return 2
    _launcher._check_conf(conf)
    env = _launcher.child_env(os.environ, conf)
    os.environ.update(env)
    _launcher.arm()
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        script = argv[0]
        if not os.path.exists(script):
            print(f"python -m gmlake: no such script: {script}", file=sys.stderr)
            return 2
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
