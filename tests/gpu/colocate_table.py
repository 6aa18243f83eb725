# Prints the colocation benchmark's table (markdown) from the JSON lines
# tests/gpu/colocate_bench.sh writes: every run's turn times per role, wall
# time, peak reserved/allocated, and the medians per setting.
import collections, json, statistics, sys

runs = collections.defaultdict(dict)  # (setting, rep) -> {role/pair: data}
for line in open(sys.argv[1]):
    d = json.loads(line)
    key = (d["setting"], d["rep"])
    runs[key][d["data"].get("role", "pair")] = d["data"]

print("| setting | rep | completes | trainer turns (s) | inference turns (s) | wall (s) | reserved/allocated train, infer |")
print("|---|---|---|---|---|---|---|")
walls = collections.defaultdict(list)
for (s, rep), r in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    t, i, p = r.get("train", {}), r.get("infer", {}), r.get("pair", {})
    ok = p.get("ok", False)
    ratio = lambda x: "%.3f" % (x["peak_reserved_gib"] / x["peak_allocated_gib"]) if x.get("peak_allocated_gib") else "-"
    err = "" if ok else " (" + (t.get("error") or i.get("error") or p.get("error") or "?")[:80] + ")"
    print(f"| {s} | {rep} | {'yes' if ok else 'no'}{err} | {', '.join(str(x) for x in t.get('turns', []))} | "
          f"{', '.join(str(x) for x in i.get('turns', []))} | {p.get('wall_s', 0):.1f} | {ratio(t)}, {ratio(i)} |")
    if ok:
        walls[s].append(p["wall_s"])
print()
print("| setting | runs completed | median wall (s) |")
print("|---|---|---|")
for s, w in walls.items():
    print(f"| {s} | {len(w)} | {statistics.median(w):.1f} |")

# Each turn's median per setting and role, and its ratio to empty_cache's
# (issue 17's per-turn target: within 1.05 x).
turns = collections.defaultdict(list)  # (setting, role) -> [turn lists]
for (s, rep), r in runs.items():
    if r.get("pair", {}).get("ok"):
        for role in ("train", "infer"):
            turns[(s, role)].append(r.get(role, {}).get("turns", []))


def medians(lists):
    n = min((len(x) for x in lists), default=0)
    return [statistics.median(x[k] for x in lists) for k in range(n)]


print()
print("| setting | role | median turns (s) | / empty_cache's |")
print("|---|---|---|---|")
for (s, role), lists in sorted(turns.items()):
    m = medians(lists)
    base = medians(turns.get(("empty_cache", role), []))
    rel = ", ".join("%.2f" % (a / b) for a, b in zip(m, base)) if base else "-"
    print(f"| {s} | {role} | {', '.join('%.3f' % x for x in m)} | {rel} |")
