# Copyright 2026 The GMLake Authors.
"""On the GPU machine: what PyTorch's test_cuda.py asks of an allocator, run
natively and under GMLake (issue 18), each test in its own process.

  graph_capture_simple     test_graph_capture_simple: capture on a side
                           stream, replay, check the sum
  graph_training_sgd       a whole training step (static inputs, SGD)
                           captured and replayed 10 times, parameters equal
                           to eager's; replays allocate nothing
  graph_optims             TestCudaOptims.test_graph_optims: capturable
                           Adam and AdamW steps replayed, against eager
  make_graphed_callables   test_graph_make_graphed_callables, two modules,
                           training against an eager copy
  graph_side_stream        test_cuda_graph_allocator_propagates_stream: an
                           allocation on a stream joined into the capture
                           comes from the graph's pool
                           (_cuda_checkPoolLiveAllocations)
  mempool                  TestMemPool basics: use_count, use_mem_pool
                           routes this thread's allocations to the pool,
                           the pool's live set, release
  memory_stats             memory_allocated/max/reset_peak, memory_stats,
                           memory_snapshot; under the native door the C++
                           getDeviceStats agrees with GMLake's own figures
  oom_observer             torch.OutOfMemoryError and
                           _cuda_attach_out_of_memory_observer
  profiler_memory          torch.profiler(profile_memory=True) sees a 4 MiB
                           CUDA allocation
  cudnn_conv               cudnn.benchmark conv2d forward+backward against
                           the CPU (cuDNN sizes workspaces by cacheInfo)
  ipc_share                torch.multiprocessing (spawn): a child adds 1 to a
                           CUDA tensor the parent shared; the parent sees it
  compile_reduce_overhead  torch.compile(mode="reduce-overhead") of a small
                           MLP training step, against eager
  mempool_no_split         MemPool(no_split=True), of GMLake's memory and of
                           another allocator's (cuMemAlloc): two 1 MiB
                           tensors are two segments of one block each, one
                           segment in a pool that splits
  nccl_register_hooks      NCCL user buffer registration: a 1-rank NCCL
                           group, a MemPool of another allocator (cuMemAlloc,
                           built here: this torch's NCCL has no ncclMemAlloc)
                           given to register_mem_pool, an all_reduce in it;
                           a trace tracker of our own (C++, built here) sees
                           a SEGMENT_ALLOC with the pool's id for each of its
                           segments and a SEGMENT_FREE for each once the pool
                           is gone (what ProcessGroupNCCL's hooks register and
                           deregister)

Run: python3 tests/gpu/torch_door_test.py [--label NAME] [--only a,b]
     (natively, or under `gmlake run --`). Prints one JSON line per test
     ({"label", "test", "pass", "door", "error", "seconds"}), then a table.
     --table A.jsonl B.jsonl ... prints the table of several runs side by
     side. Exit status 0 when every test passed.
"""
import json
import os
import subprocess
import sys
import time

TIMEOUT_S = {"compile_reduce_overhead": 480, "ipc_share": 180}
DEFAULT_TIMEOUT_S = 180
MiB = 1 << 20


def _door():
    if os.environ.get("GMLAKE_ENABLE") != "1":
        return "none"
    import gmlake._torch as gt
    return gt.door_in_use or "not enabled"


# --- the tests: each raises on failure, returns a small dict of figures ---


def graph_capture_simple(torch):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a = torch.full((1000,), 1, device="cuda")
        g = torch.cuda.CUDAGraph()
        torch.cuda.empty_cache()
        g.capture_begin()
        b = a
        for _ in range(10):
            b = b + 1
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    g.replay()
    got = b.sum().item()
    assert got == 11000.0, "sum %s, expected 11000" % got
    return {"sum": got}


def _mlp(torch, d_in=256, h=512, d_out=64):
    return torch.nn.Sequential(torch.nn.Linear(d_in, h), torch.nn.ReLU(),
                               torch.nn.Linear(h, d_out)).cuda()


def _close(torch, m1, m2, what, rtol=1e-4, atol=1e-5):
    for (n, p1), p2 in zip(m1.named_parameters(), m2.parameters()):
        if not torch.allclose(p1, p2, rtol=rtol, atol=atol):
            raise AssertionError("%s: parameter %s differs from eager by %g" % (
                what, n, (p1 - p2).abs().max().item()))


