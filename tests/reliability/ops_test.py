#!/usr/bin/env python3
"""The dense service's operations surface against real processes on loopback:
the per-request log lines (text and JSON), the SIGTERM drain (readiness off at
once, in-flight requests finish, bounded by --drain-timeout), readiness while
an expert worker is killed and restarted, model aliases, GET /v1/models/{id},
CORS and the readiness metrics.

Usage: ops_test.py BIN_DIR WORK_DIR [unittest args, e.g. a test name]
  Shares http_reliability_test.py's helpers and generated model (the
  reliability.make_model fixture writes it).

Every case is bounded in time and sends traffic only to 127.0.0.1.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import unittest

import http_reliability_test as rt
from http_reliability_test import Dense, Reader, request, sse_text

TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
# temperature 0 from this prompt loops without an end-of-generation token, so
# a long max_tokens keeps a request running for seconds on the test model.
LONG = {"prompt": "once upon", "temperature": 0}


def completion(dense, body, path="/v1/completions", headers=None, timeout=60):
    status, h, out = request(dense, "POST", path, json.dumps(body).encode(), headers, timeout)
    return status, h, out


def wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = predicate()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))


def grpc_health(bin_dir, port, service=""):
    """moesplit health's output line and exit status."""
    args = [os.path.join(bin_dir, "moesplit"), "health", "--addr", "127.0.0.1:%d" % port,
            "--timeout-ms", "2000"]
    if service:
        args += ["--service", service]
    p = subprocess.run(args, capture_output=True, text=True, timeout=20)
    return (p.stdout + p.stderr).strip(), p.returncode


def grpc_port(dense):
    m = re.search(r"ready on grpc port (\d+)", dense.stderr())
    return int(m.group(1))


class StreamClient:
    """A streaming completion on its own connection, read chunk by chunk."""

    def __init__(self, dense, body):
        self.sock = dense.connect(timeout=60)
        data = json.dumps(dict(body, stream=True)).encode()
        self.sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                          b"Connection: close\r\n\r\n" % len(data) + data)
        self.raw = b""

    def read_until(self, needle, timeout):
        self.sock.settimeout(timeout)
        while needle not in self.raw:
            c = self.sock.recv(65536)
            if not c:
                break
            self.raw += c
        return needle in self.raw

    def read_all(self, timeout):
        self.sock.settimeout(timeout)
        while True:
            c = self.sock.recv(65536)
            if not c:
                break
            self.raw += c
        self.sock.close()
        return self.raw

    def events(self):
        """The SSE data payloads of the (de-chunked) body."""
        body = self.raw.split(b"\r\n\r\n", 1)[1]
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            out += rest[:size]
            rest = rest[size + 2:]
        return [e[len("data: "):] for e in out.decode().split("\n\n") if e.startswith("data: ")]


def request_lines(text):
    return [l for l in text.splitlines() if " moesplit-dense: request " in l]


