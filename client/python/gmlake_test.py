# Copyright 2026 The GMLake Authors.
"""The Python module against the host backend, without PyTorch: statistics,
snapshots for memory_viz, option errors, the launcher's environment.

Allocations go through libgmlake's C API (what PyTorch's pluggable allocator
calls), on real host memory."""
import ctypes
import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import unittest

# A sanitizer's runtime the library needs loaded first (.bazelrc's tsan
# config): this interpreter starts again with it, and its children inherit.
if os.environ.get("GMLAKE_TEST_PRELOAD") and "LD_PRELOAD" not in os.environ:
    os.execve(sys.executable, [sys.executable] + sys.argv,
              dict(os.environ, LD_PRELOAD=os.environ["GMLAKE_TEST_PRELOAD"]))

# The library of this build (runfiles), for this process and its children.
if "TEST_SRCDIR" in os.environ:
    os.environ["GMLAKE_LIB"] = os.path.join(
        os.environ["TEST_SRCDIR"], "gmlake", "client", "libgmlake.so")

import gmlake
from gmlake import _hook
from gmlake import _launcher
from gmlake import _snapshot
from gmlake import _torch
import viz_check

# The launcher's sitecustomize, wherever this copy of the package lives.
BOOT_FILE = os.path.realpath(os.path.join(_launcher.BOOT_DIR,
                                          "sitecustomize.py"))
MiB = 1 << 20
CHUNK = 2 * MiB
HOST_CONF = "backend:host,lake:embedded,log:false,host_capacity:1GiB"

# PyTorch's memory_stats() core statistics and what memory_summary() reads.
CORE = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
        "reserved_bytes", "active_bytes", "inactive_split_bytes",
        "requested_bytes")
POOLS = ("all", "large_pool", "small_pool")
METRICS = ("current", "peak", "allocated", "freed")
COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams",
            "num_device_alloc", "num_device_free", "max_split_size")


def lib():
    return gmlake._lib.load()


def malloc(size, stream=0):
    p = lib().gmlake_malloc(size, 0, stream)
    if not p:
        raise gmlake.GMLakeError(gmlake._lib.last_error())
    return p