def graph_training_sgd(torch):
    import copy
    torch.manual_seed(0)
    model = _mlp(torch)
    eager = copy.deepcopy(model)
    loss_fn = torch.nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    static_x = torch.randn(128, 256, device="cuda")
    static_y = torch.randn(128, 64, device="cuda")

    def step(m, o, x, y):
        o.zero_grad(set_to_none=False)
        loss = loss_fn(m(x), y)
        loss.backward()
        o.step()
        return loss

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up, as the PyTorch docs do
        for _ in range(3):
            step(model, opt, static_x, static_y)
            step(eager, eager_opt, static_x, static_y)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_loss = step(model, opt, static_x, static_y)
    # Capture ran nothing: the eager copy takes the same step on replay 1.
    torch.cuda.synchronize()
    after_first = None
    losses = []
    for i in range(10):
        x, y = torch.randn(128, 256, device="cuda"), torch.randn(128, 64, device="cuda")
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        eager_loss = step(eager, eager_opt, x, y)
        torch.cuda.synchronize()
        losses.append(static_loss.item())
        assert abs(losses[-1] - eager_loss.item()) < 1e-3 * max(1, abs(eager_loss.item())), (
            "replay %d loss %g, eager %g" % (i, losses[-1], eager_loss.item()))
        if i == 0:
            after_first = torch.cuda.memory_allocated()
    _close(torch, model, eager, "after 10 replays")
    leaked = torch.cuda.memory_allocated() - after_first
    assert leaked == 0, "replays 2-10 allocated %d bytes" % leaked
    g.reset()
    return {"losses": [round(v, 4) for v in losses[:3]]}


def graph_optims(torch):
    """TestCudaOptims.test_graph_optims: a capturable optimizer's step,
    captured and replayed, against the same optimizer run eagerly."""
    torch.manual_seed(0)
    steps, warmup = 7, 3
    for cls in (torch.optim.Adam, torch.optim.AdamW):
        ref = [torch.randn(64, 32, device="cuda", requires_grad=True) for _ in range(2)]
        graphed = [p.detach().clone().requires_grad_() for p in ref]
        grads = [[torch.randn_like(p) for p in ref] for _ in range(steps)]
        eager_opt = cls(ref, lr=0.1)
        for i in range(steps):
            for p, g in zip(ref, grads[i]):
                p.grad = g
            eager_opt.step()
        opt = cls(graphed, lr=0.1, capturable=True)
        static_grads = [torch.zeros_like(p) for p in graphed]
        for p, g in zip(graphed, static_grads):
            p.grad = g
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # the first steps make the state
            for i in range(warmup):
                for sg, g in zip(static_grads, grads[i]):
                    sg.copy_(g)
                opt.step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            opt.step()
        for i in range(warmup, steps):
            for sg, g in zip(static_grads, grads[i]):
                sg.copy_(g)
            graph.replay()
        torch.cuda.synchronize()
        for a, b in zip(ref, graphed):
            if not torch.allclose(a, b, rtol=1.3e-6, atol=1e-5):
                raise AssertionError("%s: replayed step differs from eager by %g" % (
                    cls.__name__, (a - b).abs().max().item()))
    return {}


def make_graphed_callables(torch):
    import copy
    torch.manual_seed(0)
    m1 = torch.nn.Linear(64, 128).cuda()
    m2 = torch.nn.Linear(128, 16).cuda()
    e1, e2 = copy.deepcopy(m1), copy.deepcopy(m2)
    x = torch.randn(32, 64, device="cuda")
    h = torch.randn(32, 128, device="cuda", requires_grad=True)
    g1, g2 = torch.cuda.make_graphed_callables((m1, m2), ((x,), (h,)))
    opt = torch.optim.SGD(list(m1.parameters()) + list(m2.parameters()), lr=0.1)
    eopt = torch.optim.SGD(list(e1.parameters()) + list(e2.parameters()), lr=0.1)
    for _ in range(5):
        data = torch.randn(32, 64, device="cuda")
        for a, b, o in ((g1, g2, opt), (e1, e2, eopt)):
            o.zero_grad(set_to_none=True)
            loss = b(torch.relu(a(data))).square().mean()
            loss.backward()
            o.step()
    torch.cuda.synchronize()
    _close(torch, m1, e1, "module 1")
    _close(torch, m2, e2, "module 2")
    return {}


