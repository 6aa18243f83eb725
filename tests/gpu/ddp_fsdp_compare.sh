#!/bin/bash
# Copyright 2026 The GMLake Authors.
#
# On the GPU machine (two GPUs: kind nvidia-h200-x2, carry [".gpu"] after
# tests/gpu/bundle_python.sh here), from the repository root:
#   bash tests/gpu/ddp_fsdp_compare.sh            # RUNS=3 by default
# Environment: RUNS, STEPS_DDP (20), STEPS_FSDP (16), COMPARE ("ddp fsdp":
# which workloads), NPROC (2), OUT.
# DDP (workloads/ddp_train.py) and FSDP2 (fsdp_compare.py), each on
# two ranks with torch.distributed.run, with PyTorch's allocator and with
# GMLake, RUNS times, interleaved. GMLake comes from the wheel in a fresh
# venv and is enabled by the launcher around the unedited scripts, which run
# with --allocator native and so read torch.cuda.memory_stats(): GMLake
# answers it. Per run and rank: peak allocated and reserved, their ratio,
# tokens/s; per workload: native's own run-to-run loss spread next to
# GMLake's largest distance from native. During GMLake's first DDP run,
# nvidia-smi's process list is sampled (which GPUs each rank touches).
# Raw logs and results.json go to $OUT.
set -uo pipefail
source tests/gpu/wheel_venv.sh
OUT="${OUT:-$(mktemp -d /tmp/gmlake-ddp-fsdp.XXXXXX)}"
RUNS="${RUNS:-3}"
NPROC="${NPROC:-2}"
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
cd "${WORKLOADS}"

train() {  # workload mode run
  local script steps log="${OUT}/$1_$2_$3.log"
  case "$1" in
    ddp) script=ddp_train.py; steps="${STEPS_DDP:-20}" ;;
    fsdp) script=fsdp_compare.py; steps="${STEPS_FSDP:-16}" ;;
  esac
  local cmd=("${PY}" -m torch.distributed.run --standalone --nproc_per_node "${NPROC}"
             "${script}" --allocator native --steps "${steps}")
  [[ "$2" == gmlake ]] && cmd=("${GMLAKE_BIN}/gmlake" run -- "${cmd[@]}")
  local sampler=""
  if [[ "$1/$2/$3" == ddp/gmlake/1 ]]; then
    (while sleep 2; do
       nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv,noheader
     done) > "${OUT}/nvidia_smi_ddp_gmlake.txt" 2>&1 &
    sampler=$!
  fi
  timeout 900 "${cmd[@]}" > "${log}" 2>&1
  echo "$1 $2 run $3: exit $?, $(grep -c '^RESULT' "${log}") RESULT lines"
  [[ -n "${sampler}" ]] && kill "${sampler}" 2>/dev/null
  grep -E "^gmlake:|Error" "${log}" | sort | uniq -c | head -5
}

for run in $(seq 1 "${RUNS}"); do
  for workload in ${COMPARE:-ddp fsdp}; do
    for mode in native gmlake; do
      train "${workload}" "${mode}" "${run}"
    done
  done
done

"${PY}" - "${OUT}" "${RUNS}" <<'PY'
import glob, json, os, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
results = {}
for wl in ("ddp", "fsdp"):
    if not glob.glob(os.path.join(out, f"{wl}_*.log")):
        continue
    table = {}
    for mode in ("native", "gmlake"):
        for run in range(1, runs + 1):
            path = os.path.join(out, f"{wl}_{mode}_{run}.log")
            rows = [json.loads(l.split(" ", 1)[1]) for l in open(path)
                    if l.startswith("RESULT ")] if os.path.exists(path) else []
            table.setdefault(mode, []).append({r["rank"]: r for r in rows})
    print(f"\n== {wl}: per run (ranks 0/1)")
    print("%-7s %3s %12s %12s %7s %10s" % ("mode", "run", "peak alloc", "peak res", "ratio", "tok/s"))
    summary = {}
    for mode, rs in table.items():
        ratios, toks = [], []
        for i, byrank in enumerate(rs, 1):
            for rank, r in sorted(byrank.items()):
                print("%-7s %3d %12.2f %12.2f %7.3f %10.0f  rank %d" % (
                    mode, i, r["peak_alloc"] / 2**30, r["peak_reserved"] / 2**30,
                    r["ratio"], r["tok_s"], rank))
                ratios.append(r["ratio"])
            if byrank:
                toks.append(sum(r["tok_s"] for r in byrank.values()))
        summary[mode] = dict(ratio_median=statistics.median(ratios) if ratios else None,
                             ratios=ratios, tok_s_total=toks,
                             tok_s_median=statistics.median(toks) if toks else None)
    # Losses: native's run-to-run spread, and GMLake's distance from native.
    def losses(mode):
        return [{rank: r["losses"] for rank, r in byrank.items()} for byrank in table[mode] if byrank]
    nat, gm = losses("native"), losses("gmlake")
    spread = max((abs(a - b) for i in range(len(nat)) for j in range(i + 1, len(nat))
                  for rank in nat[i] for a, b in zip(nat[i][rank], nat[j].get(rank, []))),
                 default=0.0)
    dist = max((min(abs(a - b) for n in nat for b in [n[rank][s]])
                for g in gm for rank in g for s, a in enumerate(g[rank])
                if all(rank in n and s < len(n[rank]) for n in nat)), default=float("nan"))
    same_first = 0
    if nat and gm:
        for s in range(len(nat[0][0])):
            if all(g[0][s] == nat[0][0][s] for g in gm):
                same_first += 1
            else:
                break
    verdict = "within" if dist <= spread else "OUTSIDE"
    print(f"losses: native run-to-run spread {spread:.2e}; GMLake's largest distance "
          f"from the nearest native run {dist:.2e} ({verdict} native's spread); "
          f"rank 0 identical to native run 1 for the first {same_first} steps")
    for mode in ("native", "gmlake"):
        s = summary[mode]
        print(f"{mode}: reserved/allocated median {s['ratio_median']}, "
              f"tok/s (both ranks) median {s['tok_s_median']} runs {s['tok_s_total']}")
    summary["loss_spread_native"], summary["loss_distance_gmlake"] = spread, dist
    results[wl] = summary
smi = os.path.join(out, "nvidia_smi_ddp_gmlake.txt")
if os.path.exists(smi):
    gpus = {}
    for line in open(smi):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            gpus.setdefault(parts[0], set()).add(parts[1])
    print("\nnvidia-smi during GMLake's DDP run: GPUs per process:",
          {pid: sorted(b) for pid, b in gpus.items()})
    results["gpus_per_process"] = {pid: sorted(b) for pid, b in gpus.items()}
json.dump(results, open(os.path.join(out, "results.json"), "w"), indent=1)
print("\nresults:", os.path.join(out, "results.json"))
PY
