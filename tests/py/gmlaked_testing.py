# Copyright 2026 The GMLake Authors.
"""Runs the real gmlaked (host backend) for Python tests: the systemd unit,
the Kubernetes manifests and the metrics endpoint are tested against it.

Sockets live in a short directory under /tmp (AF_UNIX paths are limited to
108 bytes). Nothing here fakes the daemon: it is the Bazel-built binary,
started the way systemd or a container would start it.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def runfile(path):
  """The path of workspace file `path` (e.g. "daemon/gmlaked") in runfiles."""
  base = os.environ.get("TEST_SRCDIR")
  if base:
    candidate = os.path.join(base, "gmlake", path)
    if os.path.exists(candidate):
      return candidate
  here = os.path.dirname(os.path.abspath(__file__))
  root = os.path.dirname(os.path.dirname(here))
  for candidate in (os.path.join(root, path),
                    os.path.join(root, "bazel-bin", path)):
    if os.path.exists(candidate):
      return candidate
  raise FileNotFoundError(path)


def run(argv, timeout=30, **kwargs):
  """Runs argv to completion; returns CompletedProcess with text output."""
  return subprocess.run(argv, capture_output=True, text=True,
                        timeout=timeout, **kwargs)


class NotifySocket:
  """A datagram socket like systemd's NOTIFY_SOCKET."""

  def __init__(self, path):
    self.path = path
    self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    self.sock.bind(path)
    self.messages = []

  def drain(self, timeout=0.5):
    """Every message until none comes for `timeout` seconds."""
    while self.receive(timeout) is not None:
      pass
    return self.messages

  def receive(self, timeout):
    """The next message, or None after `timeout` seconds."""
    self.sock.settimeout(timeout)
    try:
      data = self.sock.recv(65536).decode()
    except socket.timeout:
      return None
    self.messages.append(data)
    return data

  def wait_for(self, key, timeout):
    """Waits for a message holding line `key` (e.g. "READY=1")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      msg = self.receive(max(0.01, deadline - time.monotonic()))
      if msg is not None and key in msg.split("\n"):
        return msg
    return None

  def close(self):
    self.sock.close()


class Gmlaked:
  """A running gmlaked on sockets in a fresh directory."""

  def __init__(self, flags, env=None, notify=False, journal=False,
               wait=True):
    self.dir = tempfile.mkdtemp(prefix="gml.", dir="/tmp")
    os.chmod(self.dir, 0o755)
    self.socket = os.path.join(self.dir, "gmlaked.sock")
    self.fd_socket = os.path.join(self.dir, "fd.sock")
    self.log_path = os.path.join(self.dir, "log")
    self.notify = NotifySocket(os.path.join(self.dir, "notify")) \
        if notify else None
    child_env = dict(os.environ)
    for k in ("NOTIFY_SOCKET", "JOURNAL_STREAM", "WATCHDOG_USEC",
              "WATCHDOG_PID"):
      child_env.pop(k, None)
    child_env.update(env or {})
    if self.notify:
      child_env["NOTIFY_SOCKET"] = self.notify.path
    self._log = open(self.log_path, "wb")
    if journal:
      # As systemd does: the stream's device and inode, for the daemon to
      # recognise its stderr as the journal.
      st = os.fstat(self._log.fileno())
      child_env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
    # No idle release unless a test asks (its --release_idle comes later and
    # wins): with no session open, free chunks go back to the driver at the
    # daemon's next wake, and a test reading the books after its clients
    # ended would race that (as tests/integration/daemon_harness.cc).
    # The test's sockets and backend come last: they win over a flagfile's.
    argv = [runfile("daemon/gmlaked"), "--release_idle=0"] + list(flags) + [
        "--backend=host", "--host_capacity=1GiB", "--socket=" + self.socket,
        "--fd_socket=" + self.fd_socket]
    self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=self._log,
                                 env=child_env)
    if wait:
      self.wait_serving()

  def wait_serving(self, timeout=30):
    """Waits until `gmlakectl health` says SERVING."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      if self.proc.poll() is not None:
        raise RuntimeError("gmlaked exited with %d:\n%s" %
                           (self.proc.returncode, self.log()))
      if os.path.exists(self.socket) and self.ctl("health").returncode == 0:
        return
      time.sleep(0.05)
    raise RuntimeError("gmlaked did not serve within %ss:\n%s" %
                       (timeout, self.log()))

  def ctl(self, *args):
    return run([runfile("tools/gmlakectl"), "--socket=" + self.socket,
                "--timeout=5s"] + list(args))

  def log(self):
    with open(self.log_path, "rb") as f:
      return f.read().decode(errors="replace")

  def stop(self, sig=signal.SIGTERM, timeout=20):
    """Sends `sig`, waits; returns the exit code."""
    if self.proc.poll() is None:
      self.proc.send_signal(sig)
      try:
        self.proc.wait(timeout)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()
    return self.proc.returncode

  def close(self):
    self.stop()
    self._log.close()
    if self.notify:
      self.notify.close()
    shutil.rmtree(self.dir, ignore_errors=True)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def flagfile_lines(path):
  """The --flags of a flagfile, comments and blank lines left out."""
  with open(path) as f:
    return [l.strip() for l in f
            if l.strip() and not l.strip().startswith("#")]


def helpfull_flags(binary):
  """The names of every flag `binary --helpfull` lists."""
  out = run([binary, "--helpfull"])
  # Definitions are "    --name (help...)"; wrapped help lines that happen
  # to start with "--" are indented further.
  return set(re.findall(r"^    --([A-Za-z0-9_]+) \(", out.stdout + out.stderr,
                        re.MULTILINE))


def flag_name(arg):
  """"--foo=bar" -> "foo"; "--nofoo" stays "nofoo" (see has_flag)."""
  return arg[2:].split("=", 1)[0]


def has_flag(known, arg):
  """Whether --arg names a flag in `known` (booleans may be --noNAME)."""
  name = flag_name(arg)
  return name in known or (name.startswith("no") and name[2:] in known)
