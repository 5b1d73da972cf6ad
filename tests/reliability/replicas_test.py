#!/usr/bin/env python3
"""Replicated expert shards against real processes on loopback: two layer
shards of two worker replicas each (over shared memory, or gRPC on
127.0.0.1), one moesplit-dense naming them --experts A|B,C|D.

- A replica killed (SIGKILL) while a greedy stream is being generated: the
  stream completes with exactly the text of a run without faults, and the
  dense service counts the failover on the killed replica.
- Readiness stays up while every shard has a live replica and goes down,
  naming the shard's layers, when a shard's last replica dies; it comes back
  with a replica.
- `moesplit up --workers 2 --replicas 2 --transport shm|grpc --prompt` gives
  the text of `--replicas 1`.

Usage: replicas_test.py BIN_DIR WORK_DIR [unittest args, e.g. a test name]
  Shares http_reliability_test.py's helpers and generated model (the
  reliability.make_model fixture writes it).

Every case is bounded in time and sends traffic only to 127.0.0.1.
"""
import json
import os
import re
import socket
import subprocess
import sys
import time
import unittest

import http_reliability_test as rt
from http_reliability_test import Dense, request
from ops_test import StreamClient, completion, wait_for

# temperature 0 from this prompt loops without an end-of-generation token: a
# long max_tokens keeps the stream running for seconds on the test model.
LONG = {"prompt": "once upon", "temperature": 0, "max_tokens": 400}
SHARDS = ("layers=0-1", "layers=2-3")  # the test model has 4 layers


class Worker:
    """One moesplit-expert-worker serving `shard` over shm (`name`) or gRPC."""

    def __init__(self, transport, name, shard, grpc_listen="127.0.0.1:0"):
        self.log_path = os.path.join(rt.WORK, "%s-%d.log" % (name, time.monotonic_ns()))
        self.log = open(self.log_path, "w+b")
        self.name = name
        listen = (["--listen-shm", name] if transport == "shm" else
                  ["--listen-grpc", grpc_listen, "--worker-id", name])
        self.proc = subprocess.Popen(
            [os.path.join(rt.BIN, "moesplit-expert-worker"), "--model", rt.make_model(),
             "--shard", shard, "--threads", "1", "--expert-memory", "private"] + listen,
            stdout=subprocess.DEVNULL, stderr=self.log)
        wait_for("the worker's ready line", lambda: self.proc.poll() is not None or
                 b": ready on " in self.stderr(), 60)
        assert self.proc.poll() is None, self.stderr()
        m = re.search(rb": ready on (\S+?):? ", self.stderr())
        self.address = m.group(1).decode()

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        if os.path.exists("/dev/shm/" + self.name):  # what a crashed worker leaves
            for leftover in ("/dev/shm/" + self.name, "/dev/shm/" + self.name + ".owner"):
                if os.path.exists(leftover):
                    os.remove(leftover)


def replica_metric(dense, name, worker):
    """The value of `name` for the replica at `worker` (0 when absent)."""
    _, _, body = request(dense, "GET", "/metrics")
    m = re.search(r'(?m)^%s\{shard="[^"]*",worker="%s"\} (\S+)$' % (name, re.escape(worker)),
                  body.decode())
    return float(m.group(1)) if m else 0.0