def graph_side_stream(torch):
    x = torch.randn(1 << 20, device="cuda")
    y = torch.rand_like(x)
    g = torch.cuda.CUDAGraph()
    s0, s1 = torch.cuda.Stream(), torch.cuda.Stream()
    s0.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s0):
        g.capture_begin()
        z = x + y
    with torch.cuda.stream(s1):
        s1.wait_stream(s0)
        w = z + y  # s1 joined the capture: its memory is the graph's
    s0.wait_stream(s1)
    with torch.cuda.stream(s0):
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s0)
    g.replay()
    torch.cuda.synchronize()
    assert torch.allclose(w, x + 2 * y), "side-stream result wrong"
    dev = torch.cuda.current_device()
    in_pool = torch._C._cuda_checkPoolLiveAllocations(dev, g.pool(), {z.data_ptr(), w.data_ptr()})
    assert in_pool, "the graph's pool does not hold exactly z and w"
    return {}


def mempool(torch):
    dev = torch.cuda.current_device()
    pool = torch.cuda.MemPool()
    assert pool.use_count() == 1, "new pool use_count %d" % pool.use_count()
    with torch.cuda.use_mem_pool(pool):
        assert pool.use_count() == 2, "in use_mem_pool use_count %d" % pool.use_count()
        a = torch.ones(4 * MiB, device="cuda")
    assert pool.use_count() == 1, "after use_mem_pool use_count %d" % pool.use_count()
    b = torch.ones(4 * MiB, device="cuda")  # not the pool's
    assert torch._C._cuda_checkPoolLiveAllocations(dev, pool.id, {a.data_ptr()}), \
        "pool's live set is not exactly the tensor made inside use_mem_pool"
    del a
    assert torch._C._cuda_checkPoolLiveAllocations(dev, pool.id, set()), "freed block still live"
    # The pool's freed memory is its own: a new allocation outside does not get it.
    with torch.cuda.use_mem_pool(pool):
        c = torch.ones(4 * MiB, device="cuda")
    assert c.sum().item() == 4 * MiB and b.sum().item() == 4 * MiB
    del c
    reserved = torch.cuda.memory_reserved()
    del pool
    torch.cuda.empty_cache()
    return {"reserved_before_release": reserved, "reserved_after": torch.cuda.memory_reserved()}


def memory_stats(torch):
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_allocated() - base == 4 * MiB, "allocated grew by %d" % (
        torch.cuda.memory_allocated() - base)
    assert torch.cuda.max_memory_allocated() >= base + 4 * MiB
    st = torch.cuda.memory_stats()
    assert st["allocated_bytes.all.current"] == torch.cuda.memory_allocated()
    assert torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()
    snap = torch.cuda.memory_snapshot()
    assert isinstance(snap, list)
    del x
    assert torch.cuda.memory_allocated() == base
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == base
    out = {"segments": len(snap)}
    if _door() == "native":
        # PyTorch's own binding over the door's getDeviceStats (GMLake routes
        # torch._C._cuda_memoryStats to its JSON figures; this is the C++).
        import gmlake._torch as gt
        y = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")
        cxx = gt._routed["_cuda_memoryStats"](torch.cuda.current_device())
        assert cxx["allocated_bytes"]["all"]["current"] == torch.cuda.memory_allocated(), (
            "C++ getDeviceStats %d != %d" % (cxx["allocated_bytes"]["all"]["current"],
                                             torch.cuda.memory_allocated()))
        del y
        out["cxx_stats"] = True
    return out


def oom_observer(torch):
    seen = []
    torch._C._cuda_attach_out_of_memory_observer(lambda *a: seen.append(a))
    total = torch.cuda.get_device_properties(0).total_memory
    try:
        torch.empty(2 * total, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        pass
    else:
        raise AssertionError("no torch.OutOfMemoryError for twice the device")
    assert seen, "the out-of-memory observer was not called"
    x = torch.ones(MiB, device="cuda")  # the process still works
    assert x.sum().item() == MiB
    return {"observer_calls": len(seen)}


def profiler_memory(torch):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 profile_memory=True) as prof:
        x = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
        del x

    def usage(e):
        return getattr(e, "device_memory_usage", None) or getattr(e, "cuda_memory_usage", 0) or 0
    most = max((usage(e) for e in prof.events()), default=0)
    assert most >= 4 * MiB, "the profiler saw at most %d bytes of CUDA memory" % most
    return {"most": most}


