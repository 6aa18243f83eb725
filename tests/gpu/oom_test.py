# Copyright 2026 The GMLake Authors.
"""On the GPU machine: out of memory under GMLake is an exception a script
catches, never a tensor at address 0 (issue 11).

PyTorch's CUDAPluggableAllocator does not check the pointer a pluggable
malloc returns; a null used to become a tensor at address 0 and the next
kernel an illegal memory access that poisons the CUDA context. Each case
below runs in a fresh process (one allocator per process) with
gmlake.enable(), asks for 3 GiB where only 2 GiB may be held, catches the
exception, then allocates 1 GiB in the same process and checks a kernel's
result on it against the CPU:

  embedded        GMLAKE_CONF=capacity:2GiB, the embedded lake;
                  torch.OutOfMemoryError (gmlake/_torch_oom.cc, built here
                  once against this torch);
  embedded-plain  the same with GMLAKE_OOM_SHIM=0: libgmlake's own entry
                  point, a RuntimeError with PyTorch's wording;
  daemon          gmlaked (cuda backend) with --session_quota=2GiB, then
                  gmlaked killed: a lease that can no longer be had is an
                  out-of-memory error too, and the cached memory still
                  serves.

Needs the bundle (here, on the build machine):
  tests/gpu/build_bundle.sh //client:libgmlake.so //daemon:gmlaked
Run (there, from the checkout root, with carry [".gpu"]):
  python3 tests/gpu/oom_test.py
Prints one line per case, "OOM <case> PASS {json}" or "OOM <case> FAIL
...", and "OOM ALL PASS" at the end (exit status 0) when every case passed.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUNDLE = os.path.join(ROOT, ".gpu")
GiB = 1 << 30


def child(case):
    """One case, in this process (started by main with its environment)."""
    import torch
    import gmlake
    gmlake.enable()
    expected = RuntimeError if case == "embedded-plain" else torch.OutOfMemoryError
    out = {"case": case}
    warm = torch.ones(1024, device="cuda")  # the CUDA context, a first block
    torch.cuda.synchronize()

    # 1. More than may be held: an exception, caught.
    try:
        big = torch.empty(3 * GiB, dtype=torch.uint8, device="cuda")
        big.fill_(1)
        torch.cuda.synchronize()
        return fail(out, "a 3 GiB tensor was handed out under a 2 GiB limit (data_ptr 0x%x)" % big.data_ptr())
    except RuntimeError as e:
        out["exception"] = "%s.%s" % (type(e).__module__, type(e).__name__)
        out["message"] = str(e)[:400]
        if not isinstance(e, expected):
            return fail(out, "expected %s" % expected.__name__)
        if not str(e).startswith("CUDA out of memory. Tried to allocate 3.00 GiB."):
            return fail(out, "message does not start as PyTorch's")
        for part in ("allocated", "reserved", "lake said"):
            if part not in str(e):
                return fail(out, "message lacks '%s'" % part)

    # 2. The process goes on: 1 GiB works and computes right.
    if not check_one_gib(out, "after_oom"):
        return False

    # 3. Through gmlaked: the daemon gone is no memory either, and what is
    # cached still serves.
    if case == "daemon":
        os.kill(int(os.environ["OOM_TEST_DAEMON_PID"]), signal.SIGKILL)
        time.sleep(1.0)
        try:
            more = torch.empty(int(1.5 * GiB), dtype=torch.uint8, device="cuda")
            more.fill_(3)
            torch.cuda.synchronize()
            return fail(out, "1.5 GiB was handed out with gmlaked gone")
        except torch.OutOfMemoryError as e:
            out["daemon_gone_message"] = str(e)[:300]
            if "gone" not in str(e):
                return fail(out, "the message does not say gmlaked is gone")
        if not check_one_gib(out, "daemon_gone"):
            return False

    del warm
    stats = gmlake.memory_stats()
    out["num_ooms"] = stats.get("num_ooms")
    out["reserved_peak"] = stats.get("reserved_bytes.all.peak")
    print("OOM %s PASS %s" % (case, json.dumps(out)))
    return True


def check_one_gib(out, label):
    import torch
    try:
        # 1 GiB of bytes, written and read back by kernels. No temporary
        # of another GiB (an integer sum() casts its input to int64 first:
        # 2 GiB, more than the 2 GiB limit leaves, measured on the H200).
        a = torch.empty(GiB, dtype=torch.uint8, device="cuda")
        if a.data_ptr() == 0:
            return fail(out, "%s: a tensor at address 0" % label)
        a.fill_(7)
        a[-1] = 9
        got = int(a[::1 << 20].to(torch.int32).sum().item()) + int(a[-1].item())
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 (any failure here is the finding)
        return fail(out, "%s: 1 GiB failed: %s: %s" % (label, type(e).__name__, str(e)[:300]))
    want = 7 * 1024 + 9
    out[label + "_sum_matches"] = got == want
    if got != want:
        return fail(out, "%s: read back %d, wrote %d" % (label, got, want))
    del a
    return True


def fail(out, why):
    print("OOM %s FAIL %s %s" % (out["case"], why, json.dumps(out)))
    return False


def start_daemon(tmp):
    sock = os.path.join(tmp, "gmlaked.sock")
    cmd = [os.path.join(BUNDLE, "bin", "gmlaked"), "--backend=cuda", "--capacity=8GiB",
           "--session_quota=2GiB", "--socket=" + sock, "--fd_socket=" + os.path.join(tmp, "fd.sock")]
    log = open(os.path.join(tmp, "gmlaked.log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=bundle_env())
    for _ in range(300):
        if os.path.exists(sock):
            return proc, sock
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("gmlaked did not start: %s" % open(os.path.join(tmp, "gmlaked.log")).read()[-2000:])


def bundle_env():
    env = dict(os.environ)
    lib = os.path.join(BUNDLE, "lib")
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["GMLAKE_LIB"] = os.path.join(BUNDLE, "bin", "libgmlake.so")
    env["PYTHONPATH"] = os.path.join(ROOT, "client", "python") + (
        ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_case(case, extra_env):
    env = bundle_env()
    env.update(extra_env)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    lines = [l for l in r.stdout.splitlines() if l.startswith("OOM ")]
    for l in lines:
        print(l)
    ok = r.returncode == 0 and any(" PASS " in l for l in lines)
    if not ok:
        print("OOM %s FAIL exit status %d; output:\n%s" % (case, r.returncode, r.stdout[-3000:]))
    return ok


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(0 if child(sys.argv[2]) else 1)
    for need in ("bin/libgmlake.so", "bin/gmlaked"):
        if not os.path.exists(os.path.join(BUNDLE, need)):
            sys.exit("oom_test: .gpu/%s is missing; build the bundle with "
                     "tests/gpu/build_bundle.sh //client:libgmlake.so //daemon:gmlaked" % need)
    ok = True
    ok &= run_case("embedded", {"GMLAKE_CONF": "lake:embedded,capacity:2GiB"})
    ok &= run_case("embedded-plain", {"GMLAKE_CONF": "lake:embedded,capacity:2GiB", "GMLAKE_OOM_SHIM": "0"})
    tmp = tempfile.mkdtemp(prefix="gmlake-oom-")
    daemon, sock = start_daemon(tmp)
    try:
        ok &= run_case("daemon", {"GMLAKE_CONF": "lake:daemon,socket:" + sock,
                                  "OOM_TEST_DAEMON_PID": str(daemon.pid)})
    finally:
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait()
    print("OOM ALL %s" % ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