class ReplicaFailoverTest(unittest.TestCase):
    def run_failover(self, transport):
        tag = "rep%s%d" % (transport, os.getpid())
        # workers[s][r]: replica r of shard s.
        workers = [[Worker(transport, "%s-s%dr%d" % (tag, s, r), shard) for r in range(2)]
                   for s, shard in enumerate(SHARDS)]
        d = None
        try:
            experts = ",".join("|".join(w.address for w in shard) for shard in workers)
            d = Dense("--experts", experts, "--expert-timeout", "3000")
            status, _, out = completion(d, LONG, timeout=120)
            self.assertEqual(status, 200, out)
            want = json.loads(out)["choices"][0]["text"]
            self.assertGreater(len(want), 0)
            self.assertEqual(request(d, "GET", "/health")[0], 200)

            # Kill a replica of shard 1 while the stream is being generated.
            stream = StreamClient(d, LONG)
            self.assertTrue(stream.read_until(b'"text"', 60), stream.raw)
            victim = workers[1][0]
            self.assertNotIn(b"[DONE]", stream.raw)  # mid-stream
            victim.kill()
            body = stream.read_all(120)
            got = "".join(json.loads(e)["choices"][0]["text"] for e in stream.events()
                          if e != "[DONE]" and json.loads(e).get("choices"))
            self.assertEqual(stream.events()[-1], "[DONE]", body[-400:])
            self.assertEqual(got, want)
            # The stream's calls after the kill failed over (counted on the
            # victim; metrics refresh every 200 ms), and a new request gets the
            # same text from the survivors.
            wait_for("the failover counted", lambda: replica_metric(
                d, "moesplit_expert_replica_failovers_total", victim.address) >= 1, 5)
            status, _, out = completion(d, LONG, timeout=120)
            self.assertEqual(status, 200, out)
            self.assertEqual(json.loads(out)["choices"][0]["text"], want)
            self.assertGreater(replica_metric(d, "moesplit_expert_replica_calls_total",
                                              workers[1][1].address), 0)

            # Readiness: shard 1 still has a live replica.
            self.assertEqual(request(d, "GET", "/health")[0], 200)
            # Its last replica gone: not ready, naming layers 2-3.
            workers[1][1].kill()
            status, _, out = wait_for("/health 503", lambda: (lambda r: r[0] == 503 and r)(
                request(d, "GET", "/health")), 10)
            report = json.loads(out)
            self.assertEqual(report["layers_without_worker"], "2-3", report)
            # A replica back at the victim's address: ready again, same text.
            workers[1][0] = Worker(transport, victim.name, SHARDS[1],
                                   victim.address[len("grpc://"):])
            wait_for("/health 200", lambda: request(d, "GET", "/health")[0] == 200, 15)
            status, _, out = completion(d, LONG, timeout=120)
            self.assertEqual(status, 200, out)
            self.assertEqual(json.loads(out)["choices"][0]["text"], want)
        finally:
            if d is not None:
                d.stop()
            for shard in workers:
                for w in shard:
                    w.kill()

    def test_killed_replica_mid_stream_gives_the_same_text_shm(self):
        self.run_failover("shm")

    def test_killed_replica_mid_stream_gives_the_same_text_grpc(self):
        self.run_failover("grpc")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LateReplicaTest(unittest.TestCase):
    def test_dense_starts_with_one_replica_per_shard_and_the_late_one_joins(self):
        tag = "replate%d" % os.getpid()
        names = [["%s-s%dr%d" % (tag, s, r) for r in range(2)] for s in range(2)]
        up = [Worker("shm", names[s][0], SHARDS[s]) for s in range(2)]
        late, d = None, None
        try:
            d = Dense("--experts", ",".join("|".join("shm://" + n for n in g) for g in names))
            self.assertIn("starting with a replica of every shard up; not up yet: shm://%s, shm://%s"
                          % (names[0][1], names[1][1]), d.stderr())
            self.assertEqual(request(d, "GET", "/health")[0], 200)
            status, _, out = completion(d, LONG, timeout=120)
            self.assertEqual(status, 200, out)
            want = json.loads(out)["choices"][0]["text"]
            # Shard 1's late replica comes up, then its first one goes: the
            # late one serves (once a probe has seen it) with the same text.
            late = Worker("shm", names[1][1], SHARDS[1])
            wait_for("the late replica taking calls", lambda: (
                completion(d, {"prompt": "x", "max_tokens": 2}) and replica_metric(
                    d, "moesplit_expert_replica_calls_total", "shm://" + names[1][1]) > 0), 15)
            up[1].kill()
            status, _, out = completion(d, LONG, timeout=120)
            self.assertEqual(status, 200, out)
            self.assertEqual(json.loads(out)["choices"][0]["text"], want)
            self.assertEqual(request(d, "GET", "/health")[0], 200)
        finally:
            if d is not None:
                d.stop()
            for w in up + ([late] if late else []):
                w.kill()


class UpReplicasTest(unittest.TestCase):
    def up(self, *extra):
        p = subprocess.run(
            [os.path.join(rt.BIN, "moesplit"), "up", "--model", rt.make_model(), "--grpc",
             "127.0.0.1:%d" % free_port(), "--threads", "1", "--dense-threads", "1", "--expert-memory",
             "private", "--prompt", "once upon", "--n", "12", "--name",
             "repup%d" % os.getpid()] + list(extra),
            capture_output=True, text=True, timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return p.stdout, p.stderr

    def test_up_with_replicas_gives_the_text_of_one_worker_per_shard(self):
        want, _ = self.up("--workers", "2")
        self.assertTrue(want)
        for transport in ("shm", "grpc"):
            got, err = self.up("--workers", "2", "--replicas", "2", "--transport", transport)
            self.assertEqual(got, want, transport)
            self.assertIn("2 expert shard(s) x 2 replica(s)", err)
            self.assertRegex(err, r"--experts \S+\|\S+,\S+\|\S+")


if __name__ == "__main__":
    rt.BIN, rt.WORK = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