def cudnn_conv(torch):
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False  # compared with the CPU
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(16, 32, 3, padding=1)
    x = torch.randn(8, 16, 64, 64, requires_grad=True)
    ref = conv(x)
    ref.sum().backward()
    ref_grad = x.grad.clone()
    conv_g = conv.cuda()
    xg = x.detach().cuda().requires_grad_()
    out = conv_g(xg)
    out.sum().backward()
    torch.cuda.synchronize()
    assert torch.allclose(out.cpu(), ref, atol=1e-3, rtol=1e-3), "conv forward differs from CPU"
    assert torch.allclose(xg.grad.cpu(), ref_grad, atol=1e-3, rtol=1e-3), "conv backward differs"
    return {}


def _ipc_child(conn):
    import torch
    t = conn.recv()
    t.add_(1)
    torch.cuda.synchronize()
    conn.send(float(t.sum().item()))
    conn.recv()  # hold the tensor until the parent has looked


def ipc_share(torch):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_ipc_child, args=(child,))
    p.start()
    try:
        t = torch.zeros(MiB, device="cuda")
        parent.send(t)  # pickled here: a sharing failure raises here
        if not parent.poll(120):
            raise AssertionError("the child sent nothing in 120 s")
        child_sum = parent.recv()
        torch.cuda.synchronize()
        assert child_sum == MiB, "child saw sum %s" % child_sum
        assert t.sum().item() == MiB, "parent sees sum %s after the child's add" % t.sum().item()
        parent.send(None)
    finally:
        parent.close()  # a child still waiting gets EOF and ends
        p.join(30)
        if p.is_alive():
            p.kill()
    return {}


def compile_reduce_overhead(torch):
    import copy
    torch.manual_seed(0)
    model = _mlp(torch)
    eager = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    eopt = torch.optim.SGD(eager.parameters(), lr=0.05)
    compiled = torch.compile(model, mode="reduce-overhead")
    for _ in range(8):
        x = torch.randn(64, 256, device="cuda")
        for m, o in ((compiled, opt), (eager, eopt)):
            loss = m(x).square().mean()
            loss.backward()
            o.step()
            o.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    # Inductor fuses differently from eager: a looser bound.
    _close(torch, model, eager, "after 8 compiled steps", rtol=1e-3, atol=1e-4)
    return {}


# A trace tracker of our own, attached as ProcessGroupNCCL attaches its
# registration hooks: counts and bytes of each segment action, per pool.
_TRACKER_PROBE = r"""
#include <c10/cuda/CUDACachingAllocator.h>
#include <dlfcn.h>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
namespace cca = c10::cuda::CUDACachingAllocator;
static std::mutex mu;
static std::map<std::string, int64_t> counts;
extern "C" void probe_attach() {
  cca::attachAllocatorTraceTracker([](const cca::TraceEntry& te) {
    using A = cca::TraceEntry::Action;
    const char* a = nullptr;
    switch (te.action_) {
      case A::SEGMENT_ALLOC: a = "segment_alloc"; break;
      case A::SEGMENT_FREE: a = "segment_free"; break;
      case A::SEGMENT_MAP: a = "segment_map"; break;
      case A::SEGMENT_UNMAP: a = "segment_unmap"; break;
      default: return;
    }
    char key[96];
    std::snprintf(key, sizeof key, "%s/%llu,%llu", a,
                  (unsigned long long)te.mempool_.first,
                  (unsigned long long)te.mempool_.second);
    std::lock_guard<std::mutex> l(mu);
    counts[key] += 1;
    counts[std::string(key) + "/bytes"] += (int64_t)te.size_;
  });
}
extern "C" int64_t probe_count(const char* key) {
  std::lock_guard<std::mutex> l(mu);
  auto it = counts.find(key);
  return it == counts.end() ? 0 : it->second;
}
// Another allocator for a MemPool (CUDAPluggableAllocator's signatures):
// the driver's cuMemAlloc in the context torch made current.
using MemAlloc = int (*)(unsigned long long*, size_t);
using MemFree = int (*)(unsigned long long);
static void* Driver(const char* name) {
  static void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  return lib == nullptr ? nullptr : dlsym(lib, name);
}
extern "C" void* probe_alloc(size_t size, int, void*) {
  static MemAlloc f = reinterpret_cast<MemAlloc>(Driver("cuMemAlloc_v2"));
  unsigned long long p = 0;
  return f != nullptr && f(&p, size) == 0 ? reinterpret_cast<void*>(p)
                                          : nullptr;
}
extern "C" void probe_free(void* ptr, size_t, int, void*) {
  static MemFree f = reinterpret_cast<MemFree>(Driver("cuMemFree_v2"));
  if (f != nullptr) f(reinterpret_cast<unsigned long long>(ptr));
}
"""


