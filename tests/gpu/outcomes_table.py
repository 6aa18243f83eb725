# Copyright 2026 The GMLake Authors.
"""Side-by-side outcomes of pytest runs from their JUnit XML files.

  python3 junit_table.py native.xml gmlake.xml
Prints a markdown table (one row per test: pass, FAIL, skip: reason), the
counts per run, and exits 1 when a test that passes in the first run does
not pass in a later one.
"""
import sys
import xml.etree.ElementTree as ET


def outcomes(path):
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = "%s.%s" % (case.get("classname", "").rsplit(".", 1)[-1], case.get("name"))
        result = "pass"
        for child in case:
            if child.tag in ("failure", "error"):
                msg = (child.get("message") or "").splitlines()[0:1]
                result = "FAIL: " + (msg[0][:120] if msg else child.tag)
            elif child.tag == "skipped":
                result = "skip: " + (child.get("message") or "")[:100]
        out[name] = result
    return out


runs = [(p.rsplit("/", 1)[-1].rsplit(".", 1)[0], outcomes(p)) for p in sys.argv[1:]]
names = sorted(set().union(*(r for _, r in runs)))
print("| test | " + " | ".join(label for label, _ in runs) + " |")
print("|---" * (len(runs) + 1) + "|")
for n in names:
    print("| %s | %s |" % (n, " | ".join(r.get(n, "not run").replace("|", "/") for _, r in runs)))
for label, r in runs:
    vals = list(r.values())
    print("%s: %d pass, %d fail, %d skip" % (label, sum(v == "pass" for v in vals),
          sum(v.startswith("FAIL") for v in vals), sum(v.startswith("skip") for v in vals)))
first = runs[0][1]
bad = [n for n, v in first.items() if v == "pass" and any(r.get(n) != "pass" for _, r in runs[1:])]
print("PYTORCH_TESTS", "PASS" if not bad else "FAIL: " + ", ".join(bad))
sys.exit(1 if bad else 0)
