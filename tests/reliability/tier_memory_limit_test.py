#!/usr/bin/env python3
"""An expert-worker whose shard is larger than its memory stays inside it
(issue 45): a generated model of ~210 MB of Q8_0 experts, served by a
worker and driven by `moesplit bench` over shared memory (a prefill that
touches every expert, then decode).

  - RSS bound: with --expert-ram 32MiB the worker's peak RSS (VmHWM) stays
    under 32 MiB + 100 MiB of everything else, below the experts' size (an
    all-in-RAM worker holds them all);
  - memory cgroup (where root may make one: v1 memory controller or v2):
    the worker alone in a cgroup of 200 MiB with --expert-ram auto (the
    cgroup's headroom) serves the whole run without an OOM kill, and the
    cgroup's peak stays at the limit or below (the kernel's guarantee: the
    point is that the worker is not killed for its caching).

Usage: tier_memory_limit_test.py BIN_DIR WORK_DIR [unittest args]
"""
import os
import re
import subprocess
import sys
import time
import unittest

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/moesplit-tier-memory"
MiB = 1 << 20


def make_model():
    path = os.path.join(WORK, "tier-memory-q8_0.gguf")
    if os.path.exists(path):
        return path
    os.makedirs(WORK, exist_ok=True)
    tmp = path + ".tmp%d" % os.getpid()
    # 2 layers x 64 experts x 3 x 1024 x 512 Q8_0 = ~214 MB of experts.
    subprocess.run([os.path.join(BIN, "moesplit"), "make-test-model", "--out", tmp,
                    "--preset", "qwen3-30b-a3b", "--layers", "2", "-d", "1024",
                    "--expert-ffn", "512", "--experts", "64", "--top-k", "8", "--vocab", "1024",
                    "--type", "Q8_0", "--threads", "2"],
                   check=True, stdout=subprocess.DEVNULL, timeout=300)
    os.replace(tmp, path)
    return path


def cgroup_dir():
    """A fresh memory cgroup's folder and its version, or (None, why)."""
    name = "moesplit-tier-test-%d" % os.getpid()
    for root, version in (("/sys/fs/cgroup/memory", 1), ("/sys/fs/cgroup", 2)):
        limit = "memory.limit_in_bytes" if version == 1 else "memory.max"
        if version == 2 and not os.path.exists(os.path.join(root, "cgroup.controllers")):
            continue
        if version == 1 and not os.path.isdir(root):
            continue
        path = os.path.join(root, name)
        try:
            os.mkdir(path)
        except OSError as e:
            return None, "cannot make %s: %s" % (path, e)
        if not os.path.exists(os.path.join(path, limit)):
            os.rmdir(path)
            return None, "%s has no %s (memory controller not enabled)" % (path, limit)
        return (path, version), ""
    return None, "no cgroup memory controller mounted"


class Worker:
    def __init__(self, name, extra, cgroup=None):
        model = make_model()  # makes WORK too
        self.log_path = os.path.join(WORK, "worker-%s.log" % name)
        self.log = open(self.log_path, "w+b")
        args = [os.path.join(BIN, "moesplit-expert-worker"), "--model", model,
                "--listen-shm", name, "--threads", "2", "--numa", "off"] + extra
        if cgroup:
            args = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup] + args
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.proc.poll() is None:
            if "ready on" in self.stderr():
                return
            time.sleep(0.1)
        raise AssertionError("worker did not start: " + self.stderr())

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def peak_rss(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) * 1024

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()


def bench(name):
    return subprocess.run([os.path.join(BIN, "moesplit"), "bench", "--model", make_model(),
                           "--experts", "shm://" + name, "--threads", "2", "--prompt", "64",
                           "--gen", "8", "--reps", "1", "--json"],
                          capture_output=True, text=True, timeout=600)


class TierMemoryLimitTest(unittest.TestCase):
    def test_rss_stays_within_expert_ram_plus_overhead(self):
        expert_bytes = 2 * 64 * 3 * 1024 * 512 * 34 // 32
        name = "tier-rss-%d" % os.getpid()
        w = Worker(name, ["--expert-ram", "32MiB", "--io-threads", "4"])
        try:
            self.assertIn("in RAM", w.stderr())  # the tiered ready line
            r = bench(name)
            self.assertEqual(r.returncode, 0, r.stderr)
            peak = w.peak_rss()
            self.assertLess(peak, 32 * MiB + 100 * MiB, w.stderr())
            self.assertLess(peak, expert_bytes, "the worker held every expert")
        finally:
            w.stop()

    def test_worker_in_a_memory_cgroup_is_not_oom_killed(self):
        cg, why = cgroup_dir()
        if cg is None:
            self.skipTest(why)
        path, version = cg
        try:
            limit = 200 * MiB
            with open(os.path.join(path, "memory.limit_in_bytes" if version == 1 else "memory.max"),
                      "w") as f:
                f.write(str(limit))
            name = "tier-cg-%d" % os.getpid()
            w = Worker(name, ["--io-threads", "4"], cgroup=path)  # --expert-ram auto
            try:
                self.assertIn("in RAM", w.stderr())  # 214 MB of experts > the cgroup's headroom
                r = bench(name)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIsNone(w.proc.poll(), "worker died: " + w.stderr())
                if version == 1:
                    with open(os.path.join(path, "memory.oom_control")) as f:
                        self.assertRegex(f.read(), r"oom_kill 0")
                    with open(os.path.join(path, "memory.max_usage_in_bytes")) as f:
                        self.assertLessEqual(int(f.read()), limit)
                else:
                    with open(os.path.join(path, "memory.events")) as f:
                        self.assertRegex(f.read(), r"oom_kill 0")
            finally:
                w.stop()
        finally:
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except OSError:
                    time.sleep(0.1)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:])
