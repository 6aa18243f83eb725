# Copyright 2026 The GMLake Authors.
"""deploy/gmlaked.service, checked three ways:

1. What it says: Type=notify, the paths deploy/install.sh installs (binary,
   flagfile, Documentation=), flags gmlaked knows, GPU device access kept
   while everything else is closed, no capabilities.
2. What systemd says: `systemd-analyze verify` accepts it and
   `systemd-analyze security --offline` rates its exposure (when systemd's
   tools are on the machine, as on Debian).
3. What gmlaked does under it: started as systemd starts a Type=notify
   unit (NOTIFY_SOCKET, JOURNAL_STREAM, WATCHDOG_USEC) with the installed
   flagfile, it says READY=1 only once both sockets serve, keeps the
   watchdog fed, logs with priorities and no timestamps, says why it did
   not start, and says STOPPING=1 on SIGTERM.
"""

import os
import re
import shutil
import signal
import socket
import tempfile
import unittest

from tests.py.gmlaked_testing import (Gmlaked, flagfile_lines, has_flag,
                                      helpfull_flags, run, runfile)

UNIT = "deploy/gmlaked.service"


def parse_unit(path):
  """{section: {key: [values]}}: a strict reading of systemd's syntax."""
  sections = {}
  current = None
  with open(path) as f:
    lines = f.read().split("\n")
  i = 0
  while i < len(lines):
    line = lines[i].rstrip()
    i += 1
    if not line or line.lstrip().startswith(("#", ";")):
      continue
    while line.endswith("\\") and i < len(lines):
      line = line[:-1] + " " + lines[i].strip()
      i += 1
    m = re.fullmatch(r"\[([A-Za-z]+)\]", line)
    if m:
      current = sections.setdefault(m.group(1), {})
      continue
    m = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)=(.*)", line)
    if not m or current is None:
      raise ValueError("%s: not a unit line: %r" % (path, line))
    current.setdefault(m.group(1), []).append(m.group(2).strip())
  return sections


def one(unit, section, key):
  values = unit[section].get(key, [])
  if len(values) != 1:
    raise AssertionError("%s= in [%s]: %r (want one)" % (key, section, values))
  return values[0]


class InstalledTree:
  """deploy/install.sh run into a DESTDIR."""

  def __init__(self):
    self.root = tempfile.mkdtemp(prefix="gml.inst.")
    bin_dir = tempfile.mkdtemp(prefix="gml.bin.")
    for b in ("daemon/gmlaked", "tools/gmlakectl"):
      os.makedirs(os.path.join(bin_dir, os.path.dirname(b)), exist_ok=True)
      shutil.copy(runfile(b), os.path.join(bin_dir, b))
    env = dict(os.environ, DESTDIR=self.root, GMLAKE_BIN_DIR=bin_dir)
    self.result = run(["bash", runfile("deploy/install.sh")], env=env)
    shutil.rmtree(bin_dir)

  def path(self, absolute):
    return os.path.join(self.root, absolute.lstrip("/"))

  def close(self):
    shutil.rmtree(self.root, ignore_errors=True)


