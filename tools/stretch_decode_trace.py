# Copyright 2026 The GMLake Authors.
"""A stand-in trace for a long decode, until one is recorded on a GPU
(tests/gpu/record_traces.sh colocate_infer_long).

traces/colocate_infer is the colocation pair's inference role alone: batch
200, prompts of 896 tokens, 96 new tokens a turn, 2 turns. Its 56 KV tensors
(28 layers, K and V) grow by U = 1,228,800 bytes a token, each step's copy
allocated before the last one is freed. This stretches each turn's decode to
LAST tokens in the cache by repeating the decode period at 910 tokens (from
the first allocation of a 910-token tensor to the first of a 911-token one)
with the KV sizes grown a token per repeat, and scales every batch-sized
request made after the model loaded (a multiple of 200 bytes) to batch B.
Every allocation gets an id of its own. At LAST=1215 and B=48 (the pair's
inference role at 320 new tokens, docs/benchmarks.md, fourth session) its
peak live is 25.34 GiB; the role measured on an H100 peaked at 25.34 GiB
allocated.

  python3 tools/stretch_decode_trace.py traces/colocate_infer.trace.gz \
      /tmp/infer_long48.trace.gz 1215 48
"""
import gzip, sys
src, dst, last, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
U = 1228800  # bytes per token of one K or V tensor at batch 200
ev = [l.split() for l in gzip.open(src, "rt") if not l.startswith("#")]
ev = [e for e in ev if e[0] in ("a", "f", "F")]
is_kv = lambda s: s % U == 0 and 896 * U <= s <= 2000 * U
first_kv = next(i for i, e in enumerate(ev) if e[0] == "a" and is_kv(int(e[2])))
def scale(i, size):
    if i < first_kv or size % 200 != 0:
        return size
    return (size * batch // 200 + 511) // 512 * 512
out, live, nid = [], {}, [1]
def emit_a(i, addr, size):
    if addr in live:  # a leak in the template: free it first
        out.append(("f", live[addr], 0)); out.append(("F", live.pop(addr), 0))
    live[addr] = nid[0]; nid[0] += 1
    out.append(("a", live[addr], scale(i, size)))
    return live[addr]
def emit_free(kind, addr):
    if addr in live:
        out.append((kind, live[addr], 0))
        if kind == "F": live.pop(addr)
        return True
    return False
# Turn boundaries: each turn's first period of 910 tokens and its last KV alloc.
starts = [i for i, e in enumerate(ev) if e[0] == "a" and int(e[2]) == 910 * U]
turn_p = []
j = 0
while j < len(starts):
    s = starts[j]; turn_p.append(s); j += 56
ends = {}
for t, p in enumerate(turn_p):
    nxt = next(i for i in range(p, len(ev)) if ev[i][0] == "a" and int(ev[i][2]) == 911 * U)
    span = range(p, turn_p[t + 1] if t + 1 < len(turn_p) else len(ev))
    top = max(int(ev[i][2]) for i in span if ev[i][0] == "a" and 896 * U < int(ev[i][2]) < 1792 * U)
    lastkv = max(i for i in span if ev[i][0] == "a" and int(ev[i][2]) == top)
    # resume after the last KV free of the turn's decode
    resume = max(i for i in range(p, lastkv + 200) if ev[i][0] == "F" and is_kv(int(ev[i][2])) and int(ev[i][2]) < top) + 1
    ends[p] = (nxt, resume)
i = 0
kv_final = {}
while i < len(ev):
    if i in ends:
        nxt, resume = ends[i]
        tmpl = ev[i:nxt]
        prev_kv = None  # ids of the previous iteration's KV allocs, in order
        # the template frees KV of 909U allocated in the original previous period
        for k in range(last - 910 + 1):
            kv_ids, kv_free_n = [], 0
            for e in tmpl:
                size = int(e[2]) if len(e) > 2 else 0
                if e[0] == "a":
                    if is_kv(size):
                        kv_ids.append(emit_a(i, e[1] + "#kv%d" % len(kv_ids), size + k * U))
                        live.pop(e[1] + "#kv%d" % (len(kv_ids) - 1))
                    else:
                        emit_a(i, e[1], size)
                elif is_kv(size):
                    if e[0] == "f":
                        if prev_kv is None:
                            emit_free("f", e[1]); emit_free("F", e[1])
                        else:
                            x = prev_kv[kv_free_n]; out.append(("f", x, 0)); out.append(("F", x, 0))
                        kv_free_n += 1
                else:
                    emit_free(e[0], e[1])
            prev_kv = kv_ids
        # The original's last KV allocs of this turn, in order, stand for
        # the synthesized last iteration's: their frees free those.
        last_size = max(int(ev[j][2]) for j in range(i, resume) if ev[j][0] == "a" and is_kv(int(ev[j][2])))
        orig_last = [ev[j][1] for j in range(i, resume) if ev[j][0] == "a" and int(ev[j][2]) == last_size]
        kv_final.update(zip(orig_last, prev_kv))
        i = resume
        continue
    e = ev[i]; size = int(e[2])
    if e[0] == "a":
        emit_a(i, e[1], size)
    elif e[1] in kv_final and is_kv(size):
        out.append((e[0], kv_final[e[1]], 0))
        if e[0] == "F": kv_final.pop(e[1])
    else:
        emit_free(e[0], e[1])
    i += 1
with gzip.open(dst, "wt") as f:
    f.write("# action addr size stream (synthetic long decode)\n")
    for k, a, s in out:
        f.write(f"{k} {a} {s} 0\n")
print(len(out), "events,", sum(1 for o in out if o[0] == "a"), "allocs")
