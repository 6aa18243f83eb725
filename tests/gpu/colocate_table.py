# Prints the colocation benchmark's table (markdown) from the JSON lines
# tests/gpu/colocate_bench.sh writes: every run's turn times per role, wall
# time, peak reserved/allocated, and the medians per setting.
#
# A run cut at its limit prints no RESULT. Where the run kept turn counters
# (STATS=1: turnstats_SETTING_REP.jsonl beside the log), its finished turns
# come from them instead, marked "*" (the trainer's first is left out: its
# counters start before the model is built, so it includes start-up). They
# count in the per-turn medians, not in the wall medians.
import collections, json, os, re, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import turn_stats_table  # noqa: E402

here = os.path.dirname(os.path.abspath(sys.argv[1]))  # the run's OUT
runs = collections.defaultdict(dict)  # (setting, rep) -> {role/pair: data}
for line in open(sys.argv[1]):
    d = json.loads(line)
    key = (d["setting"], d["rep"])
    runs[key][d["data"].get("role", "pair")] = d["data"]


def turns_from_counters(setting, rep, role):
    """A cut run's finished turns of ROLE from its turn counters, or []."""
    path = os.path.join(here, f"turnstats_{setting}_{rep}.jsonl")
    if not os.path.exists(path):
        return []
    rows = [r for r in turn_stats_table.rows_of(path)
            if r["role"] == role and r["phase"].startswith("turn ") and r["ended"]]
    return [None if role == "train" and r["phase"] == "turn 1"
            else round(r["seconds"], 3) for r in rows]


# A run killed with the whole benchmark (the call's limit) has no line in
# the log at all, only its turn counters.
for name in sorted(os.listdir(here)):
    m = re.fullmatch(r"turnstats_(.+)_(\d+)\.jsonl", name)
    if m and (m.group(1), int(m.group(2))) not in runs:
        runs[(m.group(1), int(m.group(2)))]["pair"] = dict(
            ok=False, error="killed with the benchmark (no result line)")

for (s, rep), r in runs.items():
    for role in ("train", "infer"):
        if "turns" not in r.get(role, {}):
            got = turns_from_counters(s, rep, role)
            if got:
                r.setdefault(role, {})["turns"] = got
                r[role]["from_counters"] = True


def turn_list(x):
    mark = "*" if x.get("from_counters") else ""
    return ", ".join("?" if t is None else f"{t}{mark}" for t in x.get("turns", []))


print("| setting | rep | completes | trainer turns (s) | inference turns (s) | wall (s) | reserved/allocated train, infer |")
print("|---|---|---|---|---|---|---|")
walls = collections.defaultdict(list)
for (s, rep), r in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    t, i, p = r.get("train", {}), r.get("infer", {}), r.get("pair", {})
    ok = p.get("ok", False)
    ratio = lambda x: "%.3f" % (x["peak_reserved_gib"] / x["peak_allocated_gib"]) if x.get("peak_allocated_gib") else "-"
    err = "" if ok else " (" + (t.get("error") or i.get("error") or p.get("error") or "?")[:80] + ")"
    print(f"| {s} | {rep} | {'yes' if ok else 'no'}{err} | {turn_list(t)} | "
          f"{turn_list(i)} | {'%.1f' % p['wall_s'] if 'wall_s' in p else '-'} | {ratio(t)}, {ratio(i)} |")
    if ok:
        walls[s].append(p["wall_s"])
print()
print("| setting | runs completed | median wall (s) |")
print("|---|---|---|")
for s, w in walls.items():
    print(f"| {s} | {len(w)} | {statistics.median(w):.1f} |")

# Each turn's median per setting and role over the runs that finished it,
# and its ratio to empty_cache's (issue 17's per-turn target: within 1.05 x).
turns = collections.defaultdict(list)  # (setting, role) -> [turn lists]
for (s, rep), r in runs.items():
    for role in ("train", "infer"):
        got = r.get(role, {}).get("turns", [])
        if got:
            turns[(s, role)].append(got)


def medians(lists):
    n = max((len(x) for x in lists), default=0)
    out = []
    for k in range(n):
        seen = [x[k] for x in lists if k < len(x) and x[k] is not None]
        out.append(statistics.median(seen) if seen else None)
    return out


def fmt(x, form):
    return "?" if x is None else form % x


print()
print("| setting | role | median turns (s) | / empty_cache's |")
print("|---|---|---|---|")
for (s, role), lists in sorted(turns.items()):
    m = medians(lists)
    base = medians(turns.get(("empty_cache", role), []))
    rel = ", ".join("?" if a is None or b is None else "%.2f" % (a / b)
                    for a, b in zip(m, base)) if base else "-"
    print(f"| {s} | {role} | {', '.join(fmt(x, '%.3f') for x in m)} | {rel} |")
