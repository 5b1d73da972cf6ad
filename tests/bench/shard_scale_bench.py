#!/usr/bin/env python3
"""Sharded experts over a slow network, on one machine: for each split (by
layers, by expert ids), shard count and added round trip, starts that many
moesplit-expert-worker processes over gRPC on 127.0.0.1, each behind its own
delay proxy (delay_proxy.py), and runs `moesplit bench --experts grpc://...`
through the proxies: prefill and decode tok/s, and decode as a fraction of
the same split's 1-shard decode at the same round trip.

Usage: shard_scale_bench.py --bin BUILD/bin --model M --n-layer L --n-expert E
         [--shards 1,2,4] [--split layers,experts] [--rtt-ms 0,0.2,0.5,1]
         [--prompt 128] [--gen 32] [--reps 1] [--threads 2] [--json OUT]
The model's trunk layers (L) and routed experts (E) make the shards: shard i
of N serves layers [i*L/N, (i+1)*L/N) (by layers) or expert ids
[i*E/N, (i+1)*E/N) of every layer (by expert ids). Full commands and results:
tests/bench/README.md ("Sharded experts over a delayed network").
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from delay_proxy import DelayProxy  # noqa: E402


def shard_text(split, i, n, n_layer, n_expert):
    if split == "layers":
        return "layers=%d-%d" % (i * n_layer // n, (i + 1) * n_layer // n - 1)
    return "experts=%d-%d" % (i * n_expert // n, (i + 1) * n_expert // n - 1)


class Worker:
    def __init__(self, args, shard, tag):
        self.log_path = os.path.join(args.work, "%s.log" % tag)
        self.log = open(self.log_path, "w+b")
        self.proc = subprocess.Popen(
            [os.path.join(args.bin, "moesplit-expert-worker"), "--model", args.model, "--shard",
             shard, "--listen-grpc", "127.0.0.1:0", "--worker-id", tag, "--threads",
             str(args.threads)] + args.worker_arg,
            stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(rb": ready on grpc://127\.0\.0\.1:(\d+)", self.stderr())
            if m:
                self.port = int(m.group(1))
                return
            time.sleep(0.1)
        raise RuntimeError("worker %s did not start:\n%s" % (tag, self.stderr().decode()[-2000:]))

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def run_one(args, split, n, rtt):
    workers = [Worker(args, shard_text(split, i, n, args.n_layer, args.n_expert),
                      "w-%s-%d-of-%d" % (split, i, n)) for i in range(n)]
    proxies = [DelayProxy("127.0.0.1", w.port, rtt) for w in workers]
    try:
        out = subprocess.run(
            [os.path.join(args.bin, "moesplit"), "bench", "--model", args.model, "--experts",
             ",".join("grpc://127.0.0.1:%d" % p.port for p in proxies), "--prompt",
             str(args.prompt), "--gen", str(args.gen), "--reps", str(args.reps), "--threads",
             str(args.threads), "--json"], capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            raise RuntimeError("moesplit bench failed:\n" + out.stderr[-3000:])
        j = json.loads(out.stdout)
        return {"split": split, "shards": n, "rtt_ms": rtt, "prefill_tok_s": j["prefill_tok_s"],
                "decode_tok_s": j["decode_tok_s"],
                "expert_call_round_trip_us": j.get("expert_call_round_trip_us")}
    finally:
        for p in proxies:
            p.stop()
        for w in workers:
            w.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n-layer", type=int, required=True)
    ap.add_argument("--n-expert", type=int, required=True)
    ap.add_argument("--shards", default="1,2,4")
    ap.add_argument("--split", default="layers,experts")
    ap.add_argument("--rtt-ms", default="0,0.2,0.5,1")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker-arg", action="append", default=[],
                    help="passed to every worker (e.g. --worker-arg=--numa=off)")
    ap.add_argument("--work", default="/tmp/moesplit-shard-bench")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rows = []
    print("| split | shards | added RTT ms | prefill tok/s | decode tok/s | decode vs 1 shard | "
          "expert call round trip us |")
    print("|---|---|---|---|---|---|---|")
    for split in args.split.split(","):
        one_shard = {}
        for rtt in [float(x) for x in args.rtt_ms.split(",")]:
            for n in [int(x) for x in args.shards.split(",")]:
                r = run_one(args, split, n, rtt)
                if n == 1:
                    one_shard[rtt] = r["decode_tok_s"]
                base = one_shard.get(rtt)
                r["decode_vs_1_shard"] = r["decode_tok_s"] / base if base else None
                rows.append(r)
                print("| %s | %d | %g | %.1f | %.2f | %s | %s |" % (
                    split, n, rtt, r["prefill_tok_s"], r["decode_tok_s"],
                    "%.0f%%" % (100 * r["decode_vs_1_shard"]) if base else "-",
                    "%.0f" % r["expert_call_round_trip_us"]
                    if r["expert_call_round_trip_us"] is not None else "-"), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
