# Copyright 2026 The GMLake Authors.
"""Side-by-side outcomes of pytest runs, from the lines the conftest wrote.

  python3 outcomes_table.py native.jsonl gmlake.jsonl
Each file holds one JSON object per test ({"test", "outcome", "message"}),
written as each test ends (tests/gpu/pytorch_test_cuda_conftest.py), so a
run cut short by its time limit still shows what it did. Prints a markdown
table (one row per test: pass, FAIL: message, skip: reason, or not run), the
counts per run, and exits 1 when a test that passes in the first run does
not pass in a later one.
"""
import json
import sys


def outcomes(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    out[row["test"]] = row
    except FileNotFoundError:
        pass
    return out


def cell(row):
    if row is None:
        return "not run"
    text = row["outcome"]
    if text != "pass" and row.get("message"):
        text += ": " + row["message"][:120]
    return text.replace("|", "/")


runs = [(p.rsplit("/", 1)[-1].rsplit(".", 1)[0], outcomes(p)) for p in sys.argv[1:]]
names = sorted(set().union(*(r for _, r in runs)))
print("| test | " + " | ".join(label for label, _ in runs) + " |")
print("|---" * (len(runs) + 1) + "|")
for n in names:
    print("| %s | %s |" % (n, " | ".join(cell(r.get(n)) for _, r in runs)))
for label, r in runs:
    vals = [row["outcome"] for row in r.values()]
    print("%s: %d pass, %d FAIL, %d skip, %d not run" % (
        label, vals.count("pass"), vals.count("FAIL"), vals.count("skip"),
        len(names) - len(vals)))
first = runs[0][1]
bad = [n for n, row in first.items() if row["outcome"] == "pass" and
       any(r.get(n, {}).get("outcome") != "pass" for _, r in runs[1:])]
print("PYTORCH_TESTS", "PASS" if not bad else "FAIL: " + ", ".join(bad))
sys.exit(1 if bad else 0)
