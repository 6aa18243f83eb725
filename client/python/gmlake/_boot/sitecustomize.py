# Copyright 2026 The GMLake Authors.
#
# Put first on PYTHONPATH by `gmlake run` and `python -m gmlake`: with
# GMLAKE_ENABLE=1, arms GMLake in this interpreter (enabled at `import
# torch`), then runs the sitecustomize this file shadows.
import os as _os
import sys as _sys


def _gmlake_arm():
    if _os.environ.get("GMLAKE_ENABLE") != "1":
        return
    try:
        import gmlake._launcher as launcher
    except ImportError:
        # An interpreter that does not have gmlake on its path: load the
        # package this file belongs to, without adding its folder to sys.path.
        import importlib.util
        package = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
        spec = importlib.util.spec_from_file_location(
            "gmlake", _os.path.join(package, "__init__.py"),
            submodule_search_locations=[package])
        module = importlib.util.module_from_spec(spec)
        _sys.modules["gmlake"] = module
        spec.loader.exec_module(module)
        import gmlake._launcher as launcher
    launcher.arm()


def _run_shadowed_sitecustomize():
    import importlib.machinery
    import importlib.util
    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path
            if _os.path.abspath(p or _os.getcwd()) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_gmlake_arm()
_run_shadowed_sitecustomize()
