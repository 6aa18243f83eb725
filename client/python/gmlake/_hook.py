# Copyright 2026 The GMLake Authors.
"""Runs a callback right after a module's first import has finished, before
the importing code runs its next line: how the launcher swaps PyTorch's
allocator after `import torch` and before any CUDA call."""
import importlib.abc
import importlib.util
import sys


class _AfterImport(importlib.abc.MetaPathFinder):

    def __init__(self, name, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        # A module is imported once: step aside (which also keeps the search
        # below from finding this finder again).
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module
        callback = self.callback

        def exec_module(module):
            run_module(module)
            callback(module)

        loader.exec_module = exec_module
        return spec


def when_imported(name, callback):
    """Calls callback(module) once `name` has been imported (now, if it was)."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    for finder in sys.meta_path:
        if isinstance(finder, _AfterImport) and finder.name == name:
            return
    sys.meta_path.insert(0, _AfterImport(name, callback))


def armed(name):
    """Whether a callback waits for `name`'s import."""
    return any(isinstance(f, _AfterImport) and f.name == name
               for f in sys.meta_path)
