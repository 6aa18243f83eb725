# Copyright 2026 The GMLake Authors.
"""colocate_table.py on a log whose second run was cut at its limit: the cut
run's finished turns come from its turn counters, marked "*", and its
unfinished last turn does not appear."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def write_lines(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def counters(role, pid, turn, t, stitches):
    return dict(role=role, pid=pid, turn=turn, t=t, stats={"gmlake.stitches": stitches})


class ColocateTableTest(unittest.TestCase):

    def table(self, d):
        out = subprocess.run([sys.executable, os.path.join(HERE, "colocate_table.py"),
                              os.path.join(d, "colocate.jsonl")],
                             capture_output=True, text=True, check=True).stdout
        return out.splitlines()

    def test_cut_run_takes_its_finished_turns_from_counters(self):
        with tempfile.TemporaryDirectory() as d:
            done = dict(setting="empty_cache", rep=1, kind="RESULT")
            write_lines(os.path.join(d, "colocate.jsonl"), [
                dict(done, data=dict(role="train", turns=[1.5, 0.7],
                                     peak_reserved_gib=12.0, peak_allocated_gib=10.0)),
                dict(done, data=dict(role="infer", turns=[5.0, 2.0],
                                     peak_reserved_gib=30.0, peak_allocated_gib=20.0)),
                dict(done, kind="PAIR", data=dict(ok=True, wall_s=20.0)),
                dict(setting="gmlake", rep=1, kind="PAIR",
                     data=dict(ok=False, error="no result within 100 s (rc 124)")),
            ])
            # The turn file as colocate.py writes it: train, infer, train,
            # infer, done-train (the trainer's exit, inside the inference
            # role's second turn), then the kill: that turn never ends.
            write_lines(os.path.join(d, "turnstats_gmlake_1.jsonl"), [
                counters("train", 1, "train", 0.0, 0),
                counters("infer", 2, "train", 0.1, 0),
                counters("train", 1, "infer", 9.0, 10),
                counters("infer", 2, "infer", 9.0, 0),
                counters("infer", 2, "train", 14.5, 40),
                counters("train", 1, "train", 14.5, 10),
                counters("train", 1, "infer", 15.25, 12),
                counters("infer", 2, "infer", 15.25, 40),
                counters("infer", 2, "done-train", 15.5, 41),
                counters("train", 1, "done-train", 15.5, 12),
            ])
            write_lines(os.path.join(d, "turnstats_gmlake_2.jsonl"), [
                counters("train", 3, "train", 0.0, 0),
                counters("train", 3, "infer", 2.0, 1),
            ])
            lines = self.table(d)
        cut = [l for l in lines if l.startswith("| gmlake | 1 |")]
        self.assertEqual(len(cut), 1, lines)
        # Trainer: its first turn includes start-up ("?"), its second 0.75 s.
        # Inference: its first turn 5.5 s; the second was cut.
        self.assertIn("| ?, 0.75* | 5.5* | - |", cut[0])
        medians = [l for l in lines if l.startswith("| gmlake | infer |")]
        self.assertEqual(medians, ["| gmlake | infer | 5.500 | 1.10 |"])
        # A run killed with the whole benchmark has no line in the log.
        self.assertIn("| gmlake | 2 | no (killed with the benchmark", "\n".join(lines))
        # A cut run has no wall time to count.
        self.assertNotIn("| gmlake | 0 |", "\n".join(lines))
        self.assertIn("| empty_cache | 1 | 20.0 |", lines)


if __name__ == "__main__":
    unittest.main()
