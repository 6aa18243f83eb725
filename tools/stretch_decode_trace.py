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

  python3 tools/stretch_decode_trace.py traces/colocate_infer.trace.gz \\
      /tmp/infer_long48.trace.gz 1215 48
"""
import gzip
import sys

U = 1228800        # bytes a token of one K or V tensor at batch 200
BATCH = 200        # the recorded batch
PROMPT = 896       # tokens in every recorded prompt
PERIOD = 910       # the KV size (tokens) of the decode period repeated
KV_TENSORS = 56    # 28 layers, K and V


def is_kv(size):
    return size % U == 0 and PROMPT * U <= size <= 2000 * U


def is_decode_kv(size):  # the prefill's temporaries are 2 x the prompt
    return PROMPT * U < size < 2 * PROMPT * U


def load(path):
    events = [l.split() for l in gzip.open(path, "rt") if not l.startswith("#")]
    return [(k, addr, int(size)) for k, addr, size, *_ in events if k in "afF"]


def turns(ev):
    """For each turn: (start, end) of its period at PERIOD tokens, and where
    the recorded events go on once its decode is done."""
    starts = [i for i, (k, _, s) in enumerate(ev) if k == "a" and s == PERIOD * U]
    firsts = starts[::KV_TENSORS]  # one period start per turn
    out = []
    for t, p in enumerate(firsts):
        end = next(i for i in range(p, len(ev)) if ev[i][0] == "a" and ev[i][2] == (PERIOD + 1) * U)
        span = range(p, firsts[t + 1] if t + 1 < len(firsts) else len(ev))
        top = max(ev[i][2] for i in span if ev[i][0] == "a" and is_decode_kv(ev[i][2]))
        last_alloc = max(i for i in span if ev[i][0] == "a" and ev[i][2] == top)
        # After the last free of a KV tensor smaller than the last ones.
        resume = 1 + max(i for i in range(p, last_alloc + 200)
                         if ev[i][0] == "F" and is_kv(ev[i][2]) and ev[i][2] < top)
        last_addrs = [ev[i][1] for i in range(p, resume) if ev[i][0] == "a" and ev[i][2] == top]
        out.append((p, end, resume, last_addrs))
    return out


class Writer:
    """Events with ids of their own; `live` maps a recorded address to the
    id now allocated there."""

    def __init__(self, first_kv, batch):
        self.out, self.live, self.next_id = [], {}, 1
        self.first_kv, self.batch = first_kv, batch

    def scaled(self, at, size):
        if at < self.first_kv or size % BATCH != 0:
            return size
        return (size * self.batch // BATCH + 511) // 512 * 512

    def alloc(self, at, size, addr=None):
        if addr in self.live:  # a leak of the repeated period: free it first
            self.free_id(self.live.pop(addr))
        new = self.next_id
        self.next_id += 1
        if addr is not None:
            self.live[addr] = new
        self.out.append(("a", new, self.scaled(at, size)))
        return new

    def free_id(self, id_):
        self.out.append(("f", id_, 0))
        self.out.append(("F", id_, 0))

    def free(self, kind, addr):
        if addr in self.live:
            self.out.append((kind, self.live[addr], 0))
            if kind == "F":
                self.live.pop(addr)


def main(src, dst, last, batch):
    ev = load(src)
    first_kv = next(i for i, (k, _, s) in enumerate(ev) if k == "a" and is_kv(s))
    w = Writer(first_kv, batch)
    at_turn = {t[0]: t for t in turns(ev)}
    final = {}  # recorded address of a turn's last KV tensor -> our id
    i = 0
    while i < len(ev):
        if i in at_turn:
            _, end, resume, last_addrs = at_turn[i]
            prev = None  # the KV ids of the repeat before, in order
            for k in range(last - PERIOD + 1):
                ids, freed = [], 0
                for kind, addr, size in ev[i:end]:
                    if kind == "a":
                        if is_kv(size):
                            ids.append(w.alloc(i, size + k * U))
                        else:
                            w.alloc(i, size, addr)
                    elif not is_kv(size):
                        w.free(kind, addr)
                    elif kind == "f":  # the KV copy of the step before
                        if prev is None:
                            w.free("f", addr)
                            w.free("F", addr)
                        else:
                            w.free_id(prev[freed])
                        freed += 1
                prev = ids
            final.update(zip(last_addrs, prev))
            i = resume
            continue
        kind, addr, size = ev[i]
        if kind == "a":
            w.alloc(i, size, addr)
        elif addr in final and is_kv(size):
            w.out.append((kind, final[addr], 0))
            if kind == "F":
                final.pop(addr)
        else:
            w.free(kind, addr)
        i += 1
    with gzip.open(dst, "wt") as f:
        f.write("# action addr size stream (synthetic long decode)\n")
        for kind, id_, size in w.out:
            f.write(f"{kind} {id_} {size} 0\n")
    print(len(w.out), "events,", sum(1 for o in w.out if o[0] == "a"), "allocs")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
