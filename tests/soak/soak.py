#!/usr/bin/env python3
"""Soak: mixed load on AddressSanitizer/UBSan builds of both services for a
long time, reporting RSS over time and every sanitizer finding.

Not a CI test (it runs for DURATION, 30 minutes by default); tests/soak/soak.sh
builds build-asan/ and runs this. What it does:
  * a generated model (moesplit make-test-model, the tiny preset: 4 layers);
  * two expert workers, one per half of the layers: one over shared memory
    (--expert-memory shared), one over gRPC;
  * moesplit-dense with --http, --grpc, --parallel 4, --max-queue 8;
  * CLIENTS threads of mixed load: streaming and non-streaming HTTP
    completions and chat, gRPC Generate/Chat (some with logprobs),
    Tokenize/Detokenize, clients that disconnect mid-stream (HTTP) or cancel
    (gRPC), malformed and oversized requests, over-long stop/messages lists;
  * each worker killed (SIGKILL) and restarted under the same name/port once
    mid-run (at 1/3 and 2/3 of DURATION);
  * RSS (VmRSS) of every process every 10 s into rss.csv;
  * at the end SIGTERM to everything, so LeakSanitizer reports at exit;
  * a summary: requests by outcome, RSS start/peak/end per process, and the
    sanitizer findings (count + first lines of each unique report).

Usage: soak.py --bin BIN_DIR --work DIR [--duration S] [--clients N] [--proto DIR]
Needs an interpreter that imports grpc (Debian python3-grpcio, grpc-tools).
"""
import argparse
import collections
import glob
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"
args = None
pb = pb_grpc = grpc = None
outcomes = collections.Counter()
by_minute = collections.defaultdict(collections.Counter)  # minute -> {"ok", "error", "refused"}
outcomes_lock = threading.Lock()
soak_start = time.monotonic()
stop_load = threading.Event()
WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly "
         "judge boxing matches near caf\u00e9 \u65e5\u672c \u2603 and numbers 12345").split()


def count(kind, outcome):
    o = str(outcome)
    # ok: served; refused: a bad request refused as it should be (4xx /
    # INVALID_ARGUMENT) or a busy 429; error: anything else.
    if o in ("200", "OK", "cancelled by client"):
        cls = "ok"
    elif kind.startswith(("http bad", "grpc bad")) or o in ("429", "RESOURCE_EXHAUSTED"):
        cls = "refused"
    else:
        cls = "error"
    with outcomes_lock:
        outcomes[(kind, o)] += 1
        by_minute[int((time.monotonic() - soak_start) // 60)][cls] += 1


def load_grpc():
    global grpc, pb, pb_grpc
    import grpc as g
    out = os.path.join(args.work, "py")
    os.makedirs(out, exist_ok=True)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + args.proto,
                    "--python_out=" + out, "--grpc_python_out=" + out,
                    os.path.join(args.proto, "moesplit", "v1", "inference.proto")], check=True)
    sys.path.insert(0, out)
    from moesplit.v1 import inference_pb2, inference_pb2_grpc
    grpc, pb, pb_grpc = g, inference_pb2, inference_pb2_grpc


def sanitizer_env(tag):
    env = dict(os.environ)
    san = os.path.join(args.work, "san")
    env["ASAN_OPTIONS"] = ("detect_leaks=1:log_path=%s/asan-%s:abort_on_error=0:"
                           "detect_stack_use_after_return=1:strict_string_checks=1" % (san, tag))
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=0:log_path=%s/ubsan-%s" % (san, tag)
    env["LSAN_OPTIONS"] = "report_objects=0"
    return env