class UnitFileTest(unittest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.unit = parse_unit(runfile(UNIT))
    cls.tree = InstalledTree()
    cls.known = helpfull_flags(runfile("daemon/gmlaked"))

  @classmethod
  def tearDownClass(cls):
    cls.tree.close()

  def test_install_puts_everything_the_unit_names_in_place(self):
    self.assertEqual(self.tree.result.returncode, 0, self.tree.result.stderr)
    exec_start = one(self.unit, "Service", "ExecStart").split()
    self.assertTrue(os.access(self.tree.path(exec_start[0]), os.X_OK),
                    exec_start[0])
    flagfile = [a for a in exec_start if a.startswith("--flagfile=")]
    self.assertEqual(len(flagfile), 1, exec_start)
    self.assertTrue(os.path.isfile(self.tree.path(flagfile[0].split("=")[1])))
    docs = self.unit["Unit"]["Documentation"]
    self.assertTrue(docs)
    for doc in docs:
      for url in doc.split():
        self.assertTrue(url.startswith("file://"), url)
        self.assertTrue(os.path.isfile(self.tree.path(url[len("file://"):])),
                        "Documentation=%s is not installed by install.sh" % url)
    self.assertTrue(os.access(self.tree.path("/usr/local/bin/gmlakectl"),
                              os.X_OK))
    self.assertTrue(os.path.isfile(
        self.tree.path("/etc/systemd/system/gmlaked.service")))

  def test_a_second_install_keeps_the_operators_flags(self):
    flags = self.tree.path("/etc/gmlake/gmlaked.flags")
    with open(flags, "a") as f:
      f.write("--precreate=1GiB\n")
    again = run(["bash", runfile("deploy/install.sh")],
                env=dict(os.environ, DESTDIR=self.tree.root,
                         GMLAKE_BIN_DIR=os.path.dirname(os.path.dirname(
                             runfile("daemon/gmlaked")))))
    self.assertEqual(again.returncode, 0, again.stderr)
    with open(flags) as f:
      self.assertIn("--precreate=1GiB", f.read())
    self.assertTrue(os.path.isfile(flags + ".new"))

  def test_every_flag_it_passes_exists(self):
    args = one(self.unit, "Service", "ExecStart").split()[1:]
    flags = args + flagfile_lines(runfile("deploy/gmlaked.flags"))
    for arg in flags:
      self.assertTrue(arg.startswith("--"), arg)
      if arg.startswith("--flagfile="):
        continue
      self.assertTrue(has_flag(self.known, arg),
                      "%s is not a gmlaked flag" % arg)

  def test_sockets_live_in_the_runtime_directory(self):
    runtime = one(self.unit, "Service", "RuntimeDirectory")
    self.assertIn("/run/" + runtime,
                  self.unit["Service"].get("ReadWritePaths", [""])[0].split())
    for line in flagfile_lines(runfile("deploy/gmlaked.flags")):
      if line.startswith(("--socket=", "--fd_socket=")):
        path = line.split("=", 1)[1]
        self.assertEqual(os.path.dirname(path), "/run/" + runtime, line)

  def test_it_is_a_notify_service_with_a_watchdog(self):
    self.assertEqual(one(self.unit, "Service", "Type"), "notify")
    self.assertEqual(one(self.unit, "Service", "NotifyAccess"), "main")
    self.assertTrue(one(self.unit, "Service", "WatchdogSec"))
    self.assertEqual(one(self.unit, "Service", "StandardError"), "journal")
    self.assertEqual(one(self.unit, "Service", "KillSignal"), "SIGTERM")

  def test_a_crash_restarts_it_in_the_same_socket_directory(self):
    # Jobs outlive a restart: their clients reconnect to the same socket
    # paths and show the new gmlaked what they hold (docs/daemon.md,
    # "Restarts"); //tests/integration:daemon_restart_test kills and starts
    # a real gmlaked under them as systemd does.
    self.assertIn(one(self.unit, "Service", "Restart"),
                  ("on-failure", "always"))
    self.assertTrue(one(self.unit, "Service", "RestartSec"))
    # Without it systemd removes /run/gmlake between the two, and a
    # container that mounted it would never see the new sockets.
    self.assertEqual(one(self.unit, "Service", "RuntimeDirectoryPreserve"),
                     "restart")

  def test_hardening_keeps_the_gpu_and_nothing_else(self):
    s = self.unit["Service"]
    self.assertEqual(one(self.unit, "Service", "DevicePolicy"), "closed")
    allowed = {v.split()[0] for v in s.get("DeviceAllow", [])}
    for group in ("char-nvidia-frontend", "char-nvidia-uvm",
                  "char-nvidia-caps"):
      self.assertIn(group, allowed)
    for v in s.get("DeviceAllow", []):
      self.assertIn("rw", v.split()[1:], v)
    # PrivateDevices= would hide /dev/nvidia*; PrivateUsers= would remap
    # the uids SO_PEERCRED reports.
    self.assertNotIn(s.get("PrivateDevices", ["no"])[0], ("yes", "true"))
    self.assertNotIn(s.get("PrivateUsers", ["no"])[0], ("yes", "true"))
    self.assertEqual(one(self.unit, "Service", "CapabilityBoundingSet"), "")
    self.assertEqual(one(self.unit, "Service", "NoNewPrivileges"), "yes")
    self.assertEqual(one(self.unit, "Service", "ProtectSystem"), "strict")
    families = one(self.unit, "Service", "RestrictAddressFamilies").split()
    self.assertIn("AF_UNIX", families)
    self.assertIn("AF_INET", families)

  def test_systemd_accepts_it(self):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
      self.skipTest("systemd-analyze is not installed")
    # verify checks the binary exists: point ExecStart at the installed one.
    unit = self.tree.path("/etc/systemd/system/gmlaked.service")
    with open(unit) as f:
      text = f.read()
    checked = os.path.join(self.tree.root, "gmlaked.service")
    with open(checked, "w") as f:
      f.write(text.replace("/usr/local/bin/gmlaked",
                           self.tree.path("/usr/local/bin/gmlaked"), 1))
    v = run([analyze, "verify", checked], cwd=self.tree.root)
    self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
    sec = run([analyze, "security", "--offline=true",
               "--root=" + self.tree.root, "gmlaked.service"])
    m = re.search(r"Overall exposure level for gmlaked.service: ([0-9.]+)",
                  sec.stdout + sec.stderr)
    self.assertIsNotNone(m, sec.stdout + sec.stderr)
    # 10 is an unhardened service; what we leave open is for the GPU, the
    # clients' real uids and /proc, and metrics.
    self.assertLessEqual(float(m.group(1)), 3.0, sec.stdout)


class UnderSystemdTest(unittest.TestCase):
  """gmlaked started as systemd starts the unit."""

  @classmethod
  def setUpClass(cls):
    cls.tree = InstalledTree()
    cls.flagfile = cls.tree.path("/etc/gmlake/gmlaked.flags")

  @classmethod
  def tearDownClass(cls):
    cls.tree.close()

  def test_ready_once_both_sockets_serve_then_status_watchdog_stopping(self):
    with Gmlaked(["--flagfile=" + self.flagfile, "--capacity=64MiB"],
                 env={"WATCHDOG_USEC": "1000000"}, notify=True,
                 journal=True, wait=False) as d:
      ready = d.notify.wait_for("READY=1", 30)
      self.assertIsNotNone(ready, d.log())
      # At READY=1 both sockets accept connections.
      for path in (d.socket, d.fd_socket):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.close()
      self.assertEqual(d.ctl("health").returncode, 0)
      self.assertRegex(ready, r"STATUS=serving 0 sessions; 0 B leased")
      # WATCHDOG_USEC=1s: a keep-alive every half second.
      self.assertIsNotNone(d.notify.wait_for("WATCHDOG=1", 10), d.log())
      self.assertEqual(d.stop(signal.SIGTERM), 0)
      self.assertIsNotNone(d.notify.wait_for("STOPPING=1", 5),
                           d.notify.messages)
      log = d.log()
      lines = log.splitlines()
      self.assertTrue(lines)
      for line in lines:
        # Priority prefix, no timestamp, no "gmlaked:" (journald adds both).
        self.assertRegex(line, r"^<[0-7]>", line)
        self.assertNotRegex(line, r"^<\d>\d{4}-\d\d-\d\d ", line)
      self.assertIn("<6>serving: gRPC on unix:" + d.socket, log)

  def test_a_failed_start_says_why_to_systemd_and_the_journal(self):
    with Gmlaked(["--flagfile=" + self.flagfile, "--capacity=lots"],
                 notify=True, journal=True, wait=False) as d:
      self.assertEqual(d.proc.wait(30), 1)
      msgs = "\n".join(d.notify.drain())
      self.assertRegex(msgs, r"STATUS=failed: .*--capacity")
      self.assertNotIn("READY=1", msgs)
      self.assertRegex(d.log(), r"(?m)^<3>error: .*--capacity")


if __name__ == "__main__":
  unittest.main()
