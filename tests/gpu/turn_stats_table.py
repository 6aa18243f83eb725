# Copyright 2026 The GMLake Authors.
"""Per-turn deltas of GMLake's counters from turn_stats/sitecustomize.py's
lines (GMLAKE_TURN_STATS files of colocate_bench.sh, STATS=1): for each run
and role, what each of its turns cost (driver time by call, waiting for
chunks, chunks made and given back; under native PyTorch its cudaMalloc and
cudaFree calls and retries) and what it did while the other role worked
(answering pressure). Prints a table; --json prints the rows.

  python3 tests/gpu/turn_stats_table.py [--json] OUT/turnstats_*.jsonl
"""
import json
import os
import sys

KEYS = [
    ("driver_us", "gmlake.driver_us"),
    ("create_us", "gmlake.driver_time_us.create"),
    ("map_us", "gmlake.driver_time_us.map"),
    ("set_access_us", "gmlake.driver_time_us.set_access"),
    ("unmap_us", "gmlake.driver_time_us.unmap"),
    ("release_us", "gmlake.driver_time_us.release"),
    ("acquire_us", "gmlake.acquire_us"),
    ("slow_path_us", "gmlake.slow_path_us"),
    ("chunks_acquired", "gmlake.chunks_acquired"),
    ("chunks_returned", "gmlake.chunks_returned"),
    ("stitches", "gmlake.stitches"),
    ("reclaims", "gmlake.reclaims"),
    ("reclaim_returned_mib", "gmlake.reclaim_returned_bytes"),
    ("host_waits", "gmlake.host_waits"),
    # Native PyTorch (no GMLake): cudaMalloc / cudaFree calls, and
    # allocations retried after freeing the whole cache.
    ("cuda_mallocs", "torch.num_device_alloc"),
    ("cuda_frees", "torch.num_device_free"),
    ("alloc_retries", "torch.num_alloc_retries"),
]


def busy_in(turn, role):
    """Whether `role` works while the pair's turn mark reads `turn`: its own
    turn, or its last turns after the other role's "done-OTHER"."""
    other = "infer" if role == "train" else "train"
    return turn in (role, "done-" + other)


def phase_label(turn, busy):
    """A role's phase: "turn N" while busy, "idle after N" between its
    turns, "start" before its first."""
    if busy:
        return f"turn {turn}"
    return f"idle after {turn}" if turn else "start"


def rows_of(path):
    lines = [json.loads(l) for l in open(path) if l.strip()]
    run = os.path.basename(path).replace("turnstats_", "").replace(".jsonl", "")
    out = []
    for pid in sorted({l["pid"] for l in lines}):
        mine = [l for l in lines if l["pid"] == pid]
        role = mine[0]["role"]
        turn, was_busy = 0, False
        rows = []
        for a, b in zip(mine, mine[1:]):
            # No counters yet: CUDA not started, so all of them are zero.
            if "error" in a["stats"] or "error" in b["stats"]:
                continue
            busy = busy_in(a["turn"], role)
            if busy and not was_busy:
                turn += 1
            phase = phase_label(turn, busy)
            row = dict(run=run, role=role, phase=phase,
                       seconds=round(b["t"] - a["t"], 3))
            for name, key in KEYS:
                d = b["stats"].get(key, 0) - a["stats"].get(key, 0)
                if name.endswith("_mib"):
                    d = d / 2**20
                row[name] = round(d, 1) if isinstance(d, float) else d
            # The other role ending (its done- line) inside this one's turn
            # splits it in two: one turn, summed.
            if busy and was_busy and rows:
                for k, v in row.items():
                    if k not in ("run", "role", "phase"):
                        rows[-1][k] = round(rows[-1][k] + v, 3)
            else:
                rows.append(row)
            # Whether the line that closed this row handed the turn on: a
            # cut run's last turn has none (its counters end at the kill or
            # at the other role's exit mark).
            rows[-1]["ended"] = not busy_in(b["turn"], role)
            was_busy = busy
        out += rows
    return out


def main(argv):
    as_json = "--json" in argv
    rows = [r for p in argv if p != "--json" for r in rows_of(p)]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    cols = ["run", "role", "phase", "seconds"] + [n for n, _ in KEYS]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
