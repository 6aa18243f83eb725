# Copyright 2026 The GMLake Authors.
"""gmlake-handoff on the host backend: a real gmlaked, a real holder process
and real descriptors. The time is reported, not judged (timings belong in
benchmarks); the calls are asserted: one import and one map per chunk, one
access call for the whole range, every chunk reclaimed from the holder in
one pressure round, and a large hand-off in few large chunks."""
import json
import os
import subprocess
import unittest

ROOT = os.path.join(os.environ.get("TEST_SRCDIR", "."), "gmlake")
BIN = os.path.join(ROOT, "tools", "gmlake-handoff")
GMLAKED = os.path.join(ROOT, "daemon", "gmlaked")
MiB = 1 << 20


def handoff(*flags):
    out = subprocess.run(
        [BIN, "--json", "--progress=false", "--gmlaked=" + GMLAKED, *flags],
        capture_output=True, text=True, timeout=240)
    if out.returncode != 0:
        raise AssertionError(f"gmlake-handoff {flags}: exit {out.returncode}\n"
                             f"{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class HandoffTest(unittest.TestCase):
    def check(self, r, size, chunks, unit=2 * MiB, made=True):
        print(f"hand-off of {size // MiB} MiB in {chunks} chunks: "
              f"{r['total_seconds'] * 1e3:.1f} ms",
              {p["name"]: round(p["seconds"] * 1e3, 2) for p in r["phases"]})
        self.assertEqual(r["chunk_size"], unit)
        self.assertEqual(r["chunks"], chunks)
        self.assertGreater(r["total_seconds"], 0)
        self.assertGreater(r["daemon_handoff_seconds"], 0)
        taker = r["taker_calls"]
        # The taker makes its chunks in the capacity gmlaked leases
        # (make_chunks), or imports gmlaked's.
        made_calls = taker.get("create", {}).get("calls", 0)
        imported = taker.get("import", {}).get("calls", 0)
        self.assertEqual((made_calls, imported),
                         (chunks, 0) if made else (0, chunks))
        self.assertEqual(taker["map"]["calls"], chunks)
        self.assertEqual(taker["set_access"]["calls"], 1)
        self.assertGreaterEqual(r["pressure_rounds"], 1)
        self.assertEqual(r["holder_chunks_returned"], chunks)
        self.assertEqual(r["holder_calls"]["unmap"]["calls"], chunks)
        self.assertEqual(r["holder_calls"]["release"]["calls"], chunks)
        names = [p["name"] for p in r["phases"]]
        self.assertEqual(names, ["reclaim", "make", "import", "map", "access",
                                 "lease and transfer (rest)"])
        self.assertAlmostEqual(sum(p["seconds"] for p in r["phases"]),
                               r["total_seconds"], places=6)

    def test_chunks_of_the_unit(self):
        self.check(handoff("--bytes=256MiB", "--conf=max_chunk:0,large_chunk:0"),
                   256 * MiB, 128)

    def test_chunks_gmlaked_made_are_imported(self):
        self.check(handoff("--bytes=256MiB",
                           "--conf=max_chunk:0,large_chunk:0,make_chunks:false"),
                   256 * MiB, 128, made=False)

    def test_large_requests_move_in_large_chunks(self):
        # 1 GiB in 64 chunks of 16 MiB (client/chunk_sizing.h: at least 64
        # chunks, of a power of two times the unit): the holder leased
        # them so, gmlaked takes them back whole and leases them again.
        self.check(handoff("--bytes=1GiB"), 1024 * MiB, 64)

    def test_a_larger_unit(self):
        self.check(handoff("--bytes=256MiB", "--chunk_size=32MiB",
                           "--conf=max_chunk:0,large_chunk:0"), 256 * MiB, 8, 32 * MiB)

    def test_bad_size_is_refused(self):
        out = subprocess.run([BIN, "--bytes=lots"], capture_output=True,
                             text=True, timeout=30)
        self.assertEqual(out.returncode, 1)
        self.assertIn("--bytes: give a size such as 1GiB", out.stderr)


if __name__ == "__main__":
    unittest.main()
