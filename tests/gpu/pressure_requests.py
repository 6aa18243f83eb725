# Copyright 2026 The GMLake Authors.
"""gmlaked's pressure requests of a colocation run, one by one, by the turn
of the role that needed them: how many rounds each turn switch took and
what each asked. Reads gmlaked's --verbose log (colocate_bench.sh with
GMLAKED_LOG_FLAGS=--verbose: OUT/gmlaked_RUN.log) and the turn marks
beside it (STATS=1: OUT/turnstats_RUN.jsonl, whose pids name the roles).
gmlaked's totals (pressure_rounds) do not say which switch paid them.

  python3 tests/gpu/pressure_requests.py [--json] OUT
"""
import datetime
import glob
import json
import os
import re
import sys

from turn_stats_table import busy_in, phase_label

# daemon/lake_lease.cc, SendAsksLocked: "asking <session> for <bytes> on
# device <d> (<bytes> of it cached): <asker> needs <bytes> on device <d>".
ASK = re.compile(
    r"^(\S+ \S+) gmlaked: asking session \d+ \(pid (\d+)[^)]*\) for "
    r"([\d.]+) (B|KiB|MiB|GiB|TiB) on device \d+ \([^)]* of it cached\): "
    r"session \d+ \(pid (\d+)")
UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def log_time(stamp):
    # gmlaked stamps in the local time of its machine (daemon/log.cc), which
    # on the GPU machines is UTC; the marks are time.time().
    t = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def requests_of(log_path):
    out = []
    for line in open(log_path):
        m = ASK.match(line)
        if not m:
            continue
        out.append(dict(t=log_time(m.group(1)), asked_pid=int(m.group(2)),
                        gib=float(m.group(3)) * UNIT[m.group(4)] / 2**30,
                        asker_pid=int(m.group(5))))
    return out


def phase_at(marks, role, t):
    """The phase of `role` at time t, from its marks [(t, turn), ...], as
    tests/gpu/turn_stats_table.py names it (phase_label)."""
    turn, busy = 0, False
    for mt, name in marks:
        if mt > t:
            break
        now_busy = busy_in(name, role)
        if now_busy and not busy:
            turn += 1
        busy = now_busy
    return phase_label(turn, busy)


def rows_of(log_path, stats_path, run):
    lines = [json.loads(l) for l in open(stats_path) if l.strip()]
    roles = {l["pid"]: l["role"] for l in lines}
    marks = {}
    for l in lines:
        marks.setdefault(l["pid"], []).append((l["t"], l["turn"]))
    rows = []
    for r in requests_of(log_path):
        role = roles.get(r["asker_pid"], f"pid {r['asker_pid']}")
        phase = phase_at(marks.get(r["asker_pid"], []), role, r["t"])
        key = (role, phase)
        if rows and (rows[-1]["role"], rows[-1]["phase"]) == key:
            row = rows[-1]
        else:
            row = dict(run=run, role=role, phase=phase, requests=0,
                       asked_gib=[], asked_of=roles.get(r["asked_pid"], "?"),
                       first_t=r["t"], last_t=r["t"])
            rows.append(row)
        row["requests"] += 1
        row["asked_gib"].append(round(r["gib"], 2))
        row["last_t"] = r["t"]
    for row in rows:
        row["within_s"] = round(row.pop("last_t") - row.pop("first_t"), 3)
    return rows


def main(argv):
    as_json = "--json" in argv
    dirs = [a for a in argv if a != "--json"]
    rows = []
    for d in dirs:
        for log in sorted(glob.glob(os.path.join(d, "gmlaked_*.log"))):
            run = os.path.basename(log)[len("gmlaked_"):-len(".log")]
            stats = os.path.join(d, f"turnstats_{run}.jsonl")
            if os.path.exists(stats):
                # Several folders (calls) may hold runs of the same name.
                name = run if len(dirs) == 1 else f"{os.path.basename(os.path.normpath(d))}/{run}"
                rows += rows_of(log, stats, name)
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    print("| run | busy role | its phase | requests | GiB asked, each | asked of | within (s) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        gib = ", ".join(f"{g:.2f}" for g in r["asked_gib"])
        print(f"| {r['run']} | {r['role']} | {r['phase']} | {r['requests']} "
              f"| {gib} | {r['asked_of']} | {r['within_s']} |")


if __name__ == "__main__":
    main(sys.argv[1:])
