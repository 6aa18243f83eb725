# Copyright 2026 The GMLake Authors.
"""deploy/k8s: the manifests parse (python3-yaml) and agree with the rest:

* the DaemonSet's command, probes and flags name binaries the Containerfile
  installs and flags that `gmlaked --helpfull` / `gmlakectl --helpfull`
  list; its sockets are where the systemd unit keeps them (/run/gmlake),
  on the hostPath that the training pod mounts at the same place;
* the probe command, run for real against gmlaked started with the
  ConfigMap's flags (host backend), exits 0, and 1 once the daemon stops;
* the Containerfile's COPY sources are what stage_image.sh stages, and the
  packages it installs hold every shared library the binaries need.
"""

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

import yaml

from tests.py.gmlaked_testing import (Gmlaked, has_flag, helpfull_flags, run,
                                      runfile)

# Libraries the base image (debian:bookworm-slim) has already.
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}
# Sanitizer runtimes (libtsan2, libasan8, libubsan1): only in sanitizer builds.
SANITIZER_RUNTIME = re.compile(r"lib(t|a|ub|l)san\d+$")


def load(path):
  with open(runfile(path)) as f:
    return [d for d in yaml.safe_load_all(f) if d is not None]


def by_kind(docs, kind):
  found = [d for d in docs if d.get("kind") == kind]
  if len(found) != 1:
    raise AssertionError("want one %s, got %d" % (kind, len(found)))
  return found[0]


def flag_value(args, name):
  values = [a.split("=", 1)[1] for a in args if a.startswith("--%s=" % name)]
  return values[-1] if values else None


def containerfile_instructions(path):
  """[(INSTRUCTION, argument text)], continuation lines joined."""
  out = []
  with open(runfile(path)) as f:
    text = f.read()
  text = re.sub(r"\\\n", " ", text)
  for line in text.split("\n"):
    line = line.strip()
    if not line or line.startswith("#"):
      continue
    word, _, rest = line.partition(" ")
    out.append((word.upper(), rest.strip()))
  return out


