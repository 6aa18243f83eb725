# Copyright 2026 The GMLake Authors.
"""The launcher: GMLake in every Python process of a command, unedited.

`gmlake run -- CMD` (and `python -m gmlake ...`) starts CMD with
GMLAKE_ENABLE=1 and gmlake/_boot first on PYTHONPATH. Python runs the
sitecustomize found there at start-up in CMD and in every process it starts
(torchrun's ranks, multiprocessing's spawned workers: they inherit the
environment); it arms a hook that enables GMLake right after `import torch`
finishes, before the script's next line can touch CUDA. A process that never
imports torch (torchrun's own agent does, but never allocates) opens no lake:
the lake opens at the first CUDA allocation. The sitecustomize this one
shadows (Debian's, a user's) still runs.
"""
import argparse
import os
import sys

from . import _lib

ENV_ENABLE = "GMLAKE_ENABLE"
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")


def child_env(environ, conf=None):
    """`environ` with GMLake switched on for the processes started with it."""
    env = dict(environ)
    if conf is not None:
        env["GMLAKE_CONF"] = conf
    env[ENV_ENABLE] = "1"
    boot = os.path.realpath(BOOT_DIR)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.realpath(p) != boot]
    env["PYTHONPATH"] = os.pathsep.join([BOOT_DIR] + rest)
    return env


def arm():
    """Enables GMLake in this process as soon as torch is imported."""
    from . import _hook
    _hook.when_imported("torch", _enable_now)


def _enable_now(unused_torch):
    from . import _torch
    try:
        _torch.enable(open_lake_now=False)
    except _lib.GMLakeError as e:
        # The import of torch fails with it: running on without GMLake would
        # hide that the launcher did not do its job.
        raise _lib.GMLakeError(f"{e} (enabling GMLake at `import torch`, as "
                               f"{ENV_ENABLE}=1 asks)") from e


def _check_conf(conf):
    from . import _torch
    try:
        _torch.check_conf(conf)
    except _lib.GMLakeError as e:
        print(e, file=sys.stderr)
        raise SystemExit(2)


def _exec(command, env):
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        print(f"gmlake run: cannot run {command[0]!r}: {e.strerror}",
              file=sys.stderr)
        raise SystemExit(127)


def _run(args):
    command = args.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("gmlake run: no command given; e.g. gmlake run -- torchrun "
              "--nproc_per_node 8 train.py", file=sys.stderr)
        return 2
    _check_conf(args.conf)
    _exec(command, child_env(os.environ, args.conf))
    return 0  # not reached


def _env(args):
    _check_conf(args.conf)
    env = child_env(os.environ, args.conf)
    for key in ("GMLAKE_CONF", ENV_ENABLE, "PYTHONPATH"):
        if key in env:
            print(f"export {key}={_shell_quote(env[key])}")
    return 0


def _shell_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def parser(prog="gmlake"):
    p = argparse.ArgumentParser(
        prog=prog,
        description="Runs a command with GMLake as PyTorch's CUDA allocator in "
        "every Python process it starts, without editing it.")
    sub = p.add_subparsers(dest="verb", required=True)
    run = sub.add_parser(
        "run", help="run COMMAND with GMLake enabled",
        description="e.g. gmlake run -- torchrun --nproc_per_node 8 train.py")
    run.add_argument("--conf", help="GMLAKE_CONF for the command "
                     "(docs/tuning.md); default: the environment's")
    run.add_argument("command", nargs=argparse.REMAINDER,
                     help="the command and its arguments (after --)")
    run.set_defaults(fn=_run)
    env = sub.add_parser("env", help="print the environment that enables "
                         "GMLake, as shell exports")
    env.add_argument("--conf")
    env.set_defaults(fn=_env)
    return p


def main(argv=None):
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    return args.fn(args)
