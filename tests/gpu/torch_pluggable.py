# Copyright 2026 The GMLake Authors.
#
# libgmlake.so as PyTorch's allocator (torch.cuda.memory.CUDAPluggableAllocator):
# tensors of varying sizes, real kernels on them, results checked against the
# CPU, stats read back through the C API. Prints one line: PLUGGABLE {json}.
import ctypes, json, os, random
import torch

lib_path = os.environ["GMLAKE_LIB"]
alloc = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "gmlake_torch_malloc", "gmlake_torch_free")
torch.cuda.memory.change_current_allocator(alloc)
lib = ctypes.CDLL(lib_path)
lib.gmlake_stats_json.restype = ctypes.c_void_p
lib.gmlake_free_string.argtypes = [ctypes.c_void_p]

def stats():
    p = lib.gmlake_stats_json(0)
    s = json.loads(ctypes.string_at(p).decode())
    lib.gmlake_free_string(p)
    return s

random.seed(0)
torch.manual_seed(0)
ok = True
live = []
for step in range(200):
    n = random.choice([64, 256, 1024, 2048, 3000])
    a = torch.randn(n, n, device="cuda", dtype=torch.float32)
    b = torch.randn(n, n, device="cuda", dtype=torch.float32)
    c = a @ b
    if step % 40 == 0:
        ref = a.cpu() @ b.cpu()
        ok &= torch.allclose(c.cpu(), ref, rtol=1e-3, atol=1e-2)
    live.append(c)
    if len(live) > 8:
        live.pop(random.randrange(len(live)))
torch.cuda.synchronize()
s = stats()
print("PLUGGABLE", json.dumps(dict(results_match=bool(ok),
      allocated=s["allocated_bytes.all.current"], reserved_peak=s["reserved_bytes.all.peak"],
      allocated_peak=s["allocated_bytes.all.peak"], stitches=s["gmlake.stitches"],
      driver_calls=s["gmlake.driver_calls.total"], describe=ctypes.CDLL(lib_path) and None)))
