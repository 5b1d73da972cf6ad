#!/usr/bin/env python3
"""Replica faults under load: 2 layer shards x 2 worker replicas (gRPC on
127.0.0.1, or shared memory), one moesplit-dense naming them --experts
A|B,C|D, and N concurrent greedy streams repeated for D seconds while:
  none     nothing happens (the reference: each prompt's text, the gaps);
  kill     one replica is SIGKILLed a third of the way in and restarted at
           its address;
  rolling  every replica in turn gets SIGTERM, is restarted and is waited
           for until ready before the next one (a rolling update).
Per scenario: requests, failed requests (any non-200 or a stream without
[DONE]), outputs that differ from the fault-free text of the same prompt, and
the longest pause between two chunks of one stream (what a client saw),
next to the same under `none`, and the sub-calls the dense service re-sent
to another replica (moesplit_expert_replica_failovers_total).

Usage: replica_fault_bench.py --bin BUILD/bin --model M --n-layer L
         [--transport grpc|shm] [--streams 8] [--seconds 60] [--tokens 64]
         [--threads 1]
Results and commands: tests/bench/README.md ("Replica faults under load").
"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

PROMPTS = ["once upon", "the cat", "in a far", "to be or", "hello there", "a long time",
           "it was the", "call me"]


class Proc:
    def __init__(self, args, name, pattern):
        self.log_path = os.path.join(args.work, "%s-%d.log" % (name, time.monotonic_ns()))
        self.log = open(self.log_path, "w+b")
        self.proc = None  # the caller starts it with stderr=self.log
        self.pattern = pattern

    def text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_for(self, what, timeout=600):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited:\n%s" % (what, self.text()[-2000:]))
            m = re.search(self.pattern, self.text())
            if m:
                return m
            time.sleep(0.05)
        raise RuntimeError("%s not ready:\n%s" % (what, self.text()[-2000:]))

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_worker(args, name, shard, listen):
    p = Proc(args, name, r": ready on (\S+?):? ")
    cmd = [os.path.join(args.bin, "moesplit-expert-worker"), "--model", args.model, "--shard",
           shard, "--threads", str(args.threads), "--expert-memory", "private"]
    cmd += (["--listen-shm", name] if args.transport == "shm" else
            ["--listen-grpc", listen, "--worker-id", name])
    p.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=p.log)
    p.address = p.wait_for("worker " + name).group(1)
    p.name, p.shard = name, shard
    return p


def start_dense(args, experts):
    p = Proc(args, "dense", r"http port (\d+)")
    p.proc = subprocess.Popen(
        [os.path.join(args.bin, "moesplit-dense"), "--model", args.model, "--grpc",
         "127.0.0.1:0", "--http", "127.0.0.1:0", "--experts", experts, "--threads",
         str(args.threads), "--parallel", str(args.streams), "--expert-timeout", "3000"],
        stdout=subprocess.DEVNULL, stderr=p.log)
    p.port = int(p.wait_for("moesplit-dense").group(1))
    return p


def stream(port, prompt, tokens):
    """(ok, text, longest gap in s between chunks)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True})
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        return False, r.read().decode(errors="replace")[:200], 0.0
    text, gap, last, done = "", 0.0, time.monotonic(), False
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        now = time.monotonic()
        gap, last = max(gap, now - last), now
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            data = event.decode().removeprefix("data: ")
            if data == "[DONE]":
                done = True
            elif data.startswith("{"):
                j = json.loads(data)
                text += "".join(ch.get("text", "") for ch in j.get("choices", []))
    return done, text, gap


def failovers(port):
    """The dense service's failovers so far, all replicas."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    return sum(float(v) for v in re.findall(
        r"(?m)^moesplit_expert_replica_failovers_total\{[^}]*\} (\S+)$", body))


def run_load(args, dense, seconds, fault):
    results, lock = [], threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(i):
        k = 0
        while time.monotonic() < stop_at:
            prompt = PROMPTS[(i + k) % len(PROMPTS)]
            ok, text, gap = stream(dense.port, prompt, args.tokens)
            with lock:
                results.append((prompt, ok, text, gap))
            k += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.streams)]
    for t in threads:
        t.start()
    fault(stop_at)
    for t in threads:
        t.join()
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n-layer", type=int, required=True)
    ap.add_argument("--transport", default="grpc", choices=["grpc", "shm"])
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", default="/tmp/moesplit-fault-bench")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    half = args.n_layer // 2
    shards = ["layers=0-%d" % (half - 1), "layers=%d-%d" % (half, args.n_layer - 1)]
    tag = "fault%d" % os.getpid()
    workers = [[start_worker(args, "%s-s%dr%d" % (tag, s, r), shards[s], "127.0.0.1:0")
                for r in range(2)] for s in range(2)]
    dense = start_dense(args, ",".join("|".join(w.address for w in g) for g in workers))

    def restart(s, r, sig):
        old = workers[s][r]
        old.stop(sig)
        listen = old.address[len("grpc://"):] if args.transport == "grpc" else ""
        workers[s][r] = start_worker(args, old.name, old.shard, listen)

    def none(stop_at):
        pass

    def kill(stop_at):
        time.sleep(args.seconds / 3)
        restart(1, 0, signal.SIGKILL)

    def rolling(stop_at):
        for s in range(2):
            for r in range(2):
                restart(s, r, signal.SIGTERM)
                time.sleep(2)  # > the dense service's 1 s probe: it sees the new one first

    try:
        want, base_gap = {}, None
        print("| scenario | requests | failed | outputs differing | longest pause between chunks s "
              "| failovers |")
        print("|---|---|---|---|---|---|")
        for name, fault in (("none", none), ("kill", kill), ("rolling", rolling)):
            before = failovers(dense.port)
            res = run_load(args, dense, args.seconds, fault)
            time.sleep(0.5)  # the metrics refresh every 200 ms
            moved = failovers(dense.port) - before
            if name == "none":
                for prompt, ok, text, _ in res:
                    if ok:
                        want.setdefault(prompt, text)
            failed = sum(1 for _, ok, _, _ in res if not ok)
            differ = sum(1 for p, ok, text, _ in res if ok and p in want and text != want[p])
            gap = max((g for _, ok, _, g in res if ok), default=0.0)
            print("| %s | %d | %d | %d | %.3f | %d |" % (name, len(res), failed, differ, gap, moved),
                  flush=True)
    finally:
        dense.stop()
        for g in workers:
            for w in g:
                w.stop(signal.SIGKILL)


if __name__ == "__main__":
    main()
