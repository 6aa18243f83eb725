# Copyright 2026 The GMLake Authors.
"""gmlaked --metrics_address, scraped by a real HTTP client (urllib) while
a real client process holds chunks, and read by a strict parser of
Prometheus' text format (0.0.4) written here, so that anything Prometheus
would refuse or misread fails the test.
"""

import math
import re
import subprocess
import time
import unittest
import urllib.error
import urllib.request

from tests.py.gmlaked_testing import Gmlaked, runfile

CHUNK = 2 << 20

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
# A label value: any characters, with \\, \" and \n escaped.
VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(r"^(%s)(?:\{((?:%s=%s)(?:,%s=%s)*)?\})? (\S+)$" %
                    (NAME, LABEL, VALUE, LABEL, VALUE))
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def parse_value(text):
  if text in ("+Inf", "Inf"):
    return math.inf
  if text == "-Inf":
    return -math.inf
  if text == "NaN":
    return math.nan
  if not re.fullmatch(r"-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?", text):
    raise ValueError("not a sample value: %r" % text)
  return float(text)


def parse_labels(text):
  labels = {}
  for m in re.finditer(r"(%s)=(%s)" % (LABEL, VALUE), text or ""):
    raw = m.group(2)[1:-1]
    value = re.sub(r"\\(.)", lambda e: {"n": "\n"}.get(e.group(1),
                                                      e.group(1)), raw)
    if m.group(1) in labels:
      raise ValueError("label %s twice" % m.group(1))
    labels[m.group(1)] = value
  return labels


def parse_exposition(text):
  """{family: {"type", "help", "samples": [(name, labels, value)]}}.

  Strict: every line a HELP, TYPE or sample line; HELP and TYPE once per
  family and before its samples; samples only of a declared family (a
  histogram's _bucket/_sum/_count); no series twice; histograms with an
  le label on buckets, +Inf last, counts cumulative and +Inf == _count.
  """
  if not text.endswith("\n"):
    raise ValueError("the text must end with a newline")
  families = {}
  current = None
  seen = set()
  for n, line in enumerate(text.split("\n")[:-1], 1):
    where = "line %d: %r" % (n, line)
    if line.startswith("#"):
      m = re.fullmatch(r"# (HELP|TYPE) (%s) (.*)" % NAME, line)
      if not m:
        raise ValueError("bad comment, " + where)
      kind, name, rest = m.groups()
      fam = families.setdefault(name, {"samples": []})
      if kind in fam:
        raise ValueError("second %s, %s" % (kind, where))
      if fam["samples"]:
        raise ValueError("%s after samples, %s" % (kind, where))
      if kind == "TYPE" and rest not in TYPES:
        raise ValueError("unknown type, " + where)
      fam[kind] = rest
      current = name
      continue
    m = SAMPLE.match(line)
    if not m:
      raise ValueError("not a sample, " + where)
    name, labels, value = m.group(1), parse_labels(m.group(2)), \
        parse_value(m.group(3))
    base = name
    if current and families[current].get("TYPE") == "histogram":
      for suffix in ("_bucket", "_sum", "_count"):
        if name == current + suffix:
          base = current
    if base != current or "TYPE" not in families[current]:
      raise ValueError("sample outside its family's TYPE, " + where)
    series = (name, tuple(sorted(labels.items())))
    if series in seen:
      raise ValueError("series twice, " + where)
    seen.add(series)
    families[base]["samples"].append((name, labels, value))
  for name, fam in families.items():
    if "TYPE" not in fam or "HELP" not in fam:
      raise ValueError("%s lacks HELP or TYPE" % name)
    if fam["TYPE"] == "counter" and not name.endswith("_total"):
      raise ValueError("counter %s does not end in _total" % name)
    if fam["TYPE"] == "histogram":
      check_histogram(name, fam["samples"])
  return families


def check_histogram(name, samples):
  buckets = [(l, v) for s, l, v in samples if s == name + "_bucket"]
  count = [v for s, l, v in samples if s == name + "_count"]
  total = [v for s, l, v in samples if s == name + "_sum"]
  if len(count) != 1 or len(total) != 1 or not buckets:
    raise ValueError("%s needs buckets, one _sum and one _count" % name)
  bounds = [parse_value(l["le"]) for l, v in buckets]
  if bounds != sorted(bounds) or bounds[-1] != math.inf:
    raise ValueError("%s: le must increase and end at +Inf" % name)
  counts = [v for l, v in buckets]
  if counts != sorted(counts) or counts[-1] != count[0]:
    raise ValueError("%s: buckets must be cumulative up to _count" % name)


def value(families, name, **labels):
  """The value of series name{labels} (a histogram's too)."""
  for fam in families.values():
    for s, l, v in fam["samples"]:
      if s == name and l == labels:
        return v
  raise KeyError("%s%r" % (name, labels))


class ParserTest(unittest.TestCase):
  """The parser refuses what Prometheus would refuse."""

  def test_refuses_bad_text(self):
    good = "# HELP a_total x\n# TYPE a_total counter\na_total 1\n"
    self.assertIn("a_total", parse_exposition(good))
    for bad in (
        "a 1\n",                                            # no TYPE
        "# HELP a x\n# TYPE a gauge\na 1",                  # no newline
        "# HELP a x\n# TYPE a gauge\na{b=\"1} 1\n",          # bad quote
        "# HELP a x\n# TYPE a gauge\na 1\na 2\n",            # series twice
        "# HELP a x\n# TYPE a gauge\na one\n",               # bad value
        "# HELP a x\n# TYPE a counter\na 1\n",               # no _total
        "# HELP a x\n# TYPE a gauge\n# TYPE a gauge\na 1\n",  # TYPE twice
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
        "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",      # not cumulative
    ):
      with self.assertRaises(ValueError, msg=bad):
        parse_exposition(bad)
    self.assertEqual(parse_labels(r'a="x\"y\\z\n"'), {"a": 'x"y\\z\n'})


