# Copyright 2026 The GMLake Authors.
"""pair_watch.sh: a colocation pair whose inference role ends early no
longer waits out the benchmark's limit, and a pair that completes is left
alone.

workloads/colocate.py needs a GPU, so each test runs a stand-in with the
same process names and the same turn file protocol: the `pair` role starts
`train` and `infer` (`colocate.py ROLE --dir DIR`), which pass the turn by
writing the other's name (or "done-ROLE" at the end) into DIR/turn and
wait for their own name or the partner's "done-" mark."""
import os
import subprocess
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

STAND_IN = textwrap.dedent("""
    import json, os, subprocess, sys, time
    role, d = sys.argv[1], sys.argv[3]
    early = "--infer-ends-early" in sys.argv
    other = "infer" if role == "train" else "train"
    turn = os.path.join(d, "turn")

    def put(x):
        tmp = turn + "." + role
        with open(tmp, "w") as f:
            f.write(x)
        os.replace(tmp, turn)

    def wait_turn():
        while True:
            with open(turn) as f:
                if f.read() in (role, "done-" + other):
                    return
            time.sleep(0.01)

    if role == "pair":
        put("train")
        procs = [subprocess.Popen([sys.executable, __file__, r] + sys.argv[2:],
                                  stdout=subprocess.PIPE, text=True)
                 for r in ("train", "infer")]
        outs = [p.communicate()[0] for p in procs]
        sys.stdout.write("".join(outs))
        print("PAIR", json.dumps(dict(ok=all(p.returncode == 0 for p in procs))))
        sys.exit(0)
    if role == "infer" and early:
        # Out of memory while the trainer runs its first turn.
        time.sleep(0.2)
        put("done-infer")
        print("RESULT", json.dumps(dict(role=role, ok=False, error="OutOfMemoryError")))
        sys.exit(1)
    for _ in range(2):
        wait_turn()
        time.sleep(0.5)  # the turn's work
        put(other)
    if role == "infer":
        time.sleep(1)  # the real script's end: its turn, then its "done-" mark
    put("done-" + role)
    print("RESULT", json.dumps(dict(role=role, ok=True)))
""")


def run_pair(extra, limit=60):
    """Runs the stand-in pair under watch_pair (grace 2 s); returns its
    output and seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "colocate.py")
        with open(script, "w") as f:
            f.write(STAND_IN)
        d = os.path.join(tmp, "pair")
        os.mkdir(d)
        t0 = time.time()
        out = subprocess.run(
            ["bash", "-c",
             'source "$1"; timeout "$2" python3 "$3" pair --dir "$4" $5 & pid=$!;'
             ' watch_pair "$4" "$pid" 2; wait "$pid"',
             "-", os.path.join(HERE, "pair_watch.sh"), str(limit), script, d, extra],
            capture_output=True, text=True, timeout=limit + 30).stdout
        return out, time.time() - t0


class PairWatchTest(unittest.TestCase):

    def test_a_role_that_ends_early_ends_the_pair_with_its_error(self):
        out, seconds = run_pair("--infer-ends-early")
        self.assertIn("WATCH the infer role ended", out)
        self.assertIn('"error": "OutOfMemoryError"', out)
        self.assertIn('PAIR {"ok": false}', out)
        self.assertLess(seconds, 20)  # not the 60 s limit

    def test_a_pair_that_completes_is_left_alone(self):
        out, _ = run_pair("")
        self.assertNotIn("WATCH", out)
        self.assertEqual(out.count('"ok": true'), 3, out)


if __name__ == "__main__":
    unittest.main()
