# Copyright 2026 The GMLake Authors.
"""pytest hooks for PyTorch's test_cuda.py run against another allocator.

tests/gpu/pytorch_test_cuda.sh copies this file beside the fetched
test_cuda.py as conftest.py. It does two things:

- Selects the tests that ask something of the CUDA allocator: the classes
  about it whole (TestMemPool, TestBlockStateAbsorption, TestCudaMallocAsync
  or, in newer files, TestCudaAllocator),
  TestCudaOptims' graph-captured optimizer steps, and TestCuda's tests of
  graphs, pools, memory stats, snapshots, caching, streams' records, cuDNN,
  IPC and out-of-memory. Pinned-host-memory tests are left out: they test
  PyTorch's host allocator, which GMLake does not replace.
- Puts back the per-process memory fraction after each test, natively and
  under GMLake alike: a test that fails between
  _setup_mempool_limited_memory_test and its teardown (natively:
  test_deleted_mempool_not_used_on_oom) leaves the process capped at what
  it held plus 80 MB, and every later test runs out of memory for it.
- Starts each test with what failed before it let go (natively and under
  GMLake alike): pytest keeps a failed test's traceback (sys.last_*), and
  with it the test's frames, so a CUDA graph it made stays alive into the
  next test, and TestBlockStateAbsorption's tearDown, which compares the
  graph segments with those at setUp, fails that next test too (H200 run
  4: test_allocate_in_thread_to_pool failing took
  test_allocated_in_middle_of_segment with it).
- Lets a test_cuda.py a little newer than the installed torch import: a name
  it imports from torch.testing._internal that this torch lacks becomes
  False (flags such as PLATFORM_SUPPORTS_...) or a decorator that skips the
  test it decorates, saying so; a missing psutil or expecttest becomes a
  stand-in. Each stand-in is printed, so the table says what was not run.
"""
import ast
import json
import importlib
import os
import re
import sys
import types
import unittest

import pytest

# TestCudaMallocAsync holds the snapshot and history tests in 2.11; newer
# files name that class TestCudaAllocator (both run on the default backend).
_WHOLE_CLASSES = {"TestMemPool", "TestBlockStateAbsorption", "TestCudaMallocAsync",
                  "TestCudaAllocator"}
_TESTCUDA = re.compile(
    r"graph|mem|snapshot|alloc|cach|stats|record_stream|ipc|cudnn|pool|oom|empty")
_NOT_THE_CUDA_ALLOCATOR = re.compile(r"pinned|host_memory|cudaregister")
_STOOD_IN = []


def _skipping_stand_in(name):
    reason = "%s is not in this torch" % name

    def stand_in(*args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return unittest.skip(reason)(args[0])
        return lambda f: unittest.skip(reason)(f)

    return stand_in


def _stand_in_module(name):
    module = types.ModuleType(name)

    def missing(attr):
        raise unittest.SkipTest("%s.%s: %s is not installed" % (name, attr, name))

    module.__getattr__ = missing
    return module


def _expecttest_stand_in():
    """Just what common_utils takes from expecttest: TestCase and ACCEPT."""
    module = types.ModuleType("expecttest")

    class TestCase(unittest.TestCase):
        def assertExpectedInline(self, actual, expect, skip=0):
            self.assertEqual(str(actual).strip(), str(expect).strip())

        def assertExpectedRaisesInline(self, exc_type, callable_, expect, *args, **kwargs):
            with self.assertRaises(exc_type) as caught:
                callable_(*args, **kwargs)
            self.assertExpectedInline(str(caught.exception), expect)

    module.TestCase = TestCase
    module.ACCEPT = False
    return module


def _install_stand_ins(test_file):
    for name in ("psutil", "expecttest"):
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules[name] = (_expecttest_stand_in() if name == "expecttest"
                                 else _stand_in_module(name))
            _STOOD_IN.append("module " + name)
    with open(test_file) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.module and
                node.module.startswith("torch.testing._internal")):
            continue
        module = importlib.import_module(node.module)
        for alias in node.names:
            if hasattr(module, alias.name):
                continue
            flag = alias.name.upper() == alias.name
            setattr(module, alias.name, False if flag else _skipping_stand_in(alias.name))
            _STOOD_IN.append("%s.%s (%s)" % (node.module, alias.name,
                                             "False" if flag else "skips its tests"))


def _selected(item):
    cls = item.cls.__name__ if item.cls is not None else ""
    if cls in _WHOLE_CLASSES:
        return True
    if cls.startswith("TestCudaOptims"):
        return item.name.startswith("test_graph_optims")
    if cls == "TestCuda":
        return bool(_TESTCUDA.search(item.name)) and not _NOT_THE_CUDA_ALLOCATOR.search(item.name)
    return False


_install_stand_ins(os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_cuda.py"))


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line("stand-ins: " + (", ".join(_STOOD_IN) if _STOOD_IN else "none"))


def pytest_collection_modifyitems(config, items):
    keep = [i for i in items if _selected(i)]
    dropped = [i for i in items if not _selected(i)]
    items[:] = keep
    config.hook.pytest_deselected(items=dropped)


def pytest_runtest_logreport(report):
    """One line per test to $OUTCOMES_FILE, as it ends (for outcomes_table.py)."""
    path = os.environ.get("OUTCOMES_FILE")
    if not path or not (report.when == "call" or report.outcome != "passed"):
        return
    if report.when == "teardown" and report.outcome == "passed":
        return
    name = report.nodeid.split("::", 1)[-1].replace("::", ".")
    if report.skipped:
        outcome = "skip"
        message = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    elif report.failed:
        outcome = "FAIL"
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)
        if report.when != "call":
            message = "in %s: %s" % (report.when, message)
    else:
        outcome, message = "pass", ""
    with open(path, "a") as f:
        f.write(json.dumps({"test": name, "outcome": outcome,
                            "message": message.splitlines()[0] if message else ""}) + "\n")


@pytest.fixture(autouse=True)
def _memory_fraction_put_back():
    import gc
    import torch.cuda
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    before = (torch.cuda.get_per_process_memory_fraction()
              if torch.cuda.is_initialized() else 1.0)
    yield
    if torch.cuda.is_initialized() and torch.cuda.get_per_process_memory_fraction() != before:
        torch.cuda.set_per_process_memory_fraction(before)