class RequestLogTest(unittest.TestCase):
    def test_text_lines_one_per_request_with_timings(self):
        d = Dense()
        try:
            status, _, out = completion(d, {"prompt": "hello", "max_tokens": 5, "temperature": 0})
            self.assertEqual(status, 200, out)
            body = json.loads(out)
            t = body["timings"]
            self.assertEqual(t["predicted_n"], body["usage"]["completion_tokens"])
            self.assertEqual(t["prompt_n"], body["usage"]["prompt_tokens"])
            for k in ("prompt_ms", "prompt_per_second", "predicted_ms", "predicted_per_second"):
                self.assertGreaterEqual(t[k], 0, k)
            s = StreamClient(d, {"prompt": "hello", "max_tokens": 4, "temperature": 0,
                                 "stream_options": {"include_usage": True}})
            s.read_all(30)
            events = s.events()
            self.assertEqual(events[-1], "[DONE]")
            last = json.loads(events[-2])
            self.assertEqual(last["timings"]["predicted_n"], last["usage"]["completion_tokens"])
            status, _, _ = completion(d, {"prompt": "hello", "max_tokens": -1})
            self.assertEqual(status, 400)
            lines = wait_for("3 request lines", lambda: len(request_lines(d.stderr())) >= 3 and
                             request_lines(d.stderr()), 5)
            self.assertEqual(len(lines), 3, lines)
            pat = (TS + r" INFO moesplit-dense: request id=(cmpl-\S+) api=http "
                   r"endpoint=completions model=reliability prompt_tokens=(\d+) cached_tokens=0 "
                   r"generated_tokens=(\d+) ttft_ms=([\d.]+) tokens_per_s=([\d.]+) "
                   r"duration_ms=([\d.]+) outcome=ok finish_reason=(\w+)$")
            m = re.match(pat, lines[0])
            self.assertIsNotNone(m, lines[0])
            self.assertEqual(m.group(1), body["id"])
            self.assertEqual(int(m.group(2)), body["usage"]["prompt_tokens"])
            self.assertEqual(int(m.group(3)), body["usage"]["completion_tokens"])
            self.assertLessEqual(float(m.group(4)), float(m.group(6)))
            self.assertEqual(m.group(7), body["choices"][0]["finish_reason"])
            self.assertIsNotNone(re.match(pat, lines[1]), lines[1])
            self.assertIn(" WARN moesplit-dense: request ", lines[2])
            self.assertIn(" outcome=invalid_argument ", lines[2])
            self.assertIn(" generated_tokens=0 ttft_ms=-1 ", lines[2])
            # Start-up lines go through the same logger.
            self.assertIsNotNone(re.search(TS + r" INFO moesplit-dense: ready on grpc port",
                                           d.stderr()))
            print("\n".join(lines))
        finally:
            d.stop()

    def test_json_lines_every_line_parses(self):
        d = Dense("--log-format", "json")
        try:
            status, _, out = completion(d, {"prompt": "hello", "max_tokens": 3, "temperature": 0,
                                            "model": "reliability"})
            self.assertEqual(status, 200, out)
            body = json.loads(out)
            wait_for("a request line", lambda: '"msg":"request"' in d.stderr(), 5)
        finally:
            d.stop()
        lines = [json.loads(l) for l in d.stderr().splitlines() if l.strip()]
        self.assertTrue(all(re.fullmatch(TS, l["ts"]) for l in lines), lines)
        self.assertTrue(any(l["msg"].startswith("ready on grpc port") for l in lines), lines)
        reqs = [l for l in lines if l["msg"] == "request"]
        self.assertEqual(len(reqs), 1, reqs)
        r = reqs[0]
        self.assertEqual(r["level"], "info")
        self.assertEqual(r["id"], body["id"])
        self.assertEqual((r["api"], r["endpoint"], r["model"]), ("http", "completions",
                                                                  "reliability"))
        self.assertEqual(r["prompt_tokens"], body["usage"]["prompt_tokens"])
        self.assertEqual(r["generated_tokens"], body["usage"]["completion_tokens"])
        self.assertEqual(r["cached_tokens"], 0)
        self.assertEqual((r["outcome"], r["finish_reason"]),
                         ("ok", body["choices"][0]["finish_reason"]))
        for k in ("ttft_ms", "tokens_per_s", "duration_ms"):
            self.assertIsInstance(r[k], (int, float), k)
        print(json.dumps(r))