class ManifestTest(unittest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.docs = load("deploy/k8s/gmlaked-daemonset.yaml")
    cls.ds = by_kind(cls.docs, "DaemonSet")
    cls.cm = by_kind(cls.docs, "ConfigMap")
    cls.pod_spec = cls.ds["spec"]["template"]["spec"]
    cls.container = cls.pod_spec["containers"][0]
    cls.volumes = {v["name"]: v for v in cls.pod_spec["volumes"]}
    cls.mounts = {m["name"]: m for m in cls.container["volumeMounts"]}
    # The flags the daemon runs with: its command, with the flagfile
    # expanded from the ConfigMap mounted where the command says.
    cmd = cls.container["command"]
    flagfile = flag_value(cmd, "flagfile")
    cm_mount = [m for m in cls.container["volumeMounts"]
                if cls.volumes[m["name"]].get("configMap")]
    assert len(cm_mount) == 1
    key = os.path.relpath(flagfile, cm_mount[0]["mountPath"])
    cls.flag_lines = [l.strip() for l in cls.cm["data"][key].splitlines()
                      if l.strip() and not l.strip().startswith("#")]
    cls.daemon_flags = [a for a in cmd[1:]
                        if not a.startswith("--flagfile=")] + cls.flag_lines
    cls.gmlaked_known = helpfull_flags(runfile("daemon/gmlaked"))
    cls.gmlakectl_known = helpfull_flags(runfile("tools/gmlakectl"))
    cls.image = containerfile_instructions("deploy/k8s/Containerfile")

  def installed_paths(self):
    """Absolute paths the Containerfile's COPY lines create."""
    paths = set()
    for word, rest in self.image:
      if word != "COPY":
        continue
      parts = rest.split()
      sources, dest = parts[:-1], parts[-1]
      for s in sources:
        paths.add(os.path.join(dest, os.path.basename(s))
                  if dest.endswith("/") else dest)
    return paths

  def test_every_document_has_a_kind_and_a_name(self):
    kinds = sorted(d["kind"] for d in self.docs)
    self.assertEqual(kinds, ["ConfigMap", "DaemonSet", "Namespace"])
    for d in self.docs:
      self.assertTrue(d["apiVersion"])
      self.assertTrue(d["metadata"]["name"])
    self.assertEqual(self.ds["spec"]["selector"]["matchLabels"],
                     {k: v for k, v in
                      self.ds["spec"]["template"]["metadata"]["labels"].items()
                      if k in self.ds["spec"]["selector"]["matchLabels"]})

  def test_the_daemon_runs_where_clients_and_the_gpus_are(self):
    self.assertIs(self.pod_spec["hostPID"], True)
    self.assertEqual(self.pod_spec["runtimeClassName"], "nvidia")
    env = {e["name"]: e["value"] for e in self.container["env"]}
    self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], "all")
    self.assertIn("compute", env["NVIDIA_DRIVER_CAPABILITIES"])
    # It must not take GPUs from the scheduler.
    for section in ("requests", "limits"):
      self.assertNotIn("nvidia.com/gpu",
                       self.container.get("resources", {}).get(section, {}))
    # Clients in other pid namespaces.
    self.assertEqual(flag_value(self.daemon_flags, "check_claimed_pid"),
                     "false")
    self.assertEqual(self.container["securityContext"]["capabilities"],
                     {"drop": ["ALL"]})

  def test_every_flag_exists(self):
    for arg in self.daemon_flags:
      self.assertTrue(has_flag(self.gmlaked_known, arg),
                      "gmlaked has no flag %s" % arg)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
      cmd = self.container[probe]["exec"]["command"]
      for arg in cmd[1:]:
        if arg.startswith("--"):
          self.assertTrue(has_flag(self.gmlakectl_known, arg),
                          "gmlakectl has no flag %s (%s)" % (arg, probe))

  def test_sockets_are_on_the_shared_host_path_like_the_units(self):
    socket = flag_value(self.daemon_flags, "socket")
    fd_socket = flag_value(self.daemon_flags, "fd_socket")
    run_dir = os.path.dirname(socket)
    self.assertEqual(os.path.dirname(fd_socket), run_dir)
    mount = [m for m in self.container["volumeMounts"]
             if m["mountPath"] == run_dir]
    self.assertEqual(len(mount), 1, "nothing mounted at %s" % run_dir)
    host = self.volumes[mount[0]["name"]]["hostPath"]
    self.assertEqual(host["path"], run_dir)
    # The systemd unit keeps them in the same place.
    with open(runfile("deploy/gmlaked.service")) as f:
      unit = f.read()
    runtime = re.search(r"^RuntimeDirectory=(\S+)$", unit, re.M).group(1)
    self.assertEqual(run_dir, "/run/" + runtime)
    with open(runfile("deploy/gmlaked.flags")) as f:
      self.assertIn("--socket=" + socket, f.read())

  def test_binaries_are_where_the_image_installs_them(self):
    installed = self.installed_paths()
    self.assertIn(self.container["command"][0], installed)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
      cmd = self.container[probe]["exec"]["command"]
      self.assertIn(cmd[0], installed)
      self.assertEqual(os.path.basename(cmd[0]), "gmlakectl")
      self.assertEqual(cmd[-1], "health")
      self.assertEqual(flag_value(cmd, "socket"),
                       flag_value(self.daemon_flags, "socket"))
    entry = [r for w, r in self.image if w == "ENTRYPOINT"]
    self.assertEqual(len(entry), 1)
    self.assertIn(yaml.safe_load(entry[0])[0], installed)
    # The unit and the image run the same path.
    with open(runfile("deploy/gmlaked.service")) as f:
      exec_start = re.search(r"^ExecStart=(\S+)", f.read(), re.M).group(1)
    self.assertEqual(exec_start, self.container["command"][0])

  def test_metrics_port_agrees(self):
    address = flag_value(self.daemon_flags, "metrics_address")
    port = int(address.rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}
    self.assertEqual(ports["metrics"], port)
    ann = self.ds["spec"]["template"]["metadata"]["annotations"]
    self.assertEqual(int(ann["prometheus.io/port"]), port)
    self.assertEqual(ann["prometheus.io/path"], "/metrics")

  def test_the_training_pod_reaches_the_daemon(self):
    pod = by_kind(load("deploy/k8s/training-pod-example.yaml"), "Pod")
    socket = flag_value(self.daemon_flags, "socket")
    run_dir = os.path.dirname(socket)
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    c = pod["spec"]["containers"][0]
    mount = [m for m in c["volumeMounts"] if m["mountPath"] == run_dir]
    self.assertEqual(len(mount), 1)
    self.assertEqual(vols[mount[0]["name"]]["hostPath"]["path"],
                     self.volumes["run-gmlake"]["hostPath"]["path"])
    env = {e["name"]: e["value"] for e in c["env"]}
    conf = dict(kv.split(":", 1) for kv in env["GMLAKE_CONF"].split(","))
    self.assertEqual(conf["lake"], "daemon")
    self.assertEqual(conf["socket"], socket)
    self.assertIn("nvidia.com/gpu", c["resources"]["limits"])

  def test_the_probe_passes_while_the_daemon_serves_and_fails_after(self):
    # The ConfigMap's flags on the host backend, with the paths and the
    # metrics port moved (later flags win).
    flags = [f for f in self.flag_lines if not f.startswith("--backend=")]
    cmd = self.container["livenessProbe"]["exec"]["command"]
    with Gmlaked(flags + ["--capacity=64MiB",
                          "--metrics_address=127.0.0.1:0"]) as d:
      probe = [runfile("tools/gmlakectl")] + [
          "--socket=" + d.socket if a.startswith("--socket=") else a
          for a in cmd[1:]]
      r = run(probe)
      self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
      self.assertIn("SERVING", r.stdout)
      self.assertIn("--check_claimed_pid=false", " ".join(flags))
      d.stop()
      r = run(probe)
      self.assertEqual(r.returncode, 1, r.stdout + r.stderr)

  def test_the_image_has_what_the_binaries_need(self):
    staged = tempfile.mkdtemp(prefix="gml.image.")
    try:
      bin_dir = os.path.dirname(os.path.dirname(runfile("daemon/gmlaked")))
      s = run(["bash", runfile("deploy/k8s/stage_image.sh"), staged],
              env=dict(os.environ, GMLAKE_BIN_DIR=bin_dir))
      self.assertEqual(s.returncode, 0, s.stderr)
      for word, rest in self.image:
        if word == "COPY":
          for src in rest.split()[:-1]:
            self.assertTrue(os.path.exists(os.path.join(staged, src)),
                            "COPY %s: not in the staged context" % src)
      installed = set()
      for word, rest in self.image:
        if word == "RUN" and "apt-get install" in rest:
          args = rest.split("apt-get install", 1)[1].split("&&")[0].split()
          installed |= {a for a in args if not a.startswith("-")}
      self.assertTrue(installed)
      if shutil.which("dpkg") is None or shutil.which("ldd") is None:
        self.skipTest("dpkg/ldd not here to map libraries to packages")
      libs = set()
      for b in ("gmlaked", "gmlakectl"):
        out = run(["ldd", os.path.join(staged, "bin", b)]).stdout
        self.assertNotIn("not found", out)
        libs |= {os.path.realpath(l) for l in re.findall(r"=> (/\S+)", out)}
      # One dpkg -S for all of them (it reads every package's file list).
      # Debian 12 merged /lib into /usr/lib; dpkg knows one of the two.
      queries = sorted(libs | {l.replace("/usr/lib/", "/lib/", 1)
                               for l in libs})
      owners = run(["dpkg", "-S"] + queries).stdout
      needed = {}
      for line in owners.splitlines():
        pkg, _, path = line.partition(": ")
        needed[path.replace("/usr/lib/", "/lib/", 1)] = pkg.split(":")[0]
      for lib in libs:
        self.assertIn(lib.replace("/usr/lib/", "/lib/", 1), needed,
                      "%s belongs to no Debian package" % lib)
      # A sanitizer build (bazel --config=tsan/asan) links its runtime in;
      # the image is built from an optimised one, which does not.
      needed = {p for p in needed.values() if not SANITIZER_RUNTIME.match(p)}
      missing = needed - installed - BASE_PACKAGES
      self.assertFalse(missing, "the Containerfile does not install %s" %
                       sorted(missing))
    finally:
      shutil.rmtree(staged, ignore_errors=True)


if __name__ == "__main__":
  unittest.main()
