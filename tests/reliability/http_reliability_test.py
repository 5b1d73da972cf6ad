#!/usr/bin/env python3
"""The dense service's HTTP front end against slow, hostile and careless
clients: a real moesplit-dense process on loopback (in-process experts, a
generated test model), driven with raw sockets so that every byte on the wire
is the test's choice.

Usage: http_reliability_test.py BIN_DIR WORK_DIR [unittest args, e.g. a test name]
  BIN_DIR holds moesplit and moesplit-dense; WORK_DIR keeps the generated
  model between runs (`make-model` as the test name only writes it).

Every case is bounded in time (socket timeouts, deadlines passed to the
server) and sends traffic only to 127.0.0.1.
"""
import gzip
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import unittest

BIN = WORK = None
HOST = "127.0.0.1"


def model_path():
    return os.path.join(WORK, "reliability.gguf")


def make_model():
    path = model_path()
    if os.path.exists(path):
        return path
    os.makedirs(WORK, exist_ok=True)
    tmp = path + ".tmp%d" % os.getpid()
    subprocess.run([os.path.join(BIN, "moesplit"), "make-test-model", "--out", tmp, "--name",
                    "reliability", "--threads", "2"], check=True, stdout=subprocess.DEVNULL,
                   timeout=120)
    os.replace(tmp, path)
    return path