class DrainTest(unittest.TestCase):
    def test_sigterm_flips_readiness_refuses_new_and_finishes_in_flight(self):
        d = Dense("--drain-timeout", "60000", ctx=2048, parallel=2)
        try:
            port = grpc_port(d)
            self.assertEqual(grpc_health(rt.BIN, port), ("SERVING", 0))
            s = StreamClient(d, dict(LONG, max_tokens=1200))
            self.assertTrue(s.read_until(b'"text"', 20), s.raw)
            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            wait_for("draining line", lambda: "draining 1 requests (up to 60 s)" in d.stderr(), 3)
            status, _, out = request(d, "GET", "/health")
            self.assertEqual(status, 503, out)
            self.assertTrue(json.loads(out)["draining"], out)
            self.assertEqual(request(d, "GET", "/health/ready")[0], 503)
            self.assertEqual(request(d, "GET", "/health/live")[0], 200)
            status, _, out = completion(d, {"prompt": "new", "max_tokens": 2})
            self.assertEqual(status, 503, out)
            self.assertEqual(json.loads(out)["error"]["code"], "shutting_down")
            line, rc = grpc_health(rt.BIN, port)
            self.assertNotEqual(rc, 0, line)
            self.assertEqual(grpc_health(rt.BIN, port, "liveness"), ("SERVING", 0))
            self.assertEqual(d.metric("moesplit_draining"), 1)
            self.assertEqual(d.metric("moesplit_ready"), 0)
            self.assertTrue(d.proc.poll() is None, "exited while a request ran")
            s.read_all(60)
            events = s.events()
            self.assertEqual(events[-1], "[DONE]", events[-3:])
            self.assertEqual(json.loads(events[-2])["choices"][0]["finish_reason"], "length")
            self.assertEqual(d.proc.wait(20), 0)
            took = time.monotonic() - t0
            self.assertIn("drained", d.stderr())
            self.assertNotIn("cancelled", d.stderr())
            print("in-flight stream finished %.2f s after SIGTERM, then exit 0" % took)
        finally:
            d.stop()

    def test_drain_timeout_cancels_in_flight_cleanly(self):
        d = Dense("--drain-timeout", "300", ctx=2048)
        try:
            s = StreamClient(d, dict(LONG, max_tokens=2000))
            self.assertTrue(s.read_until(b'"text"', 20), s.raw)
            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            s.read_all(20)
            self.assertEqual(d.proc.wait(20), 0)
            took = time.monotonic() - t0
            events = s.events()
            self.assertEqual(events[-1], "[DONE]", events[-3:])
            err = json.loads(events[-2])
            self.assertEqual(err["error"]["code"], "shutting_down", err)
            self.assertLess(took, 8, "the drain was not bounded by --drain-timeout")
            self.assertIn("cancelled 1 requests", d.stderr())
            self.assertRegex(d.stderr(), r"request id=cmpl-\S+ .* outcome=shutting_down")
            print("in-flight stream cancelled, exit 0 %.2f s after SIGTERM" % took)
        finally:
            d.stop()

    def test_second_signal_skips_the_wait(self):
        d = Dense("--drain-timeout", "60000", ctx=2048)
        try:
            s = StreamClient(d, dict(LONG, max_tokens=2000))
            self.assertTrue(s.read_until(b'"text"', 20), s.raw)
            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            wait_for("draining line", lambda: "draining 1 requests" in d.stderr(), 3)
            d.proc.send_signal(signal.SIGINT)
            s.read_all(20)
            self.assertEqual(d.proc.wait(20), 0)
            self.assertLess(time.monotonic() - t0, 8)
            self.assertIn("cancelled 1 requests (second signal)", d.stderr())
        finally:
            d.stop()