class Proc:
    """A service process whose stderr goes to a log; restartable."""

    def __init__(self, tag, argv, ready):
        self.tag, self.argv, self.ready = tag, argv, ready
        self.proc = None
        self.starts = 0
        self.exits = []  # (how it ended) for every run that ended

    def start(self):
        self.starts += 1
        self.log_path = os.path.join(args.work, "%s.%d.log" % (self.tag, self.starts))
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=self.log,
                                     env=sanitizer_env(self.tag))
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            text = self.stderr()
            m = re.search(self.ready, text)
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError("%s did not start:\n%s" % (self.tag, self.stderr()[-3000:]))

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.exits.append("SIGKILL (by the soak)")

    def terminate(self, timeout=120):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            self.exits.append("did not stop in %d s after SIGTERM (killed)" % timeout)
            return
        self.exits.append("exit %d after SIGTERM" % rc)

    def rss_kb(self):
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
            return int(m.group(1)) if m else None
        except OSError:
            return None


# ------------------------------------------------------------------ clients

def words(n):
    return " ".join(random.choice(WORDS) for _ in range(n))


def http_request(port, method, path, body=None, headers=None, timeout=120):
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, data
    finally:
        c.close()


def http_completion(port, chat, stream):
    body = {"max_tokens": random.randint(4, 24), "temperature": random.choice([0, 0.7, 1.0]),
            "stream": stream}
    if random.random() < 0.3:
        body["logprobs"] = True if chat else 3
        if chat:
            body["top_logprobs"] = 3
    if chat:
        body["messages"] = [{"role": "user", "content": words(random.randint(3, 40))}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = words(random.randint(3, 120))
        path = "/v1/completions"
    status, data = http_request(port, "POST", path, json.dumps(body),
                                {"Content-Type": "application/json"})
    kind = "http %s%s" % ("chat" if chat else "completion", " stream" if stream else "")
    if status == 200 and stream and b"data: [DONE]" not in data:
        count(kind, "200 without [DONE]")
    else:
        count(kind, status)


def http_disconnect(port):
    """A streaming request whose client goes away after the first chunk."""
    body = json.dumps({"prompt": words(30), "max_tokens": 64, "stream": True})
    s = socket.create_connection((HOST, port), timeout=60)
    try:
        s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\n\r\n%s" % (len(body.encode()), body)).encode())
        got = s.recv(4096)
        status = got.split(b" ", 2)[1].decode() if got.startswith(b"HTTP/1.1") else "?"
        count("http disconnect mid-stream", status)
    finally:
        s.close()


def http_bad(port):
    case = random.choice(["json", "oversize", "stop5", "messages2049", "route", "type", "long"])
    hdr = {"Content-Type": "application/json"}
    if case == "json":
        r = http_request(port, "POST", "/v1/completions", b'{"prompt": "x", ', hdr)
    elif case == "oversize":
        # 5 MiB declared (over --max-body-bytes 4MiB): 413 before the body is sent.
        s = socket.create_connection((HOST, port), timeout=60)
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n{\"prompt\": \""
                      % (5 << 20))
            got = s.recv(4096)
            r = (got.split(b" ", 2)[1].decode() if got.startswith(b"HTTP/1.1") else "?",)
        finally:
            s.close()
    elif case == "stop5":
        r = http_request(port, "POST", "/v1/completions",
                         json.dumps({"prompt": "x", "stop": ["a"] * 5}), hdr)
    elif case == "messages2049":
        r = http_request(port, "POST", "/v1/chat/completions",
                         json.dumps({"messages": [{"role": "user", "content": "x"}] * 2049}), hdr)
    elif case == "route":
        r = http_request(port, "GET", "/v1/nothing")
    elif case == "type":
        r = http_request(port, "POST", "/v1/completions",
                         json.dumps({"prompt": "x", "temperature": "hot", "max_tokens": -1}), hdr)
    else:
        r = http_request(port, "POST", "/v1/completions",
                         json.dumps({"prompt": list(range(5000))}), hdr)
    count("http bad " + case, r[0])


def grpc_call(stub):
    case = random.choice(["generate", "generate", "chat", "cancel", "tokens", "bad"])
    try:
        if case == "generate":
            req = pb.GenerateRequest(prompt=words(random.randint(3, 60)).encode(),
                                     max_tokens=random.randint(4, 24),
                                     logprobs=random.choice([0, 0, 5, 20]))
            req.sampling.temperature = random.choice([0, 0.8])
            n = sum(1 for _ in stub.Generate(req, timeout=120))
            count("grpc generate", "OK" if n > 0 else "OK but empty")
        elif case == "chat":
            req = pb.ChatRequest(messages=[pb.ChatMessage(role=b"user",
                                                          content=words(10).encode())],
                                 max_tokens=random.randint(4, 24), logprobs=random.choice([0, 3]))
            list(stub.Chat(req, timeout=120))
            count("grpc chat", "OK")
        elif case == "cancel":
            call = stub.Generate(pb.GenerateRequest(prompt=words(20).encode(), max_tokens=64),
                                 timeout=120)
            for _ in call:
                break
            call.cancel()
            count("grpc generate cancelled", "cancelled by client")
        elif case == "tokens":
            ids = stub.Tokenize(pb.TokenizeRequest(text=words(20).encode()), timeout=30).tokens
            stub.Detokenize(pb.DetokenizeRequest(tokens=list(ids)[:random.randint(1, len(ids))]),
                            timeout=30)
            count("grpc tokenize+detokenize", "OK")
        else:
            bad = random.choice([
                pb.GenerateRequest(prompt=b"\xff\xfe", max_tokens=2),
                pb.GenerateRequest(prompt=b"x", max_tokens=2, stop=[b"a"] * 5),
                pb.GenerateRequest(prompt_tokens=[10**6], max_tokens=2),
                pb.GenerateRequest(prompt=b"x", max_tokens=-1),
                pb.GenerateRequest(prompt=b"x", logprobs=1000),
            ])
            list(stub.Generate(bad, timeout=30))
            count("grpc bad", "OK (unexpected)")
    except grpc.RpcError as e:
        name = "grpc " + ("bad" if case == "bad" else case)
        if case == "cancel" and e.code() == grpc.StatusCode.CANCELLED:
            count("grpc generate cancelled", "cancelled by client")
        else:
            count(name, e.code().name)


def client_loop(seed, http_port, grpc_port):
    random.seed(seed)
    channel = grpc.insecure_channel("%s:%d" % (HOST, grpc_port))
    stub = pb_grpc.InferenceStub(channel)
    while not stop_load.is_set():
        r = random.random()
        try:
            if r < 0.40:
                http_completion(http_port, chat=random.random() < 0.5,
                                stream=random.random() < 0.5)
            elif r < 0.48:
                http_disconnect(http_port)
            elif r < 0.58:
                http_bad(http_port)
            else:
                grpc_call(stub)
        except Exception as e:  # noqa: BLE001  (the soak counts every failure)
            count("client exception", type(e).__name__)
            time.sleep(0.5)
    channel.close()


# ------------------------------------------------------------------ findings

def sanitizer_reports():
    """[(file, first line, text)] of every report in the sanitizer logs."""
    reports = []
    for path in sorted(glob.glob(os.path.join(args.work, "san", "*"))):
        with open(path, errors="replace") as f:
            text = f.read()
        # ASan/LSan reports open with "==PID==ERROR:" or "==PID==WARNING:";
        # UBSan's with "file:line:col: runtime error:".
        starts = [m.start() for m in re.finditer(
            r"^(==\d+==(ERROR|WARNING)|.*: runtime error: )", text, re.M)]
        if not starts and text.strip():
            starts = [0]
        for i, s in enumerate(starts):
            chunk = text[s:starts[i + 1] if i + 1 < len(starts) else len(text)]
            first = chunk.strip().splitlines()[0]
            reports.append((os.path.basename(path), first, chunk))
    return reports


def report_key(first, chunk):
    """What makes two reports the same finding: the kind and the first frame in
    our code (addresses, pids and sizes stripped)."""
    kind = re.sub(r"==\d+==", "", first)
    kind = re.sub(r"0x[0-9a-f]+", "ADDR", kind)
    kind = re.sub(r"\d+ byte\(s\)", "N byte(s)", kind)
    frame = ""
    for line in chunk.splitlines():
        m = re.search(r"#\d+ 0x[0-9a-f]+ in (.*)", line)
        if m and ("/common/" in line or "/services/" in line):
            frame = re.sub(r"0x[0-9a-f]+", "", m.group(1)).strip()
            break
    return kind + " | " + frame


def summarize(procs, rss_rows, started, ended):
    lines = []
    lines.append("soak: %.1f min of load, %d client threads, bin %s" %
                 ((ended - started) / 60, args.clients, args.bin))
    total = sum(outcomes.values())
    lines.append("requests: %d" % total)
    for (kind, outcome), n in sorted(outcomes.items()):
        lines.append("  %-34s %-26s %7d" % (kind, outcome, n))
    lines.append("by minute (ok/refused/error): " + " ".join(
        "%d:%d/%d/%d" % (m, c["ok"], c["refused"], c["error"]) for m, c in sorted(by_minute.items())))
    lines.append("processes (RSS MB: start / peak / end of each run; how each run ended):")
    for p in procs:
        for run in range(1, p.starts + 1):
            rows = [r for r in rss_rows if r[1] == p.tag and r[3] == run and r[2] is not None]
            if rows:
                vals = [r[2] / 1024 for r in rows]
                rss = "%.0f / %.0f / %.0f" % (vals[0], max(vals), vals[-1])
            else:
                rss = "no samples"
            how = p.exits[run - 1] if run - 1 < len(p.exits) else "still running?"
            lines.append("  %-12s run %d: %-22s %s" % (p.tag, run, rss, how))
    reports = sanitizer_reports()
    unique = collections.OrderedDict()
    for f, first, chunk in reports:
        k = report_key(first, chunk)
        if k not in unique:
            unique[k] = [0, f, chunk]
        unique[k][0] += 1
    lines.append("sanitizer reports: %d (%d unique) in %s" %
                 (len(reports), len(unique), os.path.join(args.work, "san")))
    for k, (n, f, chunk) in unique.items():
        lines.append("  [%dx] %s  (first in %s)" % (n, k, f))
        shown = [l for l in chunk.strip().splitlines() if l.strip()][:8]
        lines.extend("      " + l[:160] for l in shown)
    return "\n".join(lines)


# ------------------------------------------------------------------ main

def main():
    global args, soak_start
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="moesplit-dense, moesplit-expert-worker")
    ap.add_argument("--cli", help="the moesplit command for make-test-model (default: "
                    "BIN's, else build/bin's)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--proto", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", "..", "proto"))
    ap.add_argument("--duration", type=float, default=1800)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2, help="dense service threads")
    args = ap.parse_args()
    os.makedirs(os.path.join(args.work, "san"), exist_ok=True)
    load_grpc()
    exe = lambda n: os.path.join(args.bin, n)  # noqa: E731
    model = os.path.join(args.work, "soak.gguf")
    cli = args.cli or (exe("moesplit") if os.path.exists(exe("moesplit")) else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bin", "moesplit"))
    if not os.path.exists(model):
        subprocess.run([cli, "make-test-model", "--out", model, "--name", "soak",
                        "--threads", "2"], check=True, env=sanitizer_env("make-model"),
                       stdout=subprocess.DEVNULL)
    shm_name = "soak-%d-w0" % os.getpid()
    with socket.socket() as s:
        s.bind((HOST, 0))
        grpc_worker_port = s.getsockname()[1]
    w_shm = Proc("worker-shm", [exe("moesplit-expert-worker"), "--model", model, "--shard",
                                "layers=0-1", "--listen-shm", shm_name, "--expert-memory",
                                "shared", "--threads", "1", "--numa", "off"], r"ready on ")
    w_grpc = Proc("worker-grpc", [exe("moesplit-expert-worker"), "--model", model, "--shard",
                                  "layers=2-3", "--listen-grpc", "%s:%d" % (HOST, grpc_worker_port),
                                  "--threads", "1", "--numa", "off"], r"ready on ")
    dense = Proc("dense", [exe("moesplit-dense"), "--model", model, "--experts",
                           "shm://%s,grpc://%s:%d" % (shm_name, HOST, grpc_worker_port),
                           "--http", HOST + ":0", "--grpc", HOST + ":0", "--parallel", "4",
                           "--max-queue", "8", "--ctx", "2048", "--threads", str(args.threads),
                           "--expert-timeout", "20000"],
                 r"ready on grpc port (\d+), http port (\d+)")
    procs = [w_shm, w_grpc, dense]
    w_shm.start()
    w_grpc.start()
    m = dense.start()
    grpc_port, http_port = int(m.group(1)), int(m.group(2))
    print("soak: dense grpc %d http %d, workers shm://%s grpc://%s:%d, work %s" %
          (grpc_port, http_port, shm_name, HOST, grpc_worker_port, args.work), flush=True)

    rss_rows = []  # (t, tag, rss_kb, run)
    csv = open(os.path.join(args.work, "rss.csv"), "w")
    csv.write("seconds,process,run,pid,rss_kb\n")
    started = soak_start = time.monotonic()

    def sample():
        t = time.monotonic() - started
        for p in procs:
            kb = p.rss_kb()
            rss_rows.append((t, p.tag, kb, p.starts))
            csv.write("%.0f,%s,%d,%d,%s\n" % (t, p.tag, p.starts, p.proc.pid,
                                              "" if kb is None else kb))
        csv.flush()

    threads = [threading.Thread(target=client_loop, args=(i, http_port, grpc_port), daemon=True)
               for i in range(args.clients)]
    for t in threads:
        t.start()
    restarts = [(args.duration / 3, w_shm), (2 * args.duration / 3, w_grpc)]
    next_sample = 0.0
    while time.monotonic() - started < args.duration:
        now = time.monotonic() - started
        if now >= next_sample:
            sample()
            next_sample += 10
            for p in procs:
                if p.proc.poll() is not None and len(p.exits) < p.starts:
                    p.exits.append("DIED on its own: exit %s" % p.proc.returncode)
                    print("soak: %s died (exit %s); restarting" % (p.tag, p.proc.returncode),
                          flush=True)
                    p.start()
        if restarts and now >= restarts[0][0]:
            _, p = restarts.pop(0)
            print("soak: %.0f s: SIGKILL %s, restart" % (now, p.tag), flush=True)
            p.kill9()
            time.sleep(2)
            p.start()
            print("soak: %s back (%s)" % (p.tag, p.stderr().strip().splitlines()[0][:120]),
                  flush=True)
        time.sleep(0.5)
    sample()
    stop_load.set()
    for t in threads:
        t.join(150)
    ended = time.monotonic()
    # After the load: the service still answers both APIs.
    status, _ = http_request(http_port, "POST", "/v1/completions", json.dumps(
        {"prompt": "After the soak", "max_tokens": 4, "temperature": 0}),
        {"Content-Type": "application/json"})
    channel = grpc.insecure_channel("%s:%d" % (HOST, grpc_port))
    try:
        n = len(list(pb_grpc.InferenceStub(channel).Generate(
            pb.GenerateRequest(prompt=b"After the soak", max_tokens=4), timeout=60)))
        final_grpc = "OK (%d messages)" % n
    except grpc.RpcError as e:
        final_grpc = e.code().name
    channel.close()
    final = "after the load: HTTP completion %s, gRPC Generate %s" % (status, final_grpc)
    dense.terminate()
    w_shm.terminate()
    w_grpc.terminate()
    csv.close()
    left = [f for f in os.listdir("/dev/shm") if f.startswith(shm_name)]
    summary = summarize(procs, rss_rows, started, ended) + "\n" + final
    if left:
        summary += "\nleft in /dev/shm after the clean stop: %s" % left
    with open(os.path.join(args.work, "summary.txt"), "w") as f:
        f.write(summary + "\n")
    print(summary, flush=True)


if __name__ == "__main__":
    main()