def _tracker_probe(torch):
    import ctypes
    import tempfile
    from gmlake import _door
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    inc = os.path.join(torch_dir, "include")
    d = tempfile.mkdtemp(prefix="gmlake-probe-")
    src, out = os.path.join(d, "probe.cc"), os.path.join(d, "probe.so")
    with open(src, "w") as f:
        f.write(_TRACKER_PROBE)
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    lib = os.path.join(torch_dir, "lib")
    errors = ""
    for std in ("c++20", "c++17"):
        cmd = ["g++", "-shared", "-fPIC", "-O1", "-std=" + std,
               "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi, "-I", inc,
               "-I", _door._cuda_include(torch_dir), src, "-o", out,
               "-L", lib, "-lc10_cuda", "-lc10", "-ldl", "-Wl,-rpath," + lib]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        if r.returncode == 0:
            break
        errors = r.stdout
    else:
        raise RuntimeError("building the tracker probe: " + errors[-600:])
    probe = ctypes.CDLL(out)
    probe.probe_count.restype = ctypes.c_int64
    probe.probe_count.argtypes = [ctypes.c_char_p]
    probe.path = out
    return probe


def nccl_register_hooks(torch):
    import torch.distributed as dist
    import socket
    probe = _tracker_probe(torch)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
    try:
        probe.probe_attach()
        backend = dist.group.WORLD._get_backend(dev)
        other = torch.cuda.memory.CUDAPluggableAllocator(probe.path, "probe_alloc", "probe_free")
        pool = torch.cuda.MemPool(other.allocator())
        key = "%d,%d" % tuple(pool.id)
        with torch.cuda.use_mem_pool(pool):
            a = torch.ones(1 << 20, device="cuda")  # 4 MiB
        # Registers the pool's segments with NCCL; a build of NCCL that
        # cannot register such memory says so, natively too.
        register_error = ""
        try:
            backend.register_mem_pool(pool)
        except RuntimeError as e:
            register_error = str(e)[:200]
        with torch.cuda.use_mem_pool(pool):
            b = torch.ones(16 << 20, device="cuda")  # 64 MiB: a new segment
        dist.all_reduce(a)
        dist.all_reduce(b)
        torch.cuda.synchronize()
        assert a.sum().item() == (1 << 20) and b.sum().item() == (16 << 20), "all_reduce sums"
        allocs = probe.probe_count(("segment_alloc/" + key).encode())
        alloc_bytes = probe.probe_count(("segment_alloc/" + key + "/bytes").encode())
        assert allocs >= 1 and alloc_bytes >= (64 << 20), \
            "tracker saw %d SEGMENT_ALLOC (%d bytes) of pool %s after the 64 MiB tensor" % (
                allocs, alloc_bytes, key)
        del a, b
        if not register_error:
            backend.deregister_mem_pool(pool)
        del pool
        torch.cuda.empty_cache()
        frees = probe.probe_count(("segment_free/" + key).encode())
        free_bytes = probe.probe_count(("segment_free/" + key + "/bytes").encode())
        # Segments made before the tracker was attached are freed too.
        assert free_bytes >= alloc_bytes and frees >= allocs, \
            "pool %s: %d SEGMENT_FREE (%d bytes) for %d SEGMENT_ALLOC (%d bytes)" % (
                key, frees, free_bytes, allocs, alloc_bytes)
        maps = probe.probe_count(b"segment_map/0,0")
        return {"segment_alloc": allocs, "alloc_bytes": alloc_bytes, "segment_free": frees,
                "free_bytes": free_bytes, "default_segment_maps": maps,
                "register_error": register_error}
    finally:
        dist.destroy_process_group()