class Worker:
    """One moesplit-expert-worker over shared memory."""

    def __init__(self, name):
        self.log_path = os.path.join(rt.WORK, "%s-%d.log" % (name, time.monotonic_ns()))
        self.log = open(self.log_path, "w+b")
        self.proc = subprocess.Popen(
            [os.path.join(rt.BIN, "moesplit-expert-worker"), "--model", rt.make_model(),
             "--listen-shm", name, "--threads", "1", "--expert-memory", "private"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        wait_for("the worker's ready line", lambda: self.proc.poll() is not None or
                 b": ready " in self.stderr(), 60)
        assert self.proc.poll() is None, self.stderr()

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class ReadinessTest(unittest.TestCase):
    def test_readiness_false_while_a_worker_is_down_and_true_after_it_returns(self):
        name = "opsready%d" % os.getpid()
        w = Worker(name)
        d = None
        try:
            d = Dense("--experts", "shm://" + name)
            port = grpc_port(d)
            self.assertEqual(request(d, "GET", "/health")[0], 200)
            self.assertEqual(grpc_health(rt.BIN, port), ("SERVING", 0))
            w.kill()
            t0 = time.monotonic()
            # No traffic: the probe alone must notice.
            status, _, out = wait_for("/health 503", lambda: (lambda r: r[0] == 503 and r)(
                request(d, "GET", "/health")), 10)
            noticed = time.monotonic() - t0
            report = json.loads(out)
            self.assertFalse(report["draining"])
            self.assertEqual(report["layers_without_worker"], "0-3", report)
            self.assertEqual([m["address"] for m in report["missing_workers"]],
                             ["shm://" + name], report)
            self.assertEqual(request(d, "GET", "/health/ready")[0], 503)
            self.assertEqual(request(d, "GET", "/health/live")[0], 200)
            # gRPC health and the gauge are published by the main loop (every 200 ms).
            line = wait_for("gRPC NOT_SERVING", lambda: (lambda r: r[1] != 0 and r[0])(
                grpc_health(rt.BIN, port)), 5)
            self.assertIn("NOT_SERVING", line)
            self.assertEqual(grpc_health(rt.BIN, port, "liveness"), ("SERVING", 0))
            wait_for("moesplit_ready 0", lambda: d.metric("moesplit_ready") == 0, 5)
            self.assertIn("not serving: no live expert worker for layers 0-3", d.stderr())
            w = Worker(name)
            t1 = time.monotonic()
            wait_for("/health 200", lambda: request(d, "GET", "/health")[0] == 200, 10)
            back = time.monotonic() - t1
            wait_for("gRPC SERVING", lambda: grpc_health(rt.BIN, port) == ("SERVING", 0), 5)
            wait_for("moesplit_ready 1", lambda: d.metric("moesplit_ready") == 1, 5)
            status, _, out = completion(d, {"prompt": "hello", "max_tokens": 3})
            self.assertEqual(status, 200, out)
            self.assertIn("serving again", d.stderr())
            print("worker down noticed after %.2f s without traffic; back after %.2f s" %
                  (noticed, back))
        finally:
            if d is not None:
                d.stop()
            w.kill()
            # Killed, the worker leaves its segment behind (as a crashed one would).
            for leftover in ("/dev/shm/" + name, "/dev/shm/" + name + ".owner"):
                if os.path.exists(leftover):
                    os.remove(leftover)

    def test_waiting_for_workers_names_them(self):
        name = "opsabsent%d" % os.getpid()
        log = os.path.join(rt.WORK, "absent-%d.log" % time.monotonic_ns())
        with open(log, "w+b") as f:
            p = subprocess.run(
                [os.path.join(rt.BIN, "moesplit-dense"), "--model", rt.make_model(), "--grpc",
                 "127.0.0.1:0", "--experts", "shm://" + name, "--connect-timeout", "3500",
                 "--threads", "1"], stdout=subprocess.DEVNULL, stderr=f, timeout=60)
        with open(log) as f:
            text = f.read()
        self.assertNotEqual(p.returncode, 0)
        self.assertRegex(text, r"waiting for workers \(0 of 1 up, \d+ s\): expert worker shm://%s "
                               r"is not running" % name)
        self.assertNotIn("ready", text.replace("already", ""))


class SurfaceTest(unittest.TestCase):
    def test_aliases_model_object_cors_and_metrics(self):
        d = Dense("--served-model-name", "alpha,beta", "--served-model-name", "gamma",
                  "--cors-origin", "http://app.example")
        try:
            status, _, out = request(d, "GET", "/v1/models")
            self.assertEqual([m["id"] for m in json.loads(out)["data"]],
                             ["alpha", "beta", "gamma"])
            status, _, out = request(d, "GET", "/v1/models/beta")
            self.assertEqual((status, json.loads(out)["id"]), (200, "beta"))
            self.assertEqual(request(d, "GET", "/v1/models/reliability")[0], 200)
            status, _, out = request(d, "GET", "/v1/models/nope")
            self.assertEqual((status, json.loads(out)["error"]["code"]), (404, "model_not_found"))
            for name in ("alpha", "gamma", "reliability"):
                status, _, out = completion(d, {"prompt": "hi", "max_tokens": 1, "model": name})
                self.assertEqual(status, 200, out)
                self.assertEqual(json.loads(out)["model"], "alpha")
            status, _, out = completion(d, {"prompt": "hi", "max_tokens": 1, "model": "nope"})
            self.assertEqual((status, json.loads(out)["error"]["code"]), (404, "model_not_found"))
            self.assertIn("'alpha', 'beta', 'gamma'", json.loads(out)["error"]["message"])
            # The documented choice for unknown names on every route (docs/operations.md):
            # 404 in each API's shape; no name (or "") is served.
            status, _, out = completion(d, {"input": "hi", "max_output_tokens": 1,
                                            "model": "nope"}, path="/v1/responses")
            self.assertEqual((status, json.loads(out)["error"]["code"]), (404, "model_not_found"))
            status, _, out = completion(d, {"model": "nope", "max_tokens": 1, "messages": [
                {"role": "user", "content": "hi"}]}, path="/v1/messages")
            self.assertEqual((status, json.loads(out)["error"]["type"]), (404, "not_found_error"))
            status, _, out = completion(d, {"model": "gamma", "max_tokens": 1, "messages": [
                {"role": "user", "content": "hi"}]}, path="/v1/messages")
            self.assertEqual(status, 200, out)
            for body in ({"prompt": "hi", "max_tokens": 1},
                         {"prompt": "hi", "max_tokens": 1, "model": ""},
                         {"prompt": "hi", "max_tokens": 1, "model": None}):
                status, _, out = completion(d, body)
                self.assertEqual(status, 200, (body, out))
            status, _, out = completion(d, {"input": "hi", "max_output_tokens": 1},
                                        path="/v1/responses")
            self.assertEqual(status, 200, out)
            # CORS: preflight before the method check, the origin echoed.
            pre = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST",
                   "Access-Control-Request-Headers": "authorization, content-type"}
            status, h, _ = request(d, "OPTIONS", "/v1/chat/completions", headers=pre)
            self.assertEqual(status, 204)
            self.assertEqual(h["access-control-allow-origin"], "http://app.example")
            self.assertIn("POST", h["access-control-allow-methods"])
            self.assertIn("Authorization", h["access-control-allow-headers"])
            self.assertIn("Content-Type", h["access-control-allow-headers"])
            status, h, _ = request(d, "OPTIONS", "/v1/chat/completions",
                                   headers=dict(pre, Origin="http://evil.example"))
            self.assertEqual(status, 403)
            self.assertNotIn("access-control-allow-origin", h)
            status, h, _ = completion(d, {"prompt": "hi", "max_tokens": 1},
                                      headers={"Origin": "http://app.example"})
            self.assertEqual(h.get("access-control-allow-origin"), "http://app.example")
            status, h, _ = request(d, "GET", "/v1/models", headers={"Origin": "http://x.example"})
            self.assertNotIn("access-control-allow-origin", h)
            self.assertEqual(request(d, "OPTIONS", "/nope", headers=pre)[0], 404)
            # Metrics: readiness gauges, long TTFT buckets, no GPU series on the CPU.
            _, _, m = request(d, "GET", "/metrics")
            m = m.decode()
            self.assertRegex(m, r"(?m)^moesplit_ready 1$")
            self.assertRegex(m, r"(?m)^moesplit_draining 0$")
            self.assertIn('moesplit_time_to_first_token_seconds_bucket{le="300"}', m)
            self.assertIn('moesplit_inter_token_latency_seconds_bucket{le="10"}', m)
            self.assertNotIn("moesplit_gpu_memory", m)
            self.assertNotIn("moesplit_expert_cache_hits_total", m)
        finally:
            d.stop()

    def test_cors_off_keeps_405_for_options(self):
        d = Dense()
        try:
            status, h, _ = request(d, "OPTIONS", "/v1/models",
                                   headers={"Origin": "http://app.example"})
            self.assertEqual(status, 405)
            self.assertNotIn("access-control-allow-origin", h)
        finally:
            d.stop()


if __name__ == "__main__":
    rt.BIN, rt.WORK = sys.argv[1], sys.argv[2]
    if sys.argv[3:] == ["make-model"]:
        rt.make_model()
        sys.exit(0)
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
