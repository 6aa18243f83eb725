# Copyright 2026 The GMLake Authors.
"""torch.OutOfMemoryError for GMLake's out-of-memory, where it can be had.

libgmlake.so does not link torch. Its gmlake_torch_malloc throws
std::runtime_error, which reaches Python as a RuntimeError whose message
starts as PyTorch's does ("CUDA out of memory. Tried to allocate ...").
torch.OutOfMemoryError (a RuntimeError too) is what PyTorch makes of a
c10::OutOfMemoryError, which only code compiled against torch's headers can
throw. So where torch's headers and a C++ compiler are, this module compiles
_torch_oom.cc (entry points that throw it) once per torch install, caches the
library, and binds it to the libgmlake.so already loaded. Where they are not,
or the build fails, GMLake keeps the RuntimeError and says why once.

GMLAKE_OOM_SHIM=0 skips the shim; GMLAKE_CACHE_DIR sets where it is kept
(default $XDG_CACHE_HOME/gmlake, else ~/.cache/gmlake).
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_oom.cc")
_MALLOC = "gmlake_torch_oom_malloc"
_FREE = "gmlake_torch_oom_free"


class Unavailable(Exception):
    """Why the shim cannot be had here (the RuntimeError path is used)."""


def _cache_dir():
    configured = os.environ.get("GMLAKE_CACHE_DIR")
    if configured:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gmlake")


def _writable_dir():
    for d in (_cache_dir(), os.path.join(tempfile.gettempdir(), "gmlake-%d" % os.getuid())):
        try:
            os.makedirs(d, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
        except OSError:
            pass
    raise Unavailable("no writable cache directory (set GMLAKE_CACHE_DIR)")


def build(torch):
    """Path of the compiled shim for this torch; builds it on first use."""
    if not os.path.exists(_SOURCE):
        raise Unavailable("%s is missing from the gmlake package" % _SOURCE)
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise Unavailable("no C++ compiler (g++ or $CXX) to build it with")
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    include = os.path.join(torch_dir, "include")
    libdir = os.path.join(torch_dir, "lib")
    if not os.path.exists(os.path.join(include, "c10", "util", "Exception.h")):
        raise Unavailable("torch's C++ headers are not installed at %s" % include)
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    with open(_SOURCE, "rb") as f:
        source = f.read()
    key = hashlib.sha256(b"\0".join(
        [source, torch.__version__.encode(), torch_dir.encode(), cxx.encode(), b"%d" % abi])).hexdigest()[:16]
    directory = _writable_dir()
    out = os.path.join(directory, "torch_oom-%s.so" % key)
    if os.path.exists(out):
        return out
    # Several ranks may build at once: each into its own file, then an atomic
    # rename; the last one wins, and every one is complete.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="torch_oom-", suffix=".so.tmp")
    os.close(fd)
    errors = ""
    try:
        # Newer torch headers need C++20; older compilers know only C++17.
        for std in ("c++20", "c++17"):
            cmd = [cxx, "-shared", "-fPIC", "-O2", "-std=" + std, "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi,
                   "-I", include, _SOURCE, "-L", libdir, "-lc10", "-Wl,-rpath," + libdir, "-o", tmp]
            try:
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   universal_newlines=True, timeout=180)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise Unavailable("running %s: %s" % (cxx, e))
            if r.returncode == 0:
                os.replace(tmp, out)
                return out
            errors = r.stdout
        raise Unavailable("%s could not compile %s against torch %s: %s" % (
            cxx, os.path.basename(_SOURCE), torch.__version__, errors.strip()[-800:]))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _address(function):
    return ctypes.cast(function, ctypes.c_void_p).value


def load(lib, torch):
    """(path, malloc name, free name) of the shim, bound to `lib` (the loaded
    libgmlake.so). Raises Unavailable with the reason when it cannot be had."""
    if os.environ.get("GMLAKE_OOM_SHIM", "1") == "0":
        raise Unavailable("GMLAKE_OOM_SHIM=0")
    path = build(torch)
    try:
        shim = ctypes.CDLL(path)
    except OSError as e:
        raise Unavailable("loading %s: %s" % (path, e))
    shim.gmlake_torch_oom_bind.argtypes = [ctypes.c_void_p] * 3
    if shim.gmlake_torch_oom_bind(_address(lib.gmlake_torch_try_malloc), _address(lib.gmlake_last_error),
                                  _address(lib.gmlake_torch_free)) != 0:
        raise Unavailable("binding %s to libgmlake.so failed" % path)
    return path, _MALLOC, _FREE


def entry_points(lib, lib_path, torch):
    """What CUDAPluggableAllocator should load: the shim where it can be had,
    else libgmlake.so's own entry points (RuntimeError on out of memory)."""
    try:
        return load(lib, torch)
    except Unavailable as e:
        if str(e) != "GMLAKE_OOM_SHIM=0":
            sys.stderr.write("gmlake: out of memory will raise RuntimeError, not torch.OutOfMemoryError "
                             "(%s)\n" % e)
        return lib_path, "gmlake_torch_malloc", "gmlake_torch_free"
