# Copyright 2026 The GMLake Authors.
"""On the GPU machine: a process is on its own GPU only, and a rank pinned
with CUDA_VISIBLE_DEVICES shares the node's gmlaked (issue 11, parts 2-3).

One gmlaked (cuda backend) serves every GPU. For each GPU k, two client
processes allocate and compute there through gmlake.enable():

  pinned   CUDA_VISIBLE_DEVICES=k: it sees one device, its 0, which must be
           gmlaked's k by UUID (the start-up line says "gmlaked's k" for
           k > 0) and leases from gmlaked, not an embedded lake;
  set      all GPUs visible, torch.cuda.set_device(k): its device k.

While each client holds its tensor, nvidia-smi must list the client on GPU
k only: before, the cuda backend opened a context (~0.5 GiB) on every
visible GPU. With one GPU the check is trivial but still runs.

Needs the bundle (here, on the build machine):
  tests/gpu/build_bundle.sh //client:libgmlake.so //daemon:gmlaked
Run (there, from the checkout root, with carry [".gpu"]; kind nvidia-h200-x2
for the interesting case):
  python3 tests/gpu/devices_test.py
Prints "DEVICES <case> <k> PASS|FAIL ..." per client and "DEVICES ALL PASS".
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oom_test import BUNDLE, bundle_env  # noqa: E402 (same bundle and environment)


def child(case, k):
    import torch
    import gmlake
    gmlake.enable()
    device = 0 if case == "pinned" else k
    if case == "set":
        torch.cuda.set_device(k)
    x = torch.ones(64 << 20, device="cuda:%d" % device)  # 256 MiB
    ok = int((x * 2).sum().item()) == 2 * (64 << 20)
    print(json.dumps({"pid": os.getpid(), "describe": gmlake.describe(), "sum_ok": ok,
                      "devices_seen": torch.cuda.device_count()}), flush=True)
    sys.stdin.readline()  # hold the tensor until the parent has looked


def smi_apps():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
                          "--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    apps = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            apps.append((int(parts[0]), parts[1], parts[2]))
    return apps


def gpu_uuids():
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    return [l.split(",")[1].strip() for l in out.strip().splitlines()]


def run_client(case, k, sock, uuids):
    env = bundle_env()
    env["GMLAKE_CONF"] = "lake:daemon,socket:" + sock
    if case == "pinned":
        env["CUDA_VISIBLE_DEVICES"] = str(k)
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", case, str(k)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    info, log = None, []
    for line in p.stdout:
        log.append(line)
        if line.startswith("{"):
            info = json.loads(line)
            break
    verdict = []
    if info is None:
        verdict.append("no answer: " + "".join(log)[-1500:])
    else:
        time.sleep(1.0)  # let nvidia-smi see it
        mine = [a for a in smi_apps() if a[0] == info["pid"]]
        on = sorted(set(a[1] for a in mine))
        info["nvidia_smi"] = mine
        if not mine:
            verdict.append("pid %d not in nvidia-smi (PID namespace?); look by hand: %s" % (info["pid"], smi_apps()))
        elif on != [uuids[k]]:
            verdict.append("on GPUs %s, expected only %s" % (on, uuids[k]))
        if not info["sum_ok"]:
            verdict.append("wrong result")
        d = info["describe"] or ""
        if not d.startswith("gmlaked at"):
            verdict.append("not served by gmlaked: " + d[:300])
        if case == "pinned" and k > 0 and ("gmlaked's %d" % k) not in d:
            verdict.append("device 0 is not matched to gmlaked's %d: %s" % (k, d[:300]))
        if "not served" in d and case == "pinned":
            verdict.append("a device is not served: " + d[:300])
    try:
        p.stdin.write("\n")
        p.stdin.flush()
    except (BrokenPipeError, ValueError):
        pass
    p.wait(timeout=60)
    print("DEVICES %s %d %s %s" % (case, k, "FAIL " + "; ".join(verdict) if verdict else "PASS",
                                   json.dumps(info)))
    return not verdict


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
        return
    uuids = gpu_uuids()
    tmp = tempfile.mkdtemp(prefix="gmlake-dev-")
    sock = os.path.join(tmp, "gmlaked.sock")
    log = open(os.path.join(tmp, "gmlaked.log"), "w")
    daemon = subprocess.Popen([os.path.join(BUNDLE, "bin", "gmlaked"), "--backend=cuda", "--capacity=8GiB",
                               "--socket=" + sock, "--fd_socket=" + os.path.join(tmp, "fd.sock")],
                              stdout=log, stderr=subprocess.STDOUT, env=bundle_env())
    for _ in range(300):
        if os.path.exists(sock) or daemon.poll() is not None:
            break
        time.sleep(0.1)
    ok = os.path.exists(sock)
    if not ok:
        print("DEVICES gmlaked did not start: " + open(os.path.join(tmp, "gmlaked.log")).read()[-2000:])
    try:
        for k in range(len(uuids) if ok else 0):
            for case in ("pinned", "set"):
                ok &= run_client(case, k, sock, uuids)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    print("DEVICES ALL %s (%d GPUs)" % ("PASS" if ok else "FAIL", len(uuids)))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
