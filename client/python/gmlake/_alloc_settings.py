# Copyright 2026 The GMLake Authors.
"""The "allocator_settings" of torch.cuda.memory._snapshot(), kept for GMLake.

PyTorch's snapshot carries the configuration its allocator runs under: the
last PYTORCH_ALLOC_CONF string given (the environment at start, then each
torch.cuda.memory._set_allocator_settings) and what it parsed from it.
Programs read it: vLLM turns expandable segments off around graph capture
and IPC when the snapshot says they are on, RDMA stacks check it, and
PyTorch's own test_cuda.py compares `expandable_segments` with its
environment after every TestMemPool test (on the H200, 26 of its tests
failed under GMLake on the missing key alone). GMLake does not use these
settings (its own are GMLAKE_CONF's), but it reports them as PyTorch would,
so such code sees the configuration it set: PyTorch still parses every
string (and refuses a bad one) before GMLake records it.
"""
import os

_MIB = 1 << 20
# PyTorch keeps roundup_power2_divisions per power-of-two interval of MiB
# (1 MiB, 2 MiB, ... 32 GiB) and reports them keyed "1", "2", "4", ...
_ROUNDUP_INTERVALS = 16

_last = None
_parsed = None


def _defaults():
    return {
        "max_split_size": -1,  # PyTorch's SIZE_MAX, as int64: no limit
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": [0] * _ROUNDUP_INTERVALS,
    }


def _fields(conf):
    """`key:value` fields of `conf`, split at commas outside brackets
    (roundup_power2_divisions:[256:1,512:2,>:4])."""
    fields, depth, start = [], 0, 0
    for i, ch in enumerate(conf):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            fields.append(conf[start:i])
            start = i + 1
    fields.append(conf[start:])
    for f in fields:
        key, _, value = f.partition(":")
        if key.strip():
            yield key.strip(), value.strip()


def _roundups(value, current):
    if not value.startswith("["):
        return [int(value)] * _ROUNDUP_INTERVALS
    out = list(current)
    for item in value.strip("[]").split(","):
        size, _, divisions = item.partition(":")
        size = size.strip()
        if size == ">":
            last = max((i for i, v in enumerate(out) if v), default=-1)
            for i in range(last + 1, _ROUNDUP_INTERVALS):
                out[i] = int(divisions)
        elif size:
            index = max(int(size), 1).bit_length() - 1
            out[min(index, _ROUNDUP_INTERVALS - 1)] = int(divisions)
    return out


def _apply(conf, parsed):
    # As PyTorch's parseArgs: each string starts these two from their
    # defaults; the other settings keep what an earlier string set.
    parsed["max_split_size"] = -1
    parsed["garbage_collection_threshold"] = 0.0
    for key, value in _fields(conf):
        if key == "max_split_size_mb":
            parsed["max_split_size"] = int(float(value) * _MIB)
        elif key == "garbage_collection_threshold":
            parsed["garbage_collection_threshold"] = float(value)
        elif key in ("expandable_segments", "release_lock_on_cudamalloc",
                     "pinned_use_cuda_host_register"):
            parsed[key] = value == "True"
        elif key == "pinned_num_register_threads":
            parsed[key] = int(value)
        elif key == "roundup_power2_divisions":
            parsed[key] = _roundups(value, parsed[key])


def _read(conf, parsed):
    # A string PyTorch accepts but this reading cannot follow keeps what
    # was read so far.
    try:
        _apply(conf, parsed)
    except ValueError:
        pass


def _started():
    """The parsed settings, from the environment on first use."""
    global _last, _parsed
    if _parsed is None:
        _parsed = _defaults()
        _last = (os.environ.get("PYTORCH_ALLOC_CONF")
                 or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or "")
        _read(_last, _parsed)
    return _parsed


def note(conf):
    """Records `conf` as the last allocator settings given (PyTorch has
    parsed it already)."""
    global _last
    parsed = _started()
    _last = conf
    _read(conf, parsed)


def settings():
    """The snapshot's "allocator_settings" dictionary, in PyTorch's keys."""
    parsed = _started()
    out = {"PYTORCH_CUDA_ALLOC_CONF": _last}
    out.update({k: v for k, v in parsed.items() if k != "roundup_power2_divisions"})
    out["roundup_power2_divisions"] = {
        str(1 << i): v for i, v in enumerate(parsed["roundup_power2_divisions"])}
    return out


def reset():
    """Forget what was noted (tests): the next read starts from the environment."""
    global _last, _parsed
    _last = _parsed = None
