# Copyright 2026 The GMLake Authors.
"""bench_out.sh: a benchmark run into an OUT folder that an earlier run used
starts over. The turn counters are appended to, so without this a second
run's table mixed the first run's rows into its own and showed the first
run's later reps as killed runs (2026-12-07, on a warm machine)."""
import os
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class BenchOutTest(unittest.TestCase):

    def test_a_reused_out_folder_loses_the_last_runs_files_only(self):
        with tempfile.TemporaryDirectory() as out:
            ours = ["turnstats_gmlake_2.jsonl", "turnstats_empty_cache_1.jsonl",
                    "status.txt", "plain_after.txt", "status_gmlake_2.json",
                    "pair_gmlake_2.log", "gmlaked_gmlake_2.log", "colocate.jsonl",
                    "watch.log"]
            theirs = ["notes.md", "card.txt", "first"]
            for name in ours + theirs[:2]:
                with open(os.path.join(out, name), "w") as f:
                    f.write("from an earlier run\n")
            os.mkdir(os.path.join(out, "first"))
            subprocess.run(["bash", "-c", 'source "$1" && clear_bench_out "$2"', "-",
                            os.path.join(HERE, "bench_out.sh"), out], check=True)
            left = sorted(os.listdir(out))
            self.assertEqual(left, sorted(theirs))

    def test_an_empty_or_new_folder_is_fine(self):
        with tempfile.TemporaryDirectory() as out:
            subprocess.run(["bash", "-c", 'source "$1" && clear_bench_out "$2"', "-",
                            os.path.join(HERE, "bench_out.sh"), out], check=True)
            self.assertEqual(os.listdir(out), [])


if __name__ == "__main__":
    unittest.main()