def python(*args, env=None, cwd=None):
    """Runs a fresh interpreter; (returncode, stdout, stderr)."""
    r = subprocess.run([sys.executable, *args], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


class WithLake(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        lib().gmlake_shutdown()
        gmlake._lib.check(lib().gmlake_init(HOST_CONF.encode()))

    @classmethod
    def tearDownClass(cls):
        lib().gmlake_shutdown()


class StatsTest(WithLake):

    def test_memory_stats_has_pytorchs_whole_key_set_with_real_figures(self):
        small, large = malloc(4096), malloc(3 * MiB)
        s = gmlake.memory_stats(0)
        for stat in CORE:
            for pool in POOLS:
                for metric in METRICS:
                    self.assertIsInstance(s[f"{stat}.{pool}.{metric}"], int)
        for stat in ("oversize_allocations", "oversize_segments"):
            for metric in METRICS:
                self.assertEqual(s[f"{stat}.{metric}"], 0)
        for key in COUNTERS:
            self.assertIn(key, s)
        self.assertEqual(s["allocated_bytes.small_pool.current"], 4096)
        self.assertEqual(s["allocated_bytes.large_pool.current"], 3 * MiB)
        self.assertEqual(s["allocated_bytes.all.current"], 3 * MiB + 4096)
        self.assertEqual(s["reserved_bytes.small_pool.current"], CHUNK)
        self.assertEqual(s["allocation.all.current"], 2)
        lib().gmlake_free(small)
        lib().gmlake_free(large)
        s = gmlake.memory_stats(0)
        self.assertEqual(s["allocated_bytes.all.current"], 0)
        self.assertGreaterEqual(s["allocated_bytes.all.freed"], 3 * MiB + 4096)

    def test_nested_stats_flatten_back_as_torch_memory_stats_does(self):
        p = malloc(5 * MiB)
        nested = _torch.nested_stats(0)
        self.assertEqual(nested["allocated_bytes"]["all"]["current"], 5 * MiB)
        flat = {}

        def walk(prefix, node):  # torch.cuda.memory.memory_stats's recursion
            for key, value in node.items():
                name = f"{prefix}.{key}" if prefix else key
                if isinstance(value, dict):
                    walk(name, value)
                else:
                    flat[name] = value

        walk("", nested)
        self.assertEqual(flat, gmlake.memory_stats(0))
        lib().gmlake_free(p)

    def test_reset_peaks_and_accumulated_totals(self):
        p = malloc(16 * MiB)
        lib().gmlake_free(p)
        s = gmlake.memory_stats(0)
        self.assertGreaterEqual(s["allocated_bytes.all.peak"], 16 * MiB)
        gmlake.reset_peak_stats(0)
        s = gmlake.memory_stats(0)
        self.assertEqual(s["allocated_bytes.all.peak"],
                         s["allocated_bytes.all.current"])
        self.assertGreater(s["allocated_bytes.all.allocated"], 0)
        gmlake.reset_accumulated_stats(0)
        s = gmlake.memory_stats(0)
        self.assertEqual(s["allocated_bytes.all.allocated"], 0)
        self.assertEqual(s["reserved_bytes.large_pool.freed"], 0)

    def test_empty_cache_and_memory_fraction(self):
        p = malloc(64 * MiB)
        lib().gmlake_free(p)
        self.assertGreaterEqual(gmlake.empty_cache(), 64 * MiB)
        self.assertEqual(gmlake.memory_stats(0)["reserved_bytes.all.current"], 0)
        self.assertEqual(gmlake.memory_fraction(0), 1.0)
        gmlake.set_memory_fraction(0.25, 0)  # of the 1 GiB host device
        self.assertEqual(gmlake.memory_fraction(0), 0.25)
        self.assertFalse(lib().gmlake_malloc(300 * MiB, 0, 0))
        self.assertIn("out of memory", gmlake._lib.last_error())
        with self.assertRaisesRegex(gmlake.GMLakeError, r"not in \[0, 1\]"):
            gmlake.set_memory_fraction(1.5, 0)
        gmlake.set_memory_fraction(1.0, 0)


class SnapshotTest(WithLake):

    def test_a_pools_snapshot_has_its_segments_only(self):
        # torch.cuda.memory_snapshot(pool.id) and MemPool.snapshot() pass the
        # pool: on the H200 every segment came back (PyTorch's
        # test_mempool_with_allocator counted 14 for one).
        p = malloc(3 * CHUNK, 7)
        try:
            snap = _snapshot.snapshot()
            self.assertTrue(snap["segments"])
            for seg in snap["segments"]:
                self.assertEqual(seg["segment_pool_id"], (0, 0))
            self.assertEqual(_snapshot.snapshot((0, 0))["segments"],
                             snap["segments"])
            self.assertEqual(_snapshot.snapshot((3, 0))["segments"], [])
            # Through torch.cuda's own entry point as gmlake routes it, with
            # the arguments PyTorch 2.11 gives it.
            self.assertEqual(_torch._memory_snapshot((3, 0, True))["segments"], [])
            self.assertEqual(_torch._memory_snapshot((0, 0, True))["segments"],
                             snap["segments"])
        finally:
            lib().gmlake_free(p)
            lib().gmlake_empty_cache()
        # A pool made and routed as the native door does for MemPool and
        # use_mem_pool: its segment, and only it, under its id.
        c = ctypes
        filt_t = c.CFUNCTYPE(c.c_int, c.c_void_p, c.c_uint64)
        accept_7 = filt_t(lambda ctx, stream: 1 if stream == 7 else 0)
        l = lib()
        l.gmlake_pool_create_or_incref.argtypes = [c.c_int, c.c_uint64, c.c_uint64]
        l.gmlake_pool_begin_allocate.argtypes = [c.c_int, c.c_uint64, c.c_uint64,
                                                 filt_t, c.c_void_p]
        l.gmlake_pool_end_allocate.argtypes = [c.c_int, c.c_uint64, c.c_uint64]
        l.gmlake_pool_release.argtypes = [c.c_int, c.c_uint64, c.c_uint64]
        l.gmlake_pool_release.restype = c.c_int64
        self.assertEqual(l.gmlake_pool_create_or_incref(0, 0, 5), 0)
        self.assertEqual(l.gmlake_pool_begin_allocate(0, 0, 5, accept_7, None), 0)
        in_pool = malloc(16, 7)
        self.assertEqual(l.gmlake_pool_end_allocate(0, 0, 5), 0)
        outside = malloc(3 * CHUNK, 7)
        try:
            segs = _snapshot.snapshot((0, 5))["segments"]
            self.assertEqual(len(segs), 1, segs)
            self.assertEqual(segs[0]["segment_pool_id"], (0, 5))
            self.assertEqual([b["address"] for b in segs[0]["blocks"]
                              if b["state"] == "active_allocated"], [in_pool])
        finally:
            lib().gmlake_free(in_pool)
            lib().gmlake_free(outside)
            self.assertGreater(l.gmlake_pool_release(0, 0, 5), 0)
            lib().gmlake_empty_cache()
        mixed = {"segments": [{"segment_pool_id": [0, 0]},
                              {"segment_pool_id": [3, 0]}]}
        self.assertEqual(_snapshot.of_pool(mixed, (3, 0))["segments"],
                         [{"segment_pool_id": (3, 0)}])
        # PyTorch 2.11's memory_snapshot(mempool_id, include_traces) passes
        # (id0, id1, include_traces); (0, 0, ...) is every pool (on the
        # H200 a 2-tuple filter kept nothing of either).
        def mixed_with_traces():
            return {"segments": [{"segment_pool_id": [0, 0]},
                                 {"segment_pool_id": [3, 0]}],
                    "device_traces": [[{"action": "alloc"}]]}
        every = _snapshot.of_pool(mixed_with_traces(), (0, 0, True))
        self.assertEqual(len(every["segments"]), 2)
        self.assertEqual(every["device_traces"], [[{"action": "alloc"}]])
        one = _snapshot.of_pool(mixed_with_traces(), (3, 0, False))
        self.assertEqual(one["segments"], [{"segment_pool_id": (3, 0)}])
        self.assertEqual(one["device_traces"], [[]])

    def test_snapshot_reports_the_allocator_settings_as_pytorch_does(self):
        # PyTorch's test_cuda.py reads _snapshot()["allocator_settings"]
        # ["expandable_segments"] after every TestMemPool test (26 failed
        # on the H200 for the missing key), and vLLM reads it to decide
        # whether to turn expandable segments off around graph capture.
        saved = {k: os.environ.pop(k, None)
                 for k in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")}
        from gmlake import _alloc_settings
        try:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
                "expandable_segments:True,max_split_size_mb:256,"
                "roundup_power2_divisions:[256:1,512:2,>:4]")
            _alloc_settings.reset()
            got = _snapshot.snapshot()
            settings = got["allocator_settings"]
            self.assertEqual(got["external_annotations"], [])
            self.assertEqual(settings["PYTORCH_CUDA_ALLOC_CONF"],
                             os.environ["PYTORCH_CUDA_ALLOC_CONF"])
            self.assertIs(settings["expandable_segments"], True)
            self.assertEqual(settings["max_split_size"], 256 << 20)
            self.assertEqual(settings["garbage_collection_threshold"], 0.0)
            rounds = settings["roundup_power2_divisions"]
            self.assertEqual(len(rounds), 16)
            self.assertEqual((rounds["128"], rounds["256"], rounds["512"],
                              rounds["1024"], rounds["32768"]), (0, 1, 2, 4, 4))
            # torch.cuda.memory._set_allocator_settings, as gmlake routes
            # it: PyTorch's parse first (here a stand-in that refuses what
            # PyTorch would), then the snapshot follows.
            refused = "expandable_segments:Maybe"

            def pytorchs_setter(conf):
                if conf == refused:
                    raise RuntimeError("Expected a single True/False argument")
            name = "_accelerator_setAllocatorSettings"
            _torch._routed[name] = pytorchs_setter
            try:
                setter = _torch._settings_setter(name)
                setter("expandable_segments:False,garbage_collection_threshold:0.6")
                with self.assertRaises(RuntimeError):
                    setter(refused)
            finally:
                del _torch._routed[name]
            settings = _snapshot.snapshot()["allocator_settings"]
            self.assertIs(settings["expandable_segments"], False)
            # Each string starts max_split_size and the threshold afresh.
            self.assertEqual(settings["max_split_size"], -1)
            self.assertEqual(settings["garbage_collection_threshold"], 0.6)
            self.assertEqual(settings["PYTORCH_CUDA_ALLOC_CONF"],
                             "expandable_segments:False,garbage_collection_threshold:0.6")
            self.assertEqual(settings["roundup_power2_divisions"]["512"], 2)
            # PYTORCH_ALLOC_CONF, PyTorch 2.9's name, comes first.
            os.environ["PYTORCH_ALLOC_CONF"] = "pinned_num_register_threads:8"
            _alloc_settings.reset()
            settings = _snapshot.snapshot()["allocator_settings"]
            self.assertEqual(settings["pinned_num_register_threads"], 8)
            self.assertIs(settings["expandable_segments"], False)
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v
            _alloc_settings.reset()

    def allocate_here(self, size, stream):
        return malloc(size, stream)

    def test_dumped_history_opens_in_memory_viz_and_names_the_python_caller(self):
        gmlake.set_capacity(9 * CHUNK, 0)
        gmlake.record_memory_history(stacks="python", clear_history=True)
        try:
            small = malloc(1000, 7)  # a chunk of its own, in the small arena
            blocks = [self.allocate_here(CHUNK, 7) for _ in range(8)]
            for p in blocks[::2]:
                lib().gmlake_free(p)
            big = self.allocate_here(4 * CHUNK, 7)  # stitched
            self.assertFalse(lib().gmlake_malloc(CHUNK, 0, 7))  # an oom
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "snapshot.pickle")
                gmlake.dump_snapshot(path)
                self.assertEqual(viz_check.check_file(path), [])
                with open(path, "rb") as f:
                    snap = pickle.load(f)
        finally:
            gmlake.record_memory_history(enabled=None)
            gmlake.set_capacity(0, 0)
        trace = snap["device_traces"][0]
        actions = [e["action"] for e in trace]
        for action in ("segment_map", "segment_unmap", "alloc",
                       "free_requested", "free_completed", "oom"):
            self.assertIn(action, actions)
        allocs = [e for e in trace if e["action"] == "alloc"]
        self.assertEqual(allocs[-1]["addr"], big)
        self.assertEqual(allocs[-1]["size"], 4 * CHUNK)
        self.assertEqual(allocs[-1]["stream"], 7)
        names = [(f["filename"], f["name"]) for f in allocs[-1]["frames"]]
        self.assertIn((__file__, "SnapshotTest.allocate_here"), names)
        self.assertEqual(sorted(snap["segments"][0]), sorted(
            set(snap["segments"][0]) | set(viz_check.SEGMENT_KEYS)))
        # As PyTorch's: a hashable tuple, (0, 0) for default memory.
        self.assertEqual({s["segment_pool_id"] for s in snap["segments"]},
                         {(0, 0)})
        for p in blocks[1::2] + [big, small]:
            lib().gmlake_free(p)

    def test_checker_catches_what_memory_viz_could_not_open(self):
        # The checker itself: a tiling gap, an unknown opcode, a block
        # allocated outside every mapping.
        seg = {"device": 0, "address": 4096, "total_size": 8192, "stream": 0,
               "allocated_size": 0, "segment_type": "large",
               "blocks": [{"size": 4096, "state": "inactive",
                           "requested_size": 0}]}
        snap = {"segments": [seg], "device_traces": [[]]}
        self.assertIn("tile", " ".join(viz_check.check_snapshot(snap)))
        self.assertTrue(viz_check.check_pickle_bytes(pickle.dumps(b"x", 4)))
        self.assertTrue(viz_check.check_pickle_bytes(pickle.dumps([1], 5)))
        seg["blocks"][0]["size"] = 8192
        snap["device_traces"] = [[{"action": "alloc", "addr": 65536,
                                   "size": 512, "stream": 0}]]
        self.assertTrue(viz_check.check_snapshot(snap))

    def free_here(self, p):
        lib().gmlake_free(p)

    def test_history_context_and_metadata_as_pytorch_records_them(self):
        # PyTorch's test_memory_plots_free_stack and _metadata: "alloc"
        # names the allocating caller only, "all" the freeing one too,
        # "state" neither in the history; every event carries the metadata.
        for context in ("alloc", "all", "state"):
            gmlake.set_memory_metadata("metadata test")
            gmlake.record_memory_history(context=context, stacks="python",
                                         clear_history=True)
            try:
                self.free_here(self.allocate_here(MiB, 0))
                snap = gmlake.memory_snapshot()
            finally:
                gmlake.record_memory_history(enabled=None)
                gmlake.set_memory_metadata("")
            text = json.dumps(snap["device_traces"])
            self.assertEqual("free_here" in text, context == "all", context)
            self.assertEqual("allocate_here" in text, context != "state",
                             context)
            events = snap["device_traces"][0]
            self.assertTrue(events)
            for e in events:
                self.assertEqual(e["user_metadata"], "metadata test")
        with self.assertRaises(TypeError):
            gmlake.set_memory_metadata(7)

    def test_state_keeps_the_stacks_of_live_blocks(self):
        # PyTorch's test_memory_snapshot_script: enabled="state" records no
        # history, and a live block names the caller that allocated it.
        gmlake.record_memory_history(enabled="state", stacks="python",
                                     clear_history=True)
        try:
            p = self.allocate_here(311 * 411 * 4, 0)
            snap = gmlake.memory_snapshot()
        finally:
            gmlake.record_memory_history(enabled=None)
        self.assertEqual(snap["device_traces"], [[]])
        blocks = [b for s in snap["segments"] for b in s["blocks"]
                  if b["requested_size"] == 311 * 411 * 4]
        self.assertEqual(len(blocks), 1)
        names = [f["name"] for f in blocks[0]["frames"]]
        self.assertIn("SnapshotTest.allocate_here", names)
        lib().gmlake_free(p)

    def test_history_off_records_nothing(self):
        gmlake.record_memory_history(enabled=None, clear_history=True)
        p = malloc(MiB)
        self.assertEqual(gmlake.memory_snapshot()["device_traces"], [[]])
        lib().gmlake_free(p)
        with self.assertRaisesRegex(ValueError, "stacks"):
            gmlake.record_memory_history(stacks="java")


class ConfigErrorsTest(unittest.TestCase):

    def test_enable_with_bad_options_says_which_before_opening_a_lake(self):
        code = textwrap.dedent("""
            import sys, gmlake
            try:
                gmlake.enable()
            except gmlake.GMLakeError as e:
                print(e)
            print("torch imported:", "torch" in sys.modules)
            print("lake open:", gmlake._lib.load().gmlake_is_initialized())
        """)
        env = dict(os.environ, GMLAKE_CONF="backend:host,capacity:lots")
        rc, out, err = python("-c", code, env=env)
        self.assertEqual(rc, 0, err)
        self.assertIn("bad GMLAKE_CONF", out)
        self.assertIn("capacity", out)
        self.assertIn("torch imported: False", out)
        self.assertIn("lake open: 0", out)
        env["GMLAKE_CONF"] = "colour:blue"
        rc, out, err = python("-c", code, env=env)
        self.assertIn("colour", out)

    @unittest.skipIf(subprocess.run([sys.executable, "-c", "import torch"],
                                    capture_output=True).returncode == 0,
                     "PyTorch is installed here")
    def test_enable_without_pytorch_says_so_and_opens_nothing(self):
        code = textwrap.dedent("""
            import gmlake
            try:
                gmlake.enable("backend:host")
            except gmlake.GMLakeError as e:
                print(e)
            print("lake open:", gmlake._lib.load().gmlake_is_initialized())
        """)
        rc, out, err = python("-c", code)
        self.assertIn("PyTorch cannot be imported", out)
        self.assertIn("lake open: 0", out)


class LauncherTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        # A sitecustomize of the user's, which the launcher's must not hide.
        self.user = os.path.join(self.dir, "user")
        os.mkdir(self.user)
        with open(os.path.join(self.user, "sitecustomize.py"), "w") as f:
            f.write("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [self.user] + os.environ.get("PYTHONPATH", "").split(os.pathsep))
        self.env.pop("GMLAKE_ENABLE", None)
        self.env.pop("GMLAKE_CONF", None)
        self.probe = os.path.join(self.dir, "probe.py")
        with open(self.probe, "w") as f:
            f.write(textwrap.dedent("""
                import os, subprocess, sys
                import gmlake._hook
                print("argv", sys.argv[1:])
                print("name", __name__)
                print("enable", os.environ.get("GMLAKE_ENABLE"))
                print("conf", os.environ.get("GMLAKE_CONF"))
                print("path0", os.path.realpath(os.path.join(
                    os.environ["PYTHONPATH"].split(os.pathsep)[0],
                    "sitecustomize.py")))
                print("user", os.environ.get("USER_SITECUSTOMIZE_RAN"))
                print("armed", gmlake._hook.armed("torch"))
                if sys.argv[1:] == ["spawn"]:
                    out = subprocess.run([sys.executable, __file__, "child"],
                                         capture_output=True, text=True).stdout
                    print("child:" + out.replace("\\n", "|"))
            """))

    def run_probe(self, *launcher, extra=()):
        return python("-m", "gmlake", *launcher, *extra, env=self.env,
                      cwd=self.dir)

    def test_run_enables_gmlake_in_the_command_and_its_children(self):
        rc, out, err = self.run_probe("run", "--conf", "backend:host", "--",
                                      sys.executable, self.probe, "spawn")
        self.assertEqual(rc, 0, err)
        self.assertIn("enable 1", out)
        self.assertIn("conf backend:host", out)
        self.assertIn("path0 " + BOOT_FILE, out)
        self.assertIn("user 1", out)           # the shadowed sitecustomize ran
        self.assertIn("armed True", out)
        child = out.split("child:")[1]
        self.assertIn("armed True", child)     # a grandchild too
        self.assertIn("argv ['child']", child)
        # The caller's PYTHONPATH is kept, after the boot folder.
        self.assertIn(self.user, self.env["PYTHONPATH"])

    def test_an_interpreter_without_gmlake_on_its_path_is_armed_too(self):
        # torchrun's script may run another Python than the one gmlake is
        # installed in: the boot sitecustomize loads the package beside it.
        parent = os.path.dirname(os.path.dirname(os.path.abspath(gmlake.__file__)))
        code = ("import sys; sys.path.insert(0, %r); import gmlake.__main__ as m; "
                "sys.exit(m.main(['run', '--', sys.executable, %r]))"
                % (parent, self.probe))
        env = dict(self.env, PYTHONPATH=self.user)
        rc, out, err = python("-c", code, env=env, cwd=self.dir)
        self.assertEqual(rc, 0, err)
        self.assertIn("armed True", out)
        self.assertIn("user 1", out)

    def test_python_dash_m_runs_a_script_or_module_as_main(self):
        rc, out, err = self.run_probe(self.probe, "a", "b")
        self.assertEqual(rc, 0, err)
        self.assertIn("argv ['a', 'b']", out)
        self.assertIn("name __main__", out)
        self.assertIn("armed True", out)
        rc, out, err = python("-m", "gmlake", "-m", "probe", "x",
                              env=dict(self.env, PYTHONPATH=os.pathsep.join(
                                  [self.dir, self.env["PYTHONPATH"]])),
                              cwd=self.dir)
        self.assertEqual(rc, 0, err)
        self.assertIn("argv ['x']", out)
        self.assertIn("armed True", out)

    def test_bad_options_stop_before_the_command_runs(self):
        rc, out, err = self.run_probe("run", "--conf", "capacity:lots", "--",
                                      sys.executable, self.probe)
        self.assertEqual(rc, 2)
        self.assertIn("capacity", err)
        self.assertNotIn("argv", out)
        rc, out, err = self.run_probe("--conf=lake:sometimes", self.probe)
        self.assertEqual(rc, 2)
        self.assertIn("lake", err)

    def test_missing_or_unknown_command_is_said(self):
        rc, _, err = self.run_probe("run")
        self.assertEqual(rc, 2)
        self.assertIn("no command", err)
        rc, _, err = self.run_probe("run", "--", "no-such-command-xyz")
        self.assertEqual(rc, 127)
        self.assertIn("no-such-command-xyz", err)

    def test_env_prints_exports_and_without_the_switch_nothing_is_armed(self):
        rc, out, err = self.run_probe("env", "--conf", "backend:host")
        self.assertEqual(rc, 0, err)
        self.assertIn("export GMLAKE_ENABLE='1'", out)
        self.assertIn("export PYTHONPATH='", out)
        first = out.split("export PYTHONPATH='")[1].split(os.pathsep)[0]
        self.assertEqual(
            os.path.realpath(os.path.join(first, "sitecustomize.py")),
            BOOT_FILE)
        # The boot folder alone (GMLAKE_ENABLE unset) arms nothing.
        env = dict(self.env, PYTHONPATH=os.pathsep.join(
            [_launcher.BOOT_DIR, self.env["PYTHONPATH"]]))
        rc, out, err = python(self.probe, env=env)
        self.assertIn("armed False", out)
        self.assertIn("user 1", out)


class DoorChoiceTest(unittest.TestCase):
    """Which PyTorch door, and what the native one is built from; the build
    itself needs torch and runs on the GPU machine (torch_door_test.sh)."""

    def setUp(self):
        from gmlake import _door
        self.door = _door
        self.saved = dict(os.environ)

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.saved)

    def test_the_environment_chooses_the_pluggable_door_or_is_refused(self):
        os.environ["GMLAKE_TORCH_DOOR"] = "pluggable"
        with self.assertRaisesRegex(self.door.Unavailable, "^GMLAKE_TORCH_DOOR=pluggable$"):
            self.door.install("/nonexistent/libgmlake.so", None)
        os.environ["GMLAKE_TORCH_DOOR"] = "fancy"
        with self.assertRaisesRegex(self.door.Unavailable, "neither native nor pluggable"):
            self.door.install("/nonexistent/libgmlake.so", None)

    def test_the_package_carries_the_source_and_the_header(self):
        self.assertTrue(os.path.exists(self.door._SOURCE), self.door._SOURCE)
        self.assertTrue(os.path.exists(os.path.join(self.door._gmlake_include(), "gmlake.h")))

    def test_cuda_headers_from_cuda_home_and_the_runtime_torch_ships_first(self):
        with tempfile.TemporaryDirectory() as tmp:
            home = os.path.join(tmp, "cuda")
            os.makedirs(os.path.join(home, "include"))
            open(os.path.join(home, "include", "cuda_runtime_api.h"), "w").close()
            torch_dir = os.path.join(tmp, "site", "torch")
            os.makedirs(torch_dir)
            os.environ["CUDA_HOME"] = home
            self.assertEqual(self.door._cuda_include(torch_dir), os.path.join(home, "include"))
            shipped = os.path.join(tmp, "site", "nvidia", "cu13", "lib")
            os.makedirs(shipped)
            open(os.path.join(shipped, "libcudart.so.13"), "w").close()
            choices = self.door._cudart_choices(torch_dir, os.path.join(home, "include"))
            self.assertEqual(choices[0][0], os.path.join(shipped, "libcudart.so.13"))
            self.assertEqual(choices[-1][-2:], ["-lcudart", "-Wl,-rpath," + os.path.join(home, "lib64")])


class HookTest(unittest.TestCase):

    def test_callback_runs_after_the_module_and_before_the_importer_goes_on(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "hooktarget.py"), "w") as f:
                f.write("order = ['module body']\n")
            sys.path.insert(0, d)
            try:
                seen = []
                _hook.when_imported(
                    "hooktarget", lambda m: seen.append(list(m.order)) or
                    m.order.append("callback"))
                self.assertTrue(_hook.armed("hooktarget"))
                import hooktarget
                hooktarget.order.append("importer")
                self.assertEqual(seen, [["module body"]])
                self.assertEqual(hooktarget.order,
                                 ["module body", "callback", "importer"])
                self.assertFalse(_hook.armed("hooktarget"))
                # Already imported: called at once.
                again = []
                _hook.when_imported("hooktarget", again.append)
                self.assertEqual(again, [hooktarget])
            finally:
                sys.path.remove(d)
                sys.modules.pop("hooktarget", None)


if __name__ == "__main__":
    unittest.main()
