# Copyright 2026 The GMLake Authors.
"""GMLake's native door into PyTorch: a CUDAAllocator subclass.

PyTorch's CUDAPluggableAllocator takes malloc and free only; CUDA graphs,
torch.cuda.MemPool, torch.compile(mode="reduce-overhead"), cuDNN's workspace
sizing and the statistics need the rest of c10's CUDAAllocator interface.
_torch_allocator.cc implements it over libgmlake's C API. It must be
compiled against the torch that is installed (its C++ classes have no stable
ABI), so, as the out-of-memory shim (_oom.py), this module compiles it once
per torch install on first use, caches it, and installs it before CUDA
starts. Where it cannot (no compiler, no CUDA headers, a torch whose
interface differs), gmlake keeps the pluggable door and says why.

GMLAKE_TORCH_DOOR=pluggable skips it; GMLAKE_CACHE_DIR sets where it is kept.
"""
import ctypes
import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import _oom

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_HERE, "_torch_allocator.cc")


class Unavailable(Exception):
    """Why the native door cannot be had here (the pluggable one is used)."""


def _gmlake_include():
    """The folder holding gmlake.h: the wheel's gmlake/include, or client/
    of a checkout (client/python/gmlake -> client)."""
    for d in (os.path.join(_HERE, "include"), os.path.join(_HERE, "..", "..")):
        if os.path.exists(os.path.join(d, "gmlake.h")):
            return os.path.realpath(d)
    raise Unavailable("gmlake.h is missing from the gmlake package")


def _cuda_include(torch_dir):
    """A folder with cuda_runtime_api.h: CUDA_HOME, nvcc's, /usr/local/cuda,
    or the nvidia-* wheels PyTorch depends on."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    roots.append("/usr/local/cuda")
    candidates = [os.path.join(r, "include") for r in roots if r]
    site = os.path.dirname(torch_dir)
    candidates += sorted(glob.glob(os.path.join(site, "nvidia", "*", "include")))
    for c in candidates:
        if os.path.exists(os.path.join(c, "cuda_runtime_api.h")):
            return c
    raise Unavailable("no CUDA headers (cuda_runtime_api.h) in " + ", ".join(candidates)
                      + "; set CUDA_HOME")


def build(torch):
    """Path of the compiled door for this torch; builds it on first use."""
    if not os.path.exists(_SOURCE):
        raise Unavailable("%s is missing from the gmlake package" % _SOURCE)
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise Unavailable("no C++ compiler (g++ or $CXX) to build it with")
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    include = os.path.join(torch_dir, "include")
    libdir = os.path.join(torch_dir, "lib")
    if not os.path.exists(os.path.join(include, "c10", "cuda", "CUDACachingAllocator.h")):
        raise Unavailable("torch's C++ CUDA headers are not installed at %s" % include)
    cuda_include = _cuda_include(torch_dir)
    gmlake_include = _gmlake_include()
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    with open(_SOURCE, "rb") as f:
        source = f.read()
    with open(os.path.join(gmlake_include, "gmlake.h"), "rb") as f:
        header = f.read()
    key = hashlib.sha256(b"\0".join(
        [source, header, torch.__version__.encode(), torch_dir.encode(), cxx.encode(),
         cuda_include.encode(), b"%d" % abi])).hexdigest()[:16]
    directory = _oom._writable_dir()
    out = os.path.join(directory, "torch_door-%s.so" % key)
    if os.path.exists(out):
        return out
    # The ranks of a job start together: one builds, the others wait for it
    # (a lock that cannot be had only costs a build of one's own).
    with open(out + ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:
            pass
        if os.path.exists(out):
            return out
        # A build that failed a moment ago fails again: the ranks that
        # waited for it say why at once (later runs try again).
        failed = out + ".failed"
        try:
            if time.time() - os.path.getmtime(failed) < 600:
                with open(failed) as f:
                    raise Unavailable(f.read())
        except OSError:
            pass
        try:
            return _build_into(out, directory, cxx, abi, include, cuda_include, gmlake_include,
                               torch_dir, libdir, torch)
        except Unavailable as e:
            try:
                with open(failed, "w") as f:
                    f.write(str(e))
            except OSError:
                pass
            raise


def _build_into(out, directory, cxx, abi, include, cuda_include, gmlake_include, torch_dir,
                libdir, torch):
    sys.stderr.write("gmlake: compiling the native PyTorch door against torch %s "
                     "(once; cached in %s)\n" % (torch.__version__, directory))
    # Several ranks may build at once: each into its own files, then an
    # atomic rename; the last one wins, and every one is complete.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="torch_door-", suffix=".so.tmp")
    os.close(fd)
    obj = tmp[:-len(".so.tmp")] + ".o"
    try:
        _compile(cxx, abi, [include, os.path.join(include, "torch", "csrc", "api", "include"),
                            cuda_include, gmlake_include], obj, torch)
        _link(cxx, obj, libdir, _cudart_choices(torch_dir, cuda_include), tmp, torch)
        os.replace(tmp, out)
        return out
    finally:
        for f in (tmp, obj):
            if os.path.exists(f):
                os.unlink(f)


def _run(cmd, what):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Unavailable("running %s: %s" % (cmd[0], e))
    return r.returncode == 0, r.stdout


def _compile(cxx, abi, includes, obj, torch):
    errors = ""
    # Newer torch headers need C++20; older compilers know only C++17.
    for std in ("c++20", "c++17"):
        cmd = [cxx, "-c", "-fPIC", "-O2", "-std=" + std, "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi]
        for i in includes:
            cmd += ["-I", i]
        ok, errors = _run(cmd + [_SOURCE, "-o", obj], "compile")
        if ok:
            return
    raise Unavailable("%s could not compile %s against torch %s: %s" % (
        cxx, os.path.basename(_SOURCE), torch.__version__, errors.strip()[-800:]))


def _cudart_choices(torch_dir, cuda_include):
    """Ways to give the linker the CUDA runtime torch uses, best first: the
    libcudart that ships with torch (the nvidia-* wheels), then whatever
    libc10_cuda.so needs, then the toolkit's."""
    site = os.path.dirname(torch_dir)
    found = sorted(glob.glob(os.path.join(torch_dir, "lib", "libcudart.so*"))
                   + glob.glob(os.path.join(site, "nvidia", "*", "lib", "libcudart.so.*")))
    choices = [[f, "-Wl,-rpath," + os.path.dirname(f)] for f in found]
    choices.append(["-Wl,--copy-dt-needed-entries"])
    lib64 = os.path.join(os.path.dirname(cuda_include), "lib64")
    choices.append(["-L", lib64, "-lcudart", "-Wl,-rpath," + lib64])
    return choices


