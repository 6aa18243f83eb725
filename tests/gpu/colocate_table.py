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
    err = "" if ok else " (" + (t.get("error") or i.get("error") or "?")[:80] + ")"
    print(f"| {s} | {rep} | {'yes' if ok else 'no'}{err} | {', '.join(str(x) for x in t.get('turns', []))} | "
          f"{', '.join(str(x) for x in i.get('turns', []))} | {p.get('wall_s', 0):.1f} | {ratio(t)}, {ratio(i)} |")
    if ok:
        walls[s].append(p["wall_s"])
print()
print("| setting | runs completed | median wall (s) |")
print("|---|---|---|")
for s, w in walls.items():
    print(f"| {s} | {len(w)} | {statistics.median(w):.1f} |")