def mempool_no_split(torch):
    # MemPool(no_split=True), of gmlake's memory and of another allocator's:
    # each tensor a segment with one block; two 1 MiB tensors share one
    # segment in a pool that splits.
    probe = _tracker_probe(torch)
    other = torch.cuda.memory.CUDAPluggableAllocator(probe.path, "probe_alloc", "probe_free")
    seen = {}
    for kind, allocator in (("own", None), ("other", other.allocator())):
        split = torch.cuda.MemPool(allocator) if allocator else torch.cuda.MemPool()
        whole = (torch.cuda.MemPool(allocator, no_split=True) if allocator
                 else torch.cuda.MemPool(no_split=True))
        tensors = []
        for pool in (split, whole):
            with torch.cuda.use_mem_pool(pool):
                tensors += [torch.ones(MiB // 4, device="cuda") for _ in range(2)]
        segs_split, segs_whole = split.snapshot(), whole.snapshot()
        assert len(segs_split) == 1, "%s: the splitting pool has %d segments for two 1 MiB tensors" % (
            kind, len(segs_split))
        assert len(segs_whole) == 2, "%s: the no_split pool has %d segments for two tensors" % (
            kind, len(segs_whole))
        for seg in segs_whole:
            assert len(seg["blocks"]) == 1, "%s: a no_split segment has %d blocks" % (kind, len(seg["blocks"]))
        assert all(t.sum().item() == MiB // 4 for t in tensors)
        seen[kind] = [seg["total_size"] for seg in segs_whole]
        del tensors, split, whole
    torch.cuda.empty_cache()
    return seen

TESTS = [graph_capture_simple, graph_training_sgd, graph_optims, make_graphed_callables, graph_side_stream,
         mempool, memory_stats, oom_observer, profiler_memory, cudnn_conv, ipc_share, compile_reduce_overhead,
         nccl_register_hooks, mempool_no_split]


def _run_one(name):
    """In the child: runs one test, prints RESULT {json}."""
    t0 = time.time()
    result = {"test": name, "pass": False, "error": None}
    try:
        import torch
        fn = {f.__name__: f for f in TESTS}[name]
        result["detail"] = fn(torch)
        result["pass"] = True
    except BaseException as e:  # report everything, as the table needs it
        result["error"] = ("%s: %s" % (type(e).__name__, e)).strip()[:400]
    result["door"] = _door()
    result["seconds"] = round(time.time() - t0, 1)
    print("RESULT " + json.dumps(result), flush=True)


def _spawn(name, label):
    t0 = time.time()
    timeout = TIMEOUT_S.get(name, DEFAULT_TIMEOUT_S)
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=timeout)
        out = r.stdout
        lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
        if lines:
            res = json.loads(lines[-1][len("RESULT "):])
        else:
            tail = " | ".join(out.strip().splitlines()[-3:])
            res = {"test": name, "pass": False, "door": "?",
                   "error": "exit %d without a result: %s" % (r.returncode, tail[-400:])}
        door_lines = [l for l in out.splitlines() if "PyTorch allocator door" in l]
        if door_lines:
            res["door_line"] = door_lines[0][:200]
    except subprocess.TimeoutExpired:
        res = {"test": name, "pass": False, "door": "?", "error": "timed out after %d s" % timeout}
    res["label"] = label
    res.setdefault("seconds", round(time.time() - t0, 1))
    return res


def _table(runs):
    """runs: [(label, {test: result})] -> markdown table lines."""
    labels = [label for label, _ in runs]
    lines = ["| test | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    names = [f.__name__ for f in TESTS]
    for name in names:
        cells = []
        for _, results in runs:
            r = results.get(name)
            if r is None:
                cells.append("-")
            elif r["pass"]:
                cells.append("pass")
            else:
                cells.append("**fail**: " + (r.get("error") or "")[:90].replace("|", "/"))
        lines.append("| %s | %s |" % (name, " | ".join(cells)))
    return lines


def main(argv):
    if len(argv) >= 2 and argv[0] == "--one":
        _run_one(argv[1])
        return 0
    if argv and argv[0] == "--table":
        runs = []
        for path in argv[1:]:
            results = {}
            label = os.path.basename(path)
            with open(path) as f:
                for line in f:
                    if line.startswith("{"):
                        r = json.loads(line)
                        results[r["test"]] = r
                        label = r.get("label", label)
            runs.append((label, results))
        print("\n".join(_table(runs)))
        return 0
    label = "gmlake" if os.environ.get("GMLAKE_ENABLE") == "1" else "native"
    only = None
    i = 0
    while i < len(argv):
        if argv[i] == "--label":
            label, i = argv[i + 1], i + 2
        elif argv[i] == "--only":
            only, i = set(argv[i + 1].split(",")), i + 2
        else:
            raise SystemExit("unknown argument %r" % argv[i])
    results = {}
    for f in TESTS:
        if only and f.__name__ not in only:
            continue
        r = _spawn(f.__name__, label)
        results[f.__name__] = r
        print(json.dumps(r), flush=True)
    print("\n".join(_table([(label, results)])))
    return 0 if all(r["pass"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
