#!/usr/bin/env python3
# Copyright 2026 The GMLake Authors.
#
# Counts the test cases of one `bazel test` invocation from its build event
# file (--build_event_json_file): only the test.xml reports that this
# invocation names (run now or taken from a cache), never those that earlier
# runs left under bazel-testlogs/.
#
#   test_results.py BEP.json BAZEL_EXIT_CODE
#
# Prints "N skipped (...)" when some were, then the last line CI reads:
# "N passed, N failed". A test case counts once per run (--runs_per_test);
# a test whose binary failed without a report of failures (crash, timeout)
# counts as one failure, and so does a failed invocation with no failed test
# (a build error). Exit status 0.

import json
import sys
import urllib.parse
import xml.etree.ElementTree as ET


def xml_path(uri):
    if not uri.startswith("file://"):
        return None
    return urllib.parse.unquote(uri[len("file://"):])


def count_report(path):
    """(passed, failed, skipped) test cases in one test.xml."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif (case.get("result") == "skipped"
              or case.find("skipped") is not None):
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: test_results.py BEP.json BAZEL_EXIT_CODE")
    # The last attempt of each (label, run, shard) decides.
    results = {}
    try:
        events = open(sys.argv[1])
    except OSError:
        events = []
    for line in events:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if "testResult" not in event:
            continue
        key = event["id"]["testResult"]
        ident = (key["label"], key.get("run", 1), key.get("shard", 1))
        attempt = key.get("attempt", 1)
        if ident in results and results[ident][0] > attempt:
            continue
        results[ident] = (attempt, event["testResult"])
    passed = failed = skipped = 0
    skipped_labels = set()
    for (label, _, _), (_, result) in sorted(results.items()):
        ok = result.get("status") in ("PASSED", "FLAKY")
        counts = None
        for out in result.get("testActionOutput", []):
            if out.get("name") == "test.xml":
                path = xml_path(out.get("uri", ""))
                counts = count_report(path) if path else None
        p, f, s = counts if counts else (0, 0, 0)
        if not ok and f == 0:
            f = 1  # crashed, timed out or no report: still a failure
        if ok and p + f + s == 0:
            p = 1  # a passing test with no cases reported (sh_test)
        passed, failed, skipped = passed + p, failed + f, skipped + s
        if s:
            skipped_labels.add(label)
    if int(sys.argv[2]) != 0 and failed == 0:
        failed = 1  # bazel failed without a failed test: the build did
    if skipped:
        print("%d skipped (%s)" % (skipped, ", ".join(sorted(skipped_labels))))
    print("%d passed, %d failed" % (passed, failed))


if __name__ == "__main__":
    main()