class Dense:
    """One moesplit-dense process serving HTTP on a port it picks (the
    generated test model unless `model` names another GGUF)."""

    def __init__(self, *extra, ctx=2048, parallel=4, max_queue=64, model=None):
        self.log_path = os.path.join(WORK, "dense-%d-%d.log" % (os.getpid(), time.monotonic_ns()))
        self.log = open(self.log_path, "w+b")
        args = [os.path.join(BIN, "moesplit-dense"), "--model", model or make_model(), "--grpc",
                HOST + ":0", "--http", HOST + ":0", "--ctx", str(ctx), "--threads", "2",
                "--parallel", str(parallel), "--max-queue", str(max_queue),
                "--step-tokens", "64"] + list(extra)
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 60
        self.port = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            with open(self.log_path, "rb") as f:
                m = re.search(rb"http port (\d+)", f.read())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise AssertionError("moesplit-dense did not start:\n" + self.stderr())

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def connect(self, timeout=10):
        s = socket.create_connection((HOST, self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def metric(self, name):
        status, _, body = request(self, "GET", "/metrics")
        assert status == 200, status
        m = re.search(r"^%s (\S+)$" % re.escape(name), body.decode(), re.M)
        return float(m.group(1)) if m else None

    def wait_idle(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (self.metric("moesplit_running_sequences") == 0 and
                    self.metric("moesplit_kv_cache_used_bytes") == 0):
                return True
            time.sleep(0.05)
        return False


class Reader:
    """Reads responses off one connection, keeping what belongs to the next."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _more(self, what):
        c = self.sock.recv(65536)
        if not c:
            raise ConnectionError("closed %s: %r" % (what, self.buf[:200]))
        self.buf += c

    def _until(self, sep, what):
        while sep not in self.buf:
            self._more(what)
        head, self.buf = self.buf.split(sep, 1)
        return head

    def _take(self, n, what):
        while len(self.buf) < n:
            self._more(what)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        """(status, headers {lower name: value}, body bytes) of one response
        (status "continue" for an interim 100); the body by Content-Length,
        chunked, or up to the close."""
        lines = self._until(b"\r\n\r\n", "before a response").decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        if status == 100:
            return "continue", {}, b""
        headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            return status, headers, self._take(int(headers["content-length"]), "inside the body")
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int(self._until(b"\r\n", "inside a chunk size"), 16)
                body += self._take(size + 2, "inside a chunk")[:size]
                if size == 0:
                    return status, headers, body
        while True:
            c = self.sock.recv(65536)
            if not c:
                body, self.buf = self.buf, b""
                return status, headers, body
            self.buf += c


def read_response(sock):
    """One response on a connection that carries no other."""
    return Reader(sock).response()


def raw(dense, data, timeout=10):
    with dense.connect(timeout) as s:
        s.sendall(data)
        return read_response(s)


def request(dense, method, path, body=None, headers=None, timeout=30):
    h = {"Host": "127.0.0.1", "Connection": "close"}
    if body is not None:
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    data = ("%s %s HTTP/1.1\r\n" % (method, path)).encode() + b"".join(
        ("%s: %s\r\n" % kv).encode() for kv in h.items()) + b"\r\n" + (body or b"")
    return raw(dense, data, timeout)


def closed_by_peer(sock, timeout):
    """True when the server closes `sock` within `timeout` seconds."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


class HttpTest(unittest.TestCase):
    dense = None
    flags = ()
    options = {}

    @classmethod
    def setUpClass(cls):
        cls.dense = Dense(*cls.flags, **cls.options)

    @classmethod
    def tearDownClass(cls):
        cls.dense.stop()

    def assertError(self, reply, status, code):
        got_status, headers, body = reply
        self.assertEqual(got_status, status, body[:300])
        self.assertTrue(headers.get("content-type", "").startswith("application/json"), headers)
        err = json.loads(body)["error"]
        fields = {"message", "type", "param", "code"}
        if code == "context_length_exceeded":  # llama-server's fields too
            fields |= {"n_prompt_tokens", "n_ctx"}
        self.assertEqual(set(err), fields, err)
        self.assertEqual(err["code"], code, err)
        self.assertEqual(err["type"], "invalid_request_error", err)
        return err


class SlowlorisTest(HttpTest):
    """200 connections trickling one header byte per second while normal
    requests keep answering within 1 s (default limits)."""

    def test_normal_requests_answer_while_200_connections_trickle(self):
        d = self.dense
        slow = [d.connect() for _ in range(200)]
        header = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 64
        stop = threading.Event()

        def trickle():
            i = 0
            while not stop.is_set() and i < len(header):
                for s in slow:
                    try:
                        s.send(header[i:i + 1])
                    except OSError:
                        pass
                i += 1
                stop.wait(1.0)

        t = threading.Thread(target=trickle)
        t.start()
        latencies = []
        try:
            time.sleep(1.5)  # every trickler has sent its first bytes
            body = json.dumps({"prompt": "Hello", "max_tokens": 1, "temperature": 0}).encode()
            end = time.monotonic() + 6
            while time.monotonic() < end:
                for method, path, b in (("GET", "/health", None),
                                        ("POST", "/v1/completions", body)):
                    t0 = time.monotonic()
                    status, _, out = request(d, method, path, b, timeout=5)
                    latencies.append(time.monotonic() - t0)
                    self.assertEqual(status, 200, out)
                time.sleep(0.25)
        finally:
            stop.set()
            t.join()
            for s in slow:
                s.close()
        print("slowloris: %d normal requests, max latency %.3f s, median %.3f s" %
              (len(latencies), max(latencies), sorted(latencies)[len(latencies) // 2]))
        self.assertGreaterEqual(len(latencies), 8)
        self.assertLess(max(latencies), 1.0)


class SlowlorisOverTheLimitTest(SlowlorisTest):
    """The same 200 tricklers against a limit of 64 connections: each new
    connection takes the place of the longest-waiting trickler."""
    flags = ("--http-max-connections", "64")


class DeadlineTest(HttpTest):
    flags = ("--http-header-timeout", "1500", "--http-body-timeout", "1500",
             "--http-idle-timeout", "1000", "--http-max-requests-per-connection", "3")

    def test_header_deadline_closes_a_trickling_connection(self):
        with self.dense.connect() as s:
            s.sendall(b"GET /hea")
            t0 = time.monotonic()
            self.assertTrue(closed_by_peer(s, 5))
            self.assertGreater(time.monotonic() - t0, 1.0)

    def test_silent_connection_is_closed_by_the_header_deadline(self):
        with self.dense.connect() as s:
            self.assertTrue(closed_by_peer(s, 5))

    def test_body_deadline_closes_a_slow_upload(self):
        with self.dense.connect() as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            self.assertTrue(closed_by_peer(s, 5))

    def test_keep_alive_idle_timeout_and_request_limit(self):
        with self.dense.connect() as s:
            get = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            r = Reader(s)
            for i in range(3):
                s.sendall(get)
                status, headers, _ = r.response()
                self.assertEqual(status, 200)
                self.assertEqual(headers["connection"], "close" if i == 2 else "keep-alive")
            self.assertTrue(closed_by_peer(s, 3))
        with self.dense.connect() as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(read_response(s)[0], 200)
            t0 = time.monotonic()
            self.assertTrue(closed_by_peer(s, 5))  # idle past 1 s
            self.assertGreater(time.monotonic() - t0, 0.8)

    def test_pipelined_requests_answer_in_order(self):
        with self.dense.connect() as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            r = Reader(s)
            a = r.response()
            b = r.response()
            self.assertEqual(json.loads(a[2]), {"status": "ok"})
            self.assertEqual(json.loads(b[2])["object"], "list")


class LimitsTest(HttpTest):
    flags = ("--max-body-bytes", "64KiB", "--http-max-connections", "16")
    options = {"ctx": 512}

    def test_declared_oversized_body_is_413_before_it_is_sent(self):
        err = self.assertError(raw(self.dense, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                   b"Content-Type: application/json\r\n"
                                   b"Content-Length: 104857600\r\n\r\n"), 413, "request_too_large")
        self.assertIn("65536", err["message"])

    def test_chunked_oversized_body_is_413(self):
        chunk = b"x" * 32768
        data = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                (b"8000\r\n" + chunk + b"\r\n") * 3 + b"0\r\n\r\n")
        self.assertError(raw(self.dense, data), 413, "request_too_large")

    def test_python_clients_get_the_413_of_a_body_they_send_whole(self):
        # Python's clients send the whole body before they read: the server
        # answers, then reads and drops the rest (RFC 9112 9.6) instead of
        # resetting a connection still sending (which they see as "Broken pipe").
        import urllib.error
        import urllib.request
        body = json.dumps({"prompt": "x" * (8 << 20), "max_tokens": 1}).encode()  # 8 MiB
        url = "http://%s:%d/v1/completions" % (HOST, self.dense.port)
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(req, timeout=30)
        self.assertEqual(cm.exception.code, 413)
        self.assertEqual(cm.exception.headers["Connection"], "close")
        err = json.loads(cm.exception.read())["error"]
        self.assertEqual(err["code"], "request_too_large", err)
        self.assertIn("65536", err["message"])
        try:
            import requests
        except ImportError:  # Debian's python3-requests is not installed
            return
        r = requests.post(url, data=body, headers={"Content-Type": "application/json"},
                          timeout=30)
        self.assertEqual(r.status_code, 413)
        self.assertEqual(r.json()["error"]["code"], "request_too_large")
        # Chunked (a generator body): refused once past the limit, drained too.
        r = requests.post(url, data=(b"x" * 65536 for _ in range(64)), timeout=30)
        self.assertEqual(r.status_code, 413)
        self.assertIn("65536", r.json()["error"]["message"])

    def test_gzip_body_is_415_and_not_inflated(self):
        body = gzip.compress(json.dumps({"prompt": "hi", "max_tokens": 1}).encode())
        err = self.assertError(
            request(self.dense, "POST", "/v1/completions", body, {"Content-Encoding": "gzip"}),
            415, "unsupported_encoding")
        self.assertIn("gzip", err["message"])

    def test_unknown_route_is_404_and_wrong_method_405(self):
        err = self.assertError(request(self.dense, "GET", "/v1/nothing"), 404, "unknown_url")
        self.assertIn("/v1/nothing", err["message"])
        status, headers, body = request(self.dense, "GET", "/v1/completions")
        self.assertError((status, headers, body), 405, "method_not_allowed")
        self.assertEqual(headers.get("allow"), "POST")
        self.assertError(request(self.dense, "POST", "/health", b"{}"), 405, "method_not_allowed")

    def test_long_uri_is_414_and_large_headers_431(self):
        self.assertError(request(self.dense, "GET", "/health?" + "a" * 9000), 414, "uri_too_long")
        self.assertError(request(self.dense, "GET", "/" + "a" * 100000), 414, "uri_too_long")
        many = {"X-H%d" % i: "v" * 1000 for i in range(40)}
        self.assertError(request(self.dense, "GET", "/health", headers=many), 431,
                         "headers_too_large")

    def test_malformed_request_is_400_not_500(self):
        self.assertError(raw(self.dense, b"GARBAGE\r\n\r\n"), 400, "invalid_request")
        self.assertError(raw(self.dense, b"GET /health HTTP/1.1\r\nBad Header\r\n\r\n"), 400,
                         "invalid_request")

    def test_expect_100_continue(self):
        body = json.dumps({"prompt": "Hello", "max_tokens": 2, "temperature": 0}).encode()
        with self.dense.connect() as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body))
            r = Reader(s)
            self.assertEqual(r.response()[0], "continue")
            s.sendall(body)
            status, _, out = r.response()
            self.assertEqual(status, 200, out)
            self.assertEqual(json.loads(out)["usage"]["completion_tokens"], 2)

    def test_http10_stream_ends_with_the_connection(self):
        body = json.dumps({"prompt": "Hello", "max_tokens": 3, "temperature": 0,
                           "stream": True}).encode()
        data = (b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
        status, headers, out = raw(self.dense, data)
        self.assertEqual(status, 200)
        self.assertNotIn("content-length", headers)
        self.assertNotIn("transfer-encoding", headers)
        events = [e for e in out.decode().split("\n\n") if e]
        self.assertEqual(events[-1], "data: [DONE]")
        self.assertEqual(len(events), 3 + 1 + 1)  # tokens, finish, [DONE]

    def test_stop_list_is_capped_at_4(self):
        body = json.dumps({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}).encode()
        err = self.assertError(request(self.dense, "POST", "/v1/completions", body), 400, None)
        self.assertEqual(err["param"], "stop")
        self.assertIn("at most 4", err["message"])
        ok = json.dumps({"prompt": "hi", "max_tokens": 1, "stop": ["a", "b", "c", "d"]}).encode()
        self.assertEqual(request(self.dense, "POST", "/v1/completions", ok)[0], 200)

    def test_content_part_arrays_are_flattened_and_other_parts_are_400(self):
        def chat(messages):
            body = json.dumps({"messages": messages, "max_tokens": 1, "temperature": 0}).encode()
            return request(self.dense, "POST", "/v1/chat/completions", body)
        parts = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                 {"role": "user", "content": [{"type": "text", "text": "Hello there"},
                                              {"type": "text", "text": "second part"}]}]
        strings = [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Hello there\nsecond part"}]
        got, want = chat(parts), chat(strings)
        self.assertEqual(got[0], 200, got[2][:300])
        self.assertEqual(want[0], 200, want[2][:300])
        # The same prompt: the parts' text reached the template.
        self.assertEqual(json.loads(got[2])["usage"]["prompt_tokens"],
                         json.loads(want[2])["usage"]["prompt_tokens"])
        for bad, index, kind in (
                ([{"type": "text", "text": "look"},
                  {"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}}], 1,
                 "image_url"),
                ([{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}], 0,
                 "input_audio")):
            err = self.assertError(chat([{"role": "user", "content": "hi"},
                                         {"role": "user", "content": bad}]), 400, None)
            self.assertEqual(err["param"], "messages")
            self.assertIn("messages[1].content[%d] has type '%s'" % (index, kind), err["message"])

    def test_prompt_too_long_by_its_bytes_is_refused_before_tokenizing(self):
        over = "context_length_exceeded"
        body = json.dumps({"prompt": "word " * 12000}).encode()  # 60 KB, context 512
        err = self.assertError(request(self.dense, "POST", "/v1/completions", body), 400, over)
        self.assertEqual(err["param"], "prompt")
        self.assertIn("at least", err["message"])
        self.assertIn("the context holds 512", err["message"])
        self.assertEqual(err["n_ctx"], 512)
        self.assertGreaterEqual(err["n_prompt_tokens"], 512)
        # Few enough bytes to pass that bound: tokenizing stops past the context.
        body = json.dumps({"prompt": "word " * 600}).encode()  # 600 tokens
        err = self.assertError(request(self.dense, "POST", "/v1/completions", body), 400, over)
        m = re.search(r"the prompt has at least (\d+) tokens, the context holds 512",
                      err["message"])
        self.assertTrue(m, err["message"])
        self.assertLess(int(m.group(1)), 600)
        self.assertEqual((err["n_prompt_tokens"], err["n_ctx"]), (int(m.group(1)), 512))
        ids = json.dumps({"prompt": list(range(1, 600))}).encode()
        err = self.assertError(request(self.dense, "POST", "/v1/completions", ids), 400, over)
        self.assertIn("the prompt has 599 tokens, the context holds 512", err["message"])
        self.assertEqual((err["n_prompt_tokens"], err["n_ctx"]), (599, 512))

    def test_context_overflow_on_every_generating_route(self):
        long_text = "word " * 600
        for path, body in (
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": long_text}]}),
                ("/chat/completions", {"messages": [{"role": "user", "content": long_text}]}),
                ("/v1/responses", {"input": long_text}),
                ("/v1/responses", {"input": [{"role": "user", "content": long_text}]}),
                # A stream is refused before its head is sent: the same JSON error.
                ("/v1/chat/completions", {"stream": True,
                                          "messages": [{"role": "user", "content": long_text}]}),
                ("/v1/responses", {"input": long_text, "stream": True})):
            err = self.assertError(
                request(self.dense, "POST", path, json.dumps(dict(body, max_tokens=4)
                                                             if "messages" in body else body)
                        .encode()), 400, "context_length_exceeded")
            self.assertEqual(err["n_ctx"], 512, (path, err))
            self.assertGreaterEqual(err["n_prompt_tokens"], 512, (path, err))
            self.assertIn("the context holds 512", err["message"])
        # Anthropic's shape and words ("prompt is too long"), which clients look for.
        status, headers, out = request(self.dense, "POST", "/v1/messages", json.dumps(
            {"model": "reliability", "max_tokens": 4,
             "messages": [{"role": "user", "content": long_text}]}).encode())
        self.assertEqual(status, 400, out[:300])
        reply = json.loads(out)
        self.assertEqual(reply["type"], "error")
        self.assertEqual(reply["error"]["type"], "invalid_request_error")
        self.assertRegex(reply["error"]["message"],
                         r"^prompt is too long: \d+ tokens > 512 maximum")
        # One token under the context is no overflow.
        body = json.dumps({"prompt": list(range(1, 512)), "max_tokens": 1}).encode()
        self.assertEqual(request(self.dense, "POST", "/v1/completions", body)[0], 200)

    def test_at_the_connection_limit_the_oldest_waiting_connection_makes_room(self):
        held = []
        try:
            for _ in range(16):
                held.append(self.dense.connect())
                time.sleep(0.01)  # an order the server sees
            time.sleep(0.2)
            self.assertEqual(request(self.dense, "GET", "/health")[0], 200)
            self.assertTrue(closed_by_peer(held[0], 2), "the oldest connection was not closed")
            held[-1].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(read_response(held[-1])[0], 200)
        finally:
            for s in held:
                s.close()


class BusyConnectionLimitTest(HttpTest):
    """Every connection has a request running: a new one gets 503."""
    flags = ("--http-max-connections", "2")
    options = {"parallel": 2}

    def test_connections_beyond_the_limit_get_503_when_all_are_busy(self):
        d = self.dense
        body = json.dumps({"prompt": "Another long story:", "max_tokens": 0,
                           "temperature": 0}).encode()
        busy = [d.connect() for _ in range(2)]
        try:
            for s in busy:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            time.sleep(0.3)
            status, headers, out = request(d, "GET", "/health")
            self.assertEqual(status, 503, out)
            self.assertEqual(headers.get("retry-after"), "1")
            self.assertEqual(json.loads(out)["error"]["code"], "too_many_connections")
        finally:
            for s in busy:
                s.close()
        deadline = time.monotonic() + 5
        while True:
            status = request(d, "GET", "/health")[0]
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(status, 200)


def sse_text(body):
    """The concatenated text of a completions stream, and whether it ended with [DONE]."""
    events = [e[len("data: "):] for e in body.decode().split("\n\n") if e.startswith("data: ")]
    done = bool(events) and events[-1] == "[DONE]"
    text = "".join(c["text"] for e in events if e != "[DONE]"
                   for c in json.loads(e).get("choices", []))
    return text, done


class ConcurrentStreamsTest(HttpTest):
    """64 concurrent streams against --parallel 4 --max-queue 8: only 200s and
    429s, and every 200 streams exactly what the same request gets alone."""
    options = {"parallel": 4, "max_queue": 8}

    def test_64_streams_get_200_or_429_and_outputs_equal_solo(self):
        d = self.dense
        prompts = ["Request number %d: %s" % (i, "and more " * i) for i in range(8)]

        def body(p):
            return json.dumps({"prompt": p, "max_tokens": 12, "temperature": 0,
                               "stream": True}).encode()

        solo = {}
        for p in prompts:
            status, _, out = request(d, "POST", "/v1/completions", body(p))
            self.assertEqual(status, 200, out)
            solo[p], done = sse_text(out)
            self.assertTrue(done)
        results = [None] * 64

        def run(i):
            try:
                results[i] = request(d, "POST", "/v1/completions", body(prompts[i % 8]))
            except Exception as e:  # noqa: BLE001 - reported below
                results[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(50)
        counts = {}
        for i, r in enumerate(results):
            self.assertIsInstance(r, tuple, "request %d: %r" % (i, r))
            status, headers, out = r
            counts[status] = counts.get(status, 0) + 1
            self.assertIn(status, (200, 429), out[:300])
            if status == 200:
                text, done = sse_text(out)
                self.assertTrue(done, i)
                self.assertEqual(text, solo[prompts[i % 8]], "request %d" % i)
            else:
                self.assertIn("retry-after", headers)
                self.assertEqual(json.loads(out)["error"]["code"], "server_busy")
        print("64 concurrent streams: %s" % counts)
        self.assertGreaterEqual(counts.get(200, 0), 12)
        self.assertTrue(d.wait_idle())


class NoLeakTest(HttpTest):
    """Descriptors and threads return to their baseline after mixed traffic:
    served, refused, abandoned mid-header, abandoned mid-request."""
    flags = ("--max-body-bytes", "64KiB")

    def counts(self):
        pid = self.dense.proc.pid
        fds = len(os.listdir("/proc/%d/fd" % pid))
        with open("/proc/%d/status" % pid) as f:
            threads = int(re.search(r"^Threads:\s+(\d+)", f.read(), re.M).group(1))
        return fds, threads

    def test_descriptors_and_threads_return_to_baseline(self):
        d = self.dense
        request(d, "GET", "/health")
        base = self.counts()
        long_body = json.dumps({"prompt": "Another long story:", "max_tokens": 0,
                                "temperature": 0}).encode()
        small = json.dumps({"prompt": "Hi", "max_tokens": 2}).encode()
        for i in range(40):
            self.assertEqual(request(d, "POST", "/v1/completions", small)[0], 200)
            self.assertEqual(request(d, "GET", "/v1/nothing")[0], 404)
            self.assertEqual(raw(d, b"POST /v1/completions HTTP/1.1\r\nContent-Length: "
                                 b"999999999\r\n\r\n")[0], 413)
            with d.connect() as s:
                s.sendall(b"GET /heal")  # gone mid-header
            with d.connect() as s:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" %
                          (len(long_body), long_body))
                time.sleep(0.01)  # gone mid-request
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            now = self.counts()
            if now[0] <= base[0] and now[1] <= base[1]:
                break
            time.sleep(0.1)
        print("baseline fds/threads %s, after 200 requests %s" % (base, now))
        self.assertLessEqual(now[0], base[0])
        self.assertLessEqual(now[1], base[1])
        self.assertTrue(d.wait_idle())


class AbandonedRequestTest(HttpTest):
    """--parallel 1 --max-queue 0: while a request holds the only slot, another
    gets 429; a non-streaming request whose client leaves frees it at once."""
    options = {"ctx": 8192, "parallel": 1, "max_queue": 0}

    def abandon(self, stream):
        d = self.dense
        self.assertTrue(d.wait_idle())
        # Greedy, this prompt runs to the context on the test model (seconds).
        body = json.dumps({"prompt": "Another long story:", "max_tokens": 0, "temperature": 0,
                           "stream": stream}).encode()
        s = d.connect()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" %
                  (len(body), body))
        deadline = time.monotonic() + 10
        while d.metric("moesplit_running_sequences") != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(d.metric("moesplit_running_sequences"), 1)
        small = json.dumps({"prompt": "me too", "max_tokens": 2}).encode()
        status, headers, _ = request(d, "POST", "/v1/completions", small)
        self.assertEqual(status, 429)
        self.assertIn("retry-after", headers)
        s.close()  # the client gives up
        t0 = time.monotonic()
        self.assertTrue(d.wait_idle(3.0), "abandoned request still holds its slot")
        freed = time.monotonic() - t0
        status, _, out = request(d, "POST", "/v1/completions", small)
        self.assertEqual(status, 200, out)
        print("abandoned %s request: slot freed after %.3f s" %
              ("streaming" if stream else "non-streaming", freed))

    def test_abandoned_non_streaming_request_frees_its_slot(self):
        self.abandon(stream=False)

    def test_abandoned_streaming_request_frees_its_slot(self):
        self.abandon(stream=True)


class HeartbeatTest(HttpTest):
    """--parallel 1 --http-sse-heartbeat-ms 100: a stream queued behind a long
    request gets SSE comment lines `: ping` before its first event, on every
    streaming route, and its events are those it gets alone (an SSE parser
    skips comment lines)."""
    options = {"ctx": 8192, "parallel": 1, "max_queue": 4}
    flags = ("--http-sse-heartbeat-ms", "100")

    def queued_stream(self, path, body):
        d = self.dense
        self.assertTrue(d.wait_idle())
        # Greedy, this prompt runs to the context on the test model (seconds).
        long_body = json.dumps({"prompt": "Another long story:", "max_tokens": 0,
                                "temperature": 0}).encode()
        blocker = d.connect()
        blocker.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d"
                        b"\r\n\r\n%s" % (len(long_body), long_body))
        deadline = time.monotonic() + 10
        while d.metric("moesplit_running_sequences") != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(d.metric("moesplit_running_sequences"), 1)
        result = []
        t = threading.Thread(target=lambda: result.append(request(d, "POST", path, body)))
        t.start()
        time.sleep(0.8)  # queued: about 8 heartbeat periods
        blocker.close()  # frees the slot
        t.join(30)
        status, headers, out = result[0]
        self.assertEqual(status, 200, out)
        self.assertTrue(headers["content-type"].startswith("text/event-stream"), headers)
        text = out.decode()
        # Before the first token: the events a stream opens with (chat's
        # role chunk, Responses' response.created), then only pings.
        blocks = text.split("\n\n")
        first_token = next(i for i, b in enumerate(blocks)
                           if sse_events(b + "\n\n") and is_output(sse_events(b + "\n\n")[0]))
        self.assertGreaterEqual(blocks[:first_token].count(": ping"), 3, text[:300])
        # Alone (no queue), the same request's events, without the comments.
        self.assertTrue(d.wait_idle())
        status, _, solo = request(d, "POST", path, body)
        self.assertEqual(status, 200, solo)
        return sse_events(text), sse_events(solo.decode())

    def test_chat_stream_gets_pings_while_queued(self):
        body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
                           "temperature": 0, "stream": True}).encode()
        got, solo = self.queued_stream("/v1/chat/completions", body)
        self.assertEqual(content_of(got), content_of(solo))

    def test_completions_stream_gets_pings_while_queued(self):
        body = json.dumps({"prompt": "Hi", "max_tokens": 8, "temperature": 0,
                           "stream": True}).encode()
        got, solo = self.queued_stream("/v1/completions", body)
        self.assertEqual(content_of(got), content_of(solo))

    def test_anthropic_stream_gets_pings_while_queued(self):
        body = json.dumps({"model": "reliability", "messages": [{"role": "user", "content": "Hi"}],
                           "max_tokens": 8, "temperature": 0, "stream": True}).encode()
        got, solo = self.queued_stream("/v1/messages", body)
        self.assertEqual([e[0] for e in got], [e[0] for e in solo])
        self.assertEqual(got[0][0], "message_start")

    def test_responses_stream_gets_pings_while_queued(self):
        body = json.dumps({"input": "Hi", "max_output_tokens": 8, "temperature": 0,
                           "stream": True}).encode()
        got, solo = self.queued_stream("/v1/responses", body)
        self.assertEqual([e[0] for e in got], [e[0] for e in solo])


class PromptProgressTest(HttpTest):
    """return_progress (llama-server's): a streamed request gets
    `prompt_progress` chunks while its prompt is evaluated (64-token steps);
    a client that disconnects during the prefill leaves the evaluated blocks
    in the prefix cache, so its retry starts where it stopped."""
    options = {"ctx": 8192, "parallel": 1}

    def progress_events(self, path, body):
        status, _, out = request(self.dense, "POST", path, json.dumps(body).encode(), timeout=120)
        self.assertEqual(status, 200, out[:300])
        events = [e for _, e in sse_events(out.decode()) if e != "[DONE]"]
        return events, [e["prompt_progress"] for e in events if "prompt_progress" in e]

    def test_stream_reports_prompt_progress_as_llama_server(self):
        prompt = " ".join("w%d" % i for i in range(600))
        for path, extra in (("/v1/chat/completions",
                             {"messages": [{"role": "user", "content": prompt}]}),
                            ("/v1/completions", {"prompt": prompt})):
            body = dict(extra, max_tokens=2, temperature=0, stream=True, return_progress=True,
                        stream_options={"include_usage": True})
            self.assertTrue(self.dense.wait_idle())
            events, progress = self.progress_events(path, body)
            usage = events[-1]["usage"]
            total = usage["prompt_tokens"]
            self.assertGreater(total, 600)
            # Once admitted, then after each 64-token step, up to the whole prompt.
            self.assertGreaterEqual(len(progress), total // 64, progress)
            for p in progress:
                self.assertEqual(set(p), {"total", "cache", "processed", "time_ms"}, p)
                self.assertEqual(p["total"], total)
            self.assertEqual(progress[0]["processed"], progress[0]["cache"])
            self.assertEqual(progress[-1]["processed"], total)
            done = [p["processed"] for p in progress]
            self.assertEqual(done, sorted(done))
            self.assertEqual(len(set(done)), len(done))
            # The progress chunks come before any output, shaped as llama-server's.
            first_out = next(i for i, e in enumerate(events) if is_output((None, e)))
            self.assertTrue(all("prompt_progress" not in e for e in events[first_out:]))
            for e in events:
                if "prompt_progress" not in e:
                    continue
                choice = e["choices"][0]
                if path == "/v1/chat/completions":
                    self.assertEqual(e["object"], "chat.completion.chunk")
                    self.assertEqual(choice["delta"], {"role": "assistant", "content": None})
                else:
                    self.assertEqual(e["object"], "text_completion")
                    self.assertEqual(choice["text"], "")
                self.assertIsNone(choice["finish_reason"])
            # Without return_progress (and without stream) there is none.
            body["return_progress"] = False
            _, none = self.progress_events(path, body)
            self.assertEqual(none, [])
        status, _, out = request(self.dense, "POST", "/v1/completions", json.dumps(
            {"prompt": "x", "max_tokens": 1, "return_progress": "yes"}).encode())
        self.assertEqual(status, 400, out)
        self.assertIn(b"return_progress must be true or false", out)

    def test_disconnect_during_prefill_keeps_the_evaluated_prefix(self):
        d = self.dense
        self.assertTrue(d.wait_idle())
        # A prompt of ~3000 tokens no request has seen (its first block differs).
        prompt = "retry%d " % time.monotonic_ns() + " ".join("v%d" % i for i in range(750))
        body = {"prompt": prompt, "max_tokens": 1, "temperature": 0}
        reused_before = d.metric("moesplit_prefix_cache_reused_tokens_total") or 0
        evaluated_before = d.metric("moesplit_prompt_tokens_total") or 0
        s = d.connect(timeout=60)
        data = json.dumps(dict(body, stream=True, return_progress=True)).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(data), data))
        # Read until the prefill is past 1024 tokens, then hang up.
        seen, buf = None, b""
        while seen is None or seen["processed"] < 1024:
            chunk = s.recv(65536)
            self.assertTrue(chunk, b"the stream ended before 1024 prompt tokens: " + buf[-300:])
            buf += chunk
            for m in re.finditer(rb'"prompt_progress":(\{[^}]*\})', buf):
                seen = json.loads(m.group(1))
        self.assertLess(seen["processed"], seen["total"], "the prefill finished before the hang-up")
        s.close()
        self.assertTrue(d.wait_idle(timeout=60))
        # The hang-up stopped the prefill: not every prompt token was evaluated.
        evaluated = d.metric("moesplit_prompt_tokens_total") - evaluated_before
        self.assertGreaterEqual(evaluated, seen["processed"])
        self.assertLess(evaluated, seen["total"])
        status, _, out = request(d, "POST", "/v1/completions", json.dumps(body).encode(), timeout=120)
        self.assertEqual(status, 200, out)
        usage = json.loads(out)["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        # The retry reuses at least the whole 64-token blocks evaluated before
        # the hang-up (the prefill may have gone on a step or two).
        self.assertGreaterEqual(cached, seen["processed"] // 64 * 64, usage)
        self.assertLess(cached, usage["prompt_tokens"])
        self.assertGreaterEqual(d.metric("moesplit_prefix_cache_reused_tokens_total") - reused_before,
                                cached)


def sse_events(text):
    """[(event name or None, parsed data)] of an SSE stream as the WHATWG
    parser reads it: lines starting with ':' are comments and skipped."""
    events = []
    for block in text.split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if data:
            joined = "\n".join(data)
            events.append((name, joined if joined == "[DONE]" else json.loads(joined)))
    return events


def is_output(event):
    """Whether an SSE event carries generated output (or is the first event
    of an Anthropic stream, written with the first token)."""
    name, data = event
    if data == "[DONE]":
        return True
    if name is not None:
        return name in ("message_start", "response.output_item.added",
                        "response.output_text.delta", "response.completed")
    return any(c.get("text") or (c.get("delta") or {}).get("content") or c.get("finish_reason")
               for c in data.get("choices", []))


def content_of(events):
    """The streamed text of chat or completions chunks."""
    out = ""
    for _, e in events:
        if e == "[DONE]":
            continue
        for c in e.get("choices", []):
            out += c.get("text") or (c.get("delta") or {}).get("content") or ""
    return out


if __name__ == "__main__":
    BIN, WORK = sys.argv[1], sys.argv[2]
    if sys.argv[3:] == ["make-model"]:
        make_model()
        sys.exit(0)
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