def _link(cxx, obj, libdir, cudart_choices, out, torch):
    errors = ""
    for cudart in cudart_choices:
        cmd = [cxx, "-shared", obj, "-o", out, "-L", libdir, "-ltorch_cuda", "-ltorch_cpu",
               "-lc10_cuda", "-lc10"] + cudart + ["-ldl", "-Wl,-rpath," + libdir]
        ok, errors = _run(cmd, "link")
        if ok:
            return
    raise Unavailable("%s could not link %s against torch %s: %s" % (
        cxx, os.path.basename(_SOURCE), torch.__version__, errors.strip()[-800:]))


def install(lib_path, torch):
    """Builds (once) and installs the door as PyTorch's CUDA allocator, bound
    to the libgmlake.so at lib_path. Returns the door's path; raises
    Unavailable with the reason when it cannot be had."""
    choice = os.environ.get("GMLAKE_TORCH_DOOR", "native")
    if choice == "pluggable":
        raise Unavailable("GMLAKE_TORCH_DOOR=pluggable")
    if choice != "native":
        raise Unavailable("GMLAKE_TORCH_DOOR=%r is neither native nor pluggable" % choice)
    path = build(torch)
    try:
        door = ctypes.CDLL(path)
    except OSError as e:
        raise Unavailable("loading %s: %s" % (path, e))
    door.gmlake_torch_door_install.restype = ctypes.c_int
    door.gmlake_torch_door_install.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    err = ctypes.create_string_buffer(2048)
    if door.gmlake_torch_door_install(lib_path.encode(), err, len(err)) != 0:
        raise Unavailable("installing %s: %s" % (path, err.value.decode(errors="replace")))
    return path