class ScrapeTest(unittest.TestCase):

  def test_a_scrape_parses_and_shows_the_books(self):
    with Gmlaked(["--capacity=64MiB", "--precreate=4MiB",
                  "--metrics_address=127.0.0.1:0"]) as d:
      m = re.search(r"metrics: Prometheus text at (http://\S+)", d.log())
      self.assertIsNotNone(m, d.log())
      url = m.group(1)
      self.assertTrue(url.startswith("http://127.0.0.1:"), url)
      client = subprocess.Popen(
          [runfile("tests/integration/lake_client"), "--socket=" + d.socket,
           "--name=scraped"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
          text=True)
      try:
        self.assertTrue(client.stdout.readline().startswith("ready "))
        client.stdin.write("acquire 0 3\n")
        client.stdin.flush()
        self.assertTrue(client.stdout.readline().startswith("ok"))

        with urllib.request.urlopen(url, timeout=10) as r:
          self.assertEqual(r.status, 200)
          self.assertEqual(r.headers.get_content_type(), "text/plain")
          self.assertIn("version=0.0.4", r.headers["Content-Type"])
          text = r.read().decode("utf-8")
        fams = parse_exposition(text)

        self.assertEqual(value(fams, "gmlake_info", backend="host",
                               protocol="1", scrub="cross-uid"), 1)
        self.assertEqual(value(fams, "gmlake_leased_bytes", device="0"),
                         3 * CHUNK)
        self.assertEqual(value(fams, "gmlake_created_bytes", device="0"),
                         3 * CHUNK)
        self.assertEqual(value(fams, "gmlake_capacity_bytes", device="0"),
                         32 * CHUNK)
        self.assertEqual(value(fams, "gmlake_floor_bytes", device="0"),
                         2 * CHUNK)
        self.assertEqual(value(fams, "gmlake_leased_chunks", device="0"), 3)
        self.assertEqual(value(fams, "gmlake_sessions", state="watching"), 1)
        self.assertGreaterEqual(value(fams, "gmlake_leases_served_total"), 1)
        self.assertEqual(value(fams, "gmlake_pressure_wait_seconds_count"),
                         0)
        for name in ("gmlake_free_bytes", "gmlake_scrubbing_bytes",
                     "gmlake_leases_failed_total", "gmlake_reclaimed_bytes_total",
                     "gmlake_zeroed_bytes_total",
                     "gmlake_pressure_rounds_total",
                     "gmlake_pressure_asked_bytes_total",
                     "gmlake_pressure_promised_bytes_total",
                     "gmlake_pressure_returned_bytes_total",
                     "gmlake_leased_chunks_total",
                     "gmlake_released_bytes_total"):
          self.assertIn(name, fams)
        # Conventions: bytes in _bytes, seconds in _seconds.
        for name, fam in fams.items():
          self.assertTrue(name.startswith("gmlake_"), name)
          if "bytes" in name:
            self.assertRegex(name, r"_bytes(_total)?$")

        client.stdin.write("quit\n")
        client.stdin.flush()
        self.assertEqual(client.wait(10), 0)
      finally:
        if client.poll() is None:
          client.kill()
          client.wait()
        client.stdin.close()
        client.stdout.close()

      # Once the client is gone, the chunks are free (and counted).
      for _ in range(100):
        with urllib.request.urlopen(url, timeout=10) as r:
          fams = parse_exposition(r.read().decode())
        if value(fams, "gmlake_leased_bytes", device="0") == 0:
          break
      # The daemon wakes every 200 ms (--liveness_interval), and with no
      # session open it would give free chunks back then: the books must
      # not depend on whether the scrape came before that wake. Let a few
      # wakes pass, then scrape again (a slow machine's schedule, made sure).
      time.sleep(1)
      with urllib.request.urlopen(url, timeout=10) as r:
        fams = parse_exposition(r.read().decode())
      self.assertEqual(value(fams, "gmlake_free_bytes", device="0"),
                       3 * CHUNK)
      self.assertEqual(value(fams, "gmlake_sessions", state="watching"), 0)

      # Other paths and methods.
      with self.assertRaises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=10)
      self.assertEqual(e.exception.code, 404)
      with self.assertRaises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url, data=b"x"),
                               timeout=10)
      self.assertEqual(e.exception.code, 405)

  def test_metrics_are_off_unless_asked_for(self):
    with Gmlaked(["--capacity=8MiB"]) as d:
      self.assertNotIn("metrics:", d.log())

  def test_an_address_in_use_stops_the_start_with_a_clear_message(self):
    with Gmlaked(["--capacity=8MiB", "--metrics_address=127.0.0.1:0"]) as a:
      port = re.search(r"127\.0\.0\.1:(\d+)/metrics", a.log()).group(1)
      with Gmlaked(["--capacity=8MiB",
                    "--metrics_address=127.0.0.1:" + port], wait=False) as b:
        self.assertEqual(b.proc.wait(30), 1)
        self.assertIn("--metrics_address=127.0.0.1:%s: cannot listen" % port,
                      b.log())


if __name__ == "__main__":
  unittest.main()
