# Copyright 2026 The GMLake Authors.
"""pressure_requests.py on a gmlaked --verbose log and the turn marks beside
it: each request goes to the turn of the role that needed it, requests of
one turn are counted together, and other log lines are ignored."""
import datetime
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1796647182.0  # 2026-12-07 15:19:42 UTC


def stamp(t):
    d = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    return d.strftime("%Y-%m-%d %H:%M:%S.") + f"{d.microsecond // 1000:03d}"


def ask(t, asked, asker, size, cached):
    return (f"{stamp(t)} gmlaked: asking session {asked} (pid {100 + asked}, pid "
            f"{100 + asked}) for {size} on device 0 ({cached} of it cached): "
            f"session {asker} (pid {100 + asker}, pid {100 + asker}) needs {size} "
            "on device 0")


class PressureRequestsTest(unittest.TestCase):

    def rows(self, d):
        out = subprocess.run(
            [sys.executable, os.path.join(HERE, "pressure_requests.py"), "--json", d],
            capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    def test_requests_go_to_the_turn_that_needed_them(self):
        with tempfile.TemporaryDirectory() as d:
            # Session 1 is the trainer (pid 101), session 2 the inference
            # engine (pid 102); turns: train 0-10 s, infer 10-40, train
            # 40-41, then the trainer's last turn 60-61 after infer 41-60.
            marks = []
            for pid, role in ((101, "train"), (102, "infer")):
                for t, turn in ((0, "train"), (10, "infer"), (40, "train"),
                                (41, "infer"), (60, "train"), (61, "done-train")):
                    marks.append(dict(role=role, pid=pid, turn=turn, t=T0 + t, stats={}))
            with open(os.path.join(d, "turnstats_gmlake_1.jsonl"), "w") as f:
                for m in marks:
                    f.write(json.dumps(m) + "\n")
            with open(os.path.join(d, "gmlaked_gmlake_1.log"), "w") as f:
                f.write(f"{stamp(T0)} gmlaked: lease 1: 2 chunks (4.00 MiB) on device 0 "
                        "to session 1 (pid 101, pid 101) (0 zeroed, 2 new)\n")
                f.write(ask(T0 + 12.0, 1, 2, "2.50 GiB", "2.50 GiB") + "\n")
                f.write(ask(T0 + 12.1, 1, 2, "5.00 GiB", "1.00 GiB") + "\n")
                f.write(ask(T0 + 40.5, 2, 1, "512.00 MiB", "512.00 MiB") + "\n")
                f.write(ask(T0 + 60.2, 2, 1, "8.00 GiB", "8.00 GiB") + "\n")
            rows = self.rows(d)
        self.assertEqual(
            [(r["role"], r["phase"], r["requests"], r["asked_gib"], r["asked_of"])
             for r in rows],
            [("infer", "turn 1", 2, [2.5, 5.0], "train"),
             ("train", "turn 2", 1, [0.5], "infer"),
             ("train", "turn 3", 1, [8.0], "infer")])
        self.assertAlmostEqual(rows[0]["within_s"], 0.1, places=2)
        self.assertEqual(rows[0]["run"], "gmlake_1")

    def test_a_folder_without_turn_marks_gives_no_rows(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "gmlaked_gmlake_1.log"), "w") as f:
                f.write(ask(T0, 1, 2, "1.00 GiB", "1.00 GiB") + "\n")
            self.assertEqual(self.rows(d), [])


if __name__ == "__main__":
    unittest.main()
