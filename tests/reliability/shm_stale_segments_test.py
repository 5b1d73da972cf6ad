#!/usr/bin/env python3
"""Shared-memory segments an expert worker killed with SIGKILL leaves in
/dev/shm (its control segment and, with --expert-memory shared, its
shard-sized expert segments), and who removes them: the next worker started
with that name, and `moesplit up` before it starts its workers. A live
worker's segments are never touched, not even by a second worker started
with the live one's name.

Usage: shm_stale_segments_test.py BIN_DIR WORK_DIR [unittest args]
  Real moesplit-expert-worker processes on the generated test model of
  http_reliability_test.py; every wait is bounded.
"""
import os
import re
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_reliability_test as rel  # noqa: E402  (the generated model)

SHM = "/dev/shm"


def segments(name):
    """{segment: inode} of worker `name`: NAME, NAME.experts.<i> (not the lock)."""
    out = {}
    for f in os.listdir(SHM):
        if f == name or re.fullmatch(re.escape(name) + r"\.experts\.\d+", f):
            try:
                out[f] = os.stat(os.path.join(SHM, f)).st_ino
            except FileNotFoundError:
                pass
    return out


class Worker:
    """One moesplit-expert-worker serving shared memory under `name`."""

    def __init__(self, name, wait_ready=True):
        self.name = name
        self.log_path = os.path.join(rel.WORK, "worker-%s.log" % name)
        self.log = open(self.log_path, "w+b")
        args = [os.path.join(rel.BIN, "moesplit-expert-worker"), "--model", rel.make_model(),
                "--listen-shm", name, "--expert-memory", "shared", "--threads", "1",
                "--numa", "off"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log)
        if wait_ready:
            self.wait_for(b"ready on shm://" + name.encode())

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_for(self, what, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if what.decode() in self.stderr():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError("worker %s: no %r:\n%s" % (self.name, what, self.stderr()))

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def removed_line(text, name):
    m = re.search(r"removed (\d+) stale segments? \(([\d.]+) GB\) of shm://%s\b" % re.escape(name),
                  text)
    return (int(m.group(1)), float(m.group(2))) if m else None


class StaleSegmentsTest(unittest.TestCase):
    def setUp(self):
        self.prefix = "msstale-%d" % os.getpid()
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            w.stop()
        for f in os.listdir(SHM):
            if f.startswith(self.prefix):
                os.unlink(os.path.join(SHM, f))

    def start(self, name, **kw):
        w = Worker(name, **kw)
        self.workers.append(w)
        return w

    def killed_worker(self, name):
        """A worker started with shared expert memory, then SIGKILLed: its
        segments (control + at least one expert region) are still there."""
        w = self.start(name)
        before = segments(name)
        self.assertIn(name + ".experts.0", before, "the shared expert segment:\n" + w.stderr())
        self.assertIn(name, before, "the control segment")
        w.kill9()
        self.assertEqual(segments(name), before, "SIGKILL leaves every segment behind")
        return before

    def test_next_worker_of_the_name_removes_a_killed_workers_segments(self):
        dead, live = self.prefix + "-dead", self.prefix + "-live"
        stale = self.killed_worker(dead)
        survivor = self.start(live)
        live_before = segments(live)
        self.assertIn(live + ".experts.0", live_before)

        # A second worker under the live one's name is refused and touches nothing.
        clash = self.start(live, wait_ready=False)
        self.assertEqual(clash.proc.wait(60), 1, clash.stderr())
        self.assertIn("another expert worker is serving shm://" + live, clash.stderr())
        self.assertEqual(segments(live), live_before, "the live worker's segments are intact")

        # A new worker under the dead one's name removes the dead one's segments.
        again = self.start(dead)
        got = removed_line(again.stderr(), dead)
        self.assertIsNotNone(got, "no 'removed N stale segments' line:\n" + again.stderr())
        self.assertEqual(got[0], len(stale), again.stderr())
        now = segments(dead)
        for seg, inode in stale.items():
            self.assertNotEqual(now.get(seg), inode, "%s is still the dead worker's" % seg)
        self.assertEqual(segments(live), live_before, "the live worker's segments are intact")
        self.assertIsNone(survivor.proc.poll(), "the live worker still runs")
        # A clean stop leaves nothing.
        again.stop()
        self.assertEqual(segments(dead), {})

    def test_moesplit_up_removes_stale_segments_before_starting_workers(self):
        name = self.prefix + "-up-w0"
        stale = self.killed_worker(name)
        up = subprocess.run(
            [os.path.join(rel.BIN, "moesplit"), "up", "--model", rel.make_model(), "--name",
             self.prefix + "-up", "--workers", "1", "--threads", "1", "--dense-threads", "1",
             "--grpc", "127.0.0.1:%d" % free_port(), "--prompt", "Hello", "-n", "2",
             "--expert-memory", "shared", "--numa", "off"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=150)
        err = up.stderr.decode(errors="replace")
        self.assertEqual(up.returncode, 0, err)
        got = removed_line(err, name)
        self.assertIsNotNone(got, "no 'moesplit: removed N stale segments' line:\n" + err)
        self.assertEqual(got[0], len(stale), err)
        self.assertIn("moesplit: removed", err)
        self.assertEqual(segments(name), {}, "up's workers stop cleanly")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind((rel.HOST, 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    rel.BIN, rel.WORK = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
