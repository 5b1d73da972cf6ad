#!/usr/bin/env python3
"""API keys, TLS and mutual TLS of the dense service and the expert-worker:
real processes on loopback (the generated model of http_reliability_test.py),
certificates made by the test with Debian's openssl into the work dir.

Usage: auth_tls_test.py BIN_DIR WORK_DIR [unittest args, e.g. a test name]

HTTP is driven with raw sockets and Python's ssl module; gRPC with the
`moesplit` client commands (complete, health), whose exit status and error
line are what is checked. Every case is bounded (socket timeouts, process
timeouts, --connect-timeout) and talks only to 127.0.0.1.
"""
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import unittest

import http_reliability_test as rel

HOST = "127.0.0.1"
KEYS = ("sk-test-one", "sk-test-two-is-longer-than-the-first")
ENV_KEY = "sk-from-the-environment"


def work(*parts):
    return os.path.join(rel.WORK, *parts)


def pki():
    """The test PKI, made once per work dir: a CA, the worker's and the dense
    service's certificates signed by it (SAN 127.0.0.1 and localhost; the dense
    one is also its client certificate towards workers), and a rogue CA with a
    certificate of the same shape signed by it."""
    final = work("pki")
    if os.path.exists(final):
        return final
    d = "%s.tmp%d" % (final, os.getpid())  # cases may run in parallel: made aside, renamed
    os.makedirs(d, exist_ok=True)

    def ossl(*args):
        subprocess.run(["openssl"] + list(args), cwd=d, check=True, timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "rogue-ca"):
        ossl("req", "-x509", *ec, "-keyout", ca + ".key", "-out", ca + ".pem", "-days", "2",
             "-subj", "/CN=moesplit test " + ca)
    with open(os.path.join(d, "leaf.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\n"
                "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "extendedKeyUsage=serverAuth,clientAuth\n")
    for name, ca in (("worker", "ca"), ("dense", "ca"), ("rogue", "rogue-ca")):
        ossl("req", *ec, "-keyout", name + ".key", "-out", name + ".csr", "-subj",
             "/CN=moesplit test " + name)
        ossl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
             "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", "leaf.ext")
    try:
        os.rename(d, final)
    except OSError:  # another case was first
        shutil.rmtree(d)
    return final


def cert(name):
    return os.path.join(pki(), name)


def key_file():
    path = work("api-keys.txt")
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("# the test's keys\n\n  %s  \n%s\n" % KEYS)
    os.replace(tmp, path)
    return path


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Process:
    """A service process whose stderr goes to a log in the work dir."""

    def __init__(self, args, env=None, ready=b"ready", timeout=60):
        self.log_path = work("%s-%d-%d.log" % (os.path.basename(args[0]), os.getpid(),
                                               time.monotonic_ns()))
        self.log = open(self.log_path, "w+b")
        env = dict({k: v for k, v in os.environ.items() if not k.startswith("MOESPLIT_API_KEY")},
                   **(env or {}))
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if ready in self.stderr().encode():
                return
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.stop()
            raise AssertionError("%s did not start:\n%s" % (args[0], self.stderr()))

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def port(self, pattern):
        m = re.search(pattern, self.stderr())
        return int(m.group(1)) if m else None

    def wait(self, timeout):
        return self.proc.wait(timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def dense(*extra, env=None, experts=None):
    args = [os.path.join(rel.BIN, "moesplit-dense"), "--model", rel.make_model(), "--grpc",
            HOST + ":0", "--http", HOST + ":0", "--ctx", "2048", "--threads", "2",
            "--parallel", "2", "--step-tokens", "64", "--http-header-timeout", "2000"]
    if experts:
        args += ["--experts", experts, "--connect-timeout", "3000"]
    p = Process(args + list(extra), env=env)
    p.http = p.port(r"http port (\d+)")
    p.grpc = p.port(r"grpc port (\d+)")
    return p


def worker(*extra):
    port = free_port()
    p = Process([os.path.join(rel.BIN, "moesplit-expert-worker"), "--model", rel.make_model(),
                 "--listen-grpc", "%s:%d" % (HOST, port), "--threads", "1",
                 "--numa", "off"] + list(extra))
    p.grpc = port
    return p


def http_request(port, method, path, body=None, key=None, tls=None, timeout=30, headers=None):
    """(status, headers, body) of one request; tls is an ssl.SSLContext."""
    if tls is None:
        conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection(HOST, port, timeout=timeout, context=tls)
    headers = dict({"Content-Type": "application/json"}, **(headers or {}))
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers=headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def completion(port, key=None, tls=None, prompt="Once upon a time", n=8):
    return http_request(port, "POST", "/v1/completions",
                        {"prompt": prompt, "max_tokens": n, "temperature": 0}, key=key, tls=tls)


def metric(port, name, key, tls=None):
    status, _, body = http_request(port, "GET", "/metrics", key=key, tls=tls)
    assert status == 200, (status, body)
    m = re.search(r"^%s (\S+)$" % re.escape(name), body.decode(), re.M)
    return float(m.group(1)) if m else None


def client_context(ca):
    return ssl.create_default_context(cafile=ca)


def moesplit(*args, env=None, timeout=60):
    """(exit status, stdout, stderr) of a `moesplit` client command."""
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("MOESPLIT_API_KEY")},
               **(env or {}))
    r = subprocess.run([os.path.join(rel.BIN, "moesplit")] + list(args), capture_output=True,
                       timeout=timeout, env=env)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def complete(port, *flags, env=None):
    return moesplit("complete", "--addr", "%s:%d" % (HOST, port), "--prompt", "Once upon a time",
                    "-n", "4", "--timeout-ms", "30000", *flags, env=env)


def health(port, *flags):
    return moesplit("health", "--addr", "%s:%d" % (HOST, port), "--timeout-ms", "3000", *flags)


class ServiceTest(unittest.TestCase):
    """One dense service per class, started with `flags` (and `env`)."""
    flags = staticmethod(lambda: ())
    env = None

    @classmethod
    def setUpClass(cls):
        cls.d = dense(*cls.flags(), env=cls.env)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def assertUnauthorized(self, status, headers, body, what):
        self.assertEqual(status, 401, what)
        self.assertEqual(headers.get("www-authenticate"), "Bearer", what)
        err = json.loads(body)["error"]
        self.assertEqual(err["type"], "invalid_request_error", what)
        self.assertEqual(err["code"], "invalid_api_key", what)
        self.assertTrue(err["message"], what)


class ApiKeyTest(ServiceTest):
    """Keys from --api-key-file and MOESPLIT_API_KEYS: HTTP and gRPC want one."""
    flags = staticmethod(lambda: ("--api-key-file", key_file()))
    env = {"MOESPLIT_API_KEYS": "%s, %s" % (ENV_KEY, KEYS[0])}

    def test_start_up_log_counts_the_keys(self):
        self.assertIn("API keys: 3", self.d.stderr())

    def test_http_no_key_wrong_key_right_key(self):
        port = self.d.http
        before = metric(port, 'moesplit_auth_failures_total{api="http"}', KEYS[0])
        for path, body in (("/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
                           ("/v1/models", None), ("/metrics", None)):
            method = "GET" if body is None else "POST"
            self.assertUnauthorized(*http_request(port, method, path, body), "%s, no key" % path)
            self.assertUnauthorized(*http_request(port, method, path, body, key="sk-wrong"),
                                    "%s, wrong key" % path)
            self.assertUnauthorized(*http_request(port, method, path, body, key=KEYS[0] + "x"),
                                    "%s, a key with a suffix" % path)
        # Another scheme, or the key without one, is no key either.
        for header in ("Basic " + KEYS[0], KEYS[0]):
            conn = http.client.HTTPConnection(HOST, port, timeout=10)
            conn.request("GET", "/v1/models", headers={"Authorization": header})
            self.assertEqual(conn.getresponse().status, 401, header)
            conn.close()
        for key in KEYS + (ENV_KEY,):
            status, _, body = completion(port, key=key)
            self.assertEqual(status, 200, (key, body))
            self.assertTrue(json.loads(body)["choices"][0]["text"])
            status, _, body = http_request(port, "GET", "/v1/models", key=key)
            self.assertEqual(status, 200, body)
        # OPTIONS on a known route needs no key: without --cors-origin it is 405.
        for path in ROUTE_PATHS:
            status, h, body = http_request(port, "OPTIONS", path,
                                           headers=preflight_headers("http://localhost"))
            self.assertEqual(status, 405, (path, body))
            self.assertNotIn("access-control-allow-origin", h, path)
        # Health stays open for probes; unknown paths are refused before routing.
        self.assertEqual(http_request(port, "GET", "/health")[0], 200)
        self.assertUnauthorized(*http_request(port, "GET", "/nowhere"), "/nowhere")
        after = metric(port, 'moesplit_auth_failures_total{api="http"}', KEYS[1])
        self.assertEqual(after - before, 3 * 3 + 2 + 1)

    def test_grpc_no_key_wrong_key_right_key(self):
        port = self.d.grpc
        before = metric(self.d.http, 'moesplit_auth_failures_total{api="grpc"}', KEYS[0])
        rc, _, err = complete(port)
        self.assertNotEqual(rc, 0)
        self.assertIn("no API key", err)
        rc, _, err = complete(port, env={"MOESPLIT_API_KEY": "sk-wrong"})
        self.assertNotEqual(rc, 0)
        self.assertIn("invalid API key", err)
        rc, out, err = complete(port, "--api-key-file", key_file())
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.strip())
        rc, _, err = complete(port, env={"MOESPLIT_API_KEY": ENV_KEY})
        self.assertEqual(rc, 0, err)
        # grpc.health.v1 stays open.
        rc, out, err = health(port)
        self.assertEqual((rc, out.strip()), (0, "SERVING"), err)
        after = metric(self.d.http, 'moesplit_auth_failures_total{api="grpc"}', KEYS[0])
        self.assertEqual(after - before, 2)


# Every known route's path, for the preflight cases.
ROUTE_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/messages",
               "/v1/messages/count_tokens", "/v1/responses", "/v1/responses/resp_x",
               "/v1/models", "/v1/models/x", "/chat/completions", "/completions", "/responses",
               "/models", "/tokenize", "/detokenize", "/apply-template", "/metrics", "/health")


def preflight_headers(origin):
    return {"Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}


class CorsWithKeysTest(ServiceTest):
    """Keys and --cors-origin together: a browser's preflight carries no key."""
    flags = staticmethod(lambda: ("--api-key-file", key_file(), "--cors-origin",
                                  "http://localhost", "--cors-origin",
                                  "https://App.Example:8443"))

    def test_preflight_needs_no_key_on_every_route_and_origins_match(self):
        port = self.d.http
        for path in ROUTE_PATHS:
            status, h, body = http_request(port, "OPTIONS", path,
                                           headers=preflight_headers("http://localhost:5173"))
            self.assertEqual(status, 204, (path, body))
            self.assertEqual(h.get("access-control-allow-origin"), "http://localhost:5173", path)
            self.assertIn("Authorization", h["access-control-allow-headers"], path)
        # An entry without a port admits its host on any port (and none); one
        # with a port only that port; host and scheme must be the same.
        for origin, allowed in (("http://localhost", True), ("http://localhost:80", True),
                                ("http://LOCALHOST:3000", True), ("https://localhost:5173", False),
                                ("http://localhost.evil.example", False),
                                ("http://localhost:5173/x", False), ("http://localhost:", False),
                                ("https://app.example:8443", True),
                                ("https://app.example", False), ("https://app.example:9443", False)):
            status, h, _ = http_request(port, "OPTIONS", "/v1/chat/completions",
                                        headers=preflight_headers(origin))
            self.assertEqual(status, 204 if allowed else 403, origin)
            self.assertEqual(h.get("access-control-allow-origin"), origin if allowed else None,
                             origin)
        # The request after the preflight still needs the key; its 401 carries
        # the CORS header, so that the page can read why.
        status, h, body = http_request(port, "POST", "/v1/completions", {"prompt": "Hi"},
                                       headers={"Origin": "http://localhost:5173"})
        self.assertUnauthorized(status, h, body, "POST without a key")
        self.assertEqual(h.get("access-control-allow-origin"), "http://localhost:5173")
        status, h, body = http_request(port, "POST", "/v1/completions",
                                       {"prompt": "Hi", "max_tokens": 1}, key=KEYS[0],
                                       headers={"Origin": "http://localhost:5173"})
        self.assertEqual(status, 200, body)
        self.assertEqual(h.get("access-control-allow-origin"), "http://localhost:5173")
        # An unknown path stays refused before routing.
        self.assertUnauthorized(*http_request(port, "OPTIONS", "/nowhere",
                                              headers=preflight_headers("http://localhost")),
                                "OPTIONS /nowhere")


class NoKeyTest(ServiceTest):
    """No keys configured: everything stays open (today's behaviour)."""
    flags = staticmethod(lambda: ())

    def test_without_keys_the_apis_are_open(self):
        self.assertIn("API keys: off", self.d.stderr())
        self.assertEqual(completion(self.d.http)[0], 200)
        self.assertEqual(completion(self.d.http, key="anything")[0], 200)
        rc, _, err = complete(self.d.grpc)
        self.assertEqual(rc, 0, err)


class BadKeyConfigTest(unittest.TestCase):
    def test_a_key_file_without_keys_is_refused_at_start(self):
        path = work("no-keys.txt")
        with open(path, "w") as f:
            f.write("# nothing here\n\n")
        for extra in (("--api-key-file", path), ("--api-key-file", path + ".missing"),
                      ("--tls-cert", cert("dense.pem")),
                      ("--tls-server-name", "localhost")):
            r = subprocess.run([os.path.join(rel.BIN, "moesplit-dense"), "--model",
                                rel.make_model()] + list(extra), capture_output=True, timeout=30)
            self.assertEqual(r.returncode, 2, extra)
            self.assertIn(extra[0], r.stderr.decode(), extra)


class TlsTest(ServiceTest):
    """--tls-cert/--tls-key: HTTPS and gRPC over TLS, with keys."""
    flags = staticmethod(lambda: ("--api-key-file", key_file(), "--tls-cert", cert("dense.pem"),
                                  "--tls-key", cert("dense.key")))

    def test_https_with_the_test_ca(self):
        self.assertIn("TLS: on", self.d.stderr())
        tls = client_context(cert("ca.pem"))
        status, _, body = completion(self.d.http, key=KEYS[0], tls=tls)
        self.assertEqual(status, 200, body)
        self.assertEqual(http_request(self.d.http, "GET", "/health", tls=tls)[0], 200)
        self.assertUnauthorized(*http_request(self.d.http, "GET", "/v1/models", tls=tls),
                                "HTTPS, no key")
        # Keep-alive and a stream on one TLS connection (the server reads for
        # a disconnect while it writes, then waits for the next request).
        conn = http.client.HTTPSConnection(HOST, self.d.http, timeout=30, context=tls)
        try:
            auth = {"Authorization": "Bearer " + KEYS[0], "Content-Type": "application/json"}
            for _ in range(2):
                conn.request("POST", "/v1/completions", headers=auth, body=json.dumps(
                    {"prompt": "Hello", "max_tokens": 6, "temperature": 0, "stream": True}))
                r = conn.getresponse()
                self.assertEqual(r.status, 200)
                text, done = rel.sse_text(r.read())
                self.assertTrue(done)
                self.assertTrue(text)
            conn.request("GET", "/v1/models", headers=auth)
            self.assertEqual(conn.getresponse().status, 200)
        finally:
            conn.close()
        # By name too (SAN localhost), with TLS 1.2 as the floor.
        tls12 = client_context(cert("ca.pem"))
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection((HOST, self.d.http), timeout=10) as raw:
            with tls12.wrap_socket(raw, server_hostname="localhost") as s:
                self.assertEqual(s.version(), "TLSv1.2")

    def test_a_413_over_tls_reaches_a_client_that_sends_the_whole_body(self):
        # As over plain HTTP (http_reliability_test.py): the rest of the body
        # is read and dropped before the close, not answered with a reset.
        conn = http.client.HTTPSConnection(HOST, self.d.http, timeout=30,
                                           context=client_context(cert("ca.pem")))
        try:
            conn.request("POST", "/v1/completions", body=b"x" * (8 << 20), headers={
                "Authorization": "Bearer " + KEYS[0], "Content-Type": "application/json"})
            r = conn.getresponse()
            self.assertEqual(r.status, 413)
            self.assertEqual(json.loads(r.read())["error"]["code"], "request_too_large")
        finally:
            conn.close()

    def test_a_client_that_trusts_another_ca_fails(self):
        with self.assertRaises(ssl.SSLCertVerificationError):
            http_request(self.d.http, "GET", "/health", tls=client_context(cert("rogue-ca.pem")))
        rc, _, err = complete(self.d.grpc, "--api-key-file", key_file(), "--tls-ca",
                              cert("rogue-ca.pem"))
        self.assertNotEqual(rc, 0)

    def test_plain_http_against_the_tls_port_fails_and_tls_clients_still_get_answers(self):
        for _ in range(3):
            with socket.create_connection((HOST, self.d.http), timeout=10) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                got = b""
                try:
                    while True:
                        c = s.recv(4096)
                        if not c:
                            break
                        got += c
                except ConnectionResetError:
                    pass
                self.assertNotIn(b"HTTP/1.1", got)
        tls = client_context(cert("ca.pem"))
        self.assertEqual(http_request(self.d.http, "GET", "/health", tls=tls)[0], 200)
        self.assertEqual(completion(self.d.http, key=KEYS[1], tls=tls)[0], 200)

    def test_a_silent_handshake_is_closed_by_the_header_deadline(self):
        start = time.monotonic()
        with socket.create_connection((HOST, self.d.http), timeout=10) as s:
            self.assertTrue(rel.closed_by_peer(s, 8))
        self.assertLess(time.monotonic() - start, 6)  # --http-header-timeout 2000
        tls = client_context(cert("ca.pem"))
        self.assertEqual(http_request(self.d.http, "GET", "/health", tls=tls)[0], 200)

    def test_grpc_over_tls(self):
        rc, out, err = complete(self.d.grpc, "--api-key-file", key_file(), "--tls-ca",
                                cert("ca.pem"))
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.strip())
        rc, _, err = complete(self.d.grpc, "--tls-ca", cert("ca.pem"))
        self.assertNotEqual(rc, 0)
        self.assertIn("no API key", err)
        # A plain-text client against the TLS port.
        rc, _, err = complete(self.d.grpc, "--api-key-file", key_file())
        self.assertNotEqual(rc, 0)
        rc, out, err = health(self.d.grpc, "--tls-ca", cert("ca.pem"))
        self.assertEqual((rc, out.strip()), (0, "SERVING"), err)
        rc, _, _ = health(self.d.grpc)
        self.assertNotEqual(rc, 0)


class WorkerTlsTest(unittest.TestCase):
    """A gRPC worker with --tls-cert/--tls-key/--tls-ca (mutual TLS)."""

    @classmethod
    def setUpClass(cls):
        cls.w = worker("--tls-cert", cert("worker.pem"), "--tls-key", cert("worker.key"),
                       "--tls-ca", cert("ca.pem"))

    @classmethod
    def tearDownClass(cls):
        cls.w.stop()

    def experts(self):
        return "grpc://%s:%d" % (HOST, self.w.grpc)

    def test_the_right_client_certificate_works_end_to_end(self):
        self.assertIn("TLS: mutual", self.w.stderr())
        d = dense("--tls-ca", cert("ca.pem"), "--tls-cert", cert("dense.pem"), "--tls-key",
                  cert("dense.key"), experts=self.experts())
        try:
            self.assertIn("TLS to workers: mutual", d.stderr())
            status, _, body = completion(d.http, tls=client_context(cert("ca.pem")), n=12)
            self.assertEqual(status, 200, body)
            remote = json.loads(body)["choices"][0]["text"]
        finally:
            d.stop()
        local = dense()
        try:
            status, _, body = completion(local.http, n=12)
            self.assertEqual(status, 200, body)
            self.assertEqual(remote, json.loads(body)["choices"][0]["text"])
        finally:
            local.stop()

    def assertDenseRefused(self, *flags):
        d = dense(*flags, experts=self.experts())
        try:
            self.assertEqual(d.wait(30), 1, d.stderr())
            err = d.stderr()
            self.assertIn(self.experts(), err)
            self.assertIn("TLS", err)
            self.assertNotIn("ready", err)
        finally:
            d.stop()

    def test_without_a_client_certificate_the_dense_service_cannot_connect(self):
        self.assertDenseRefused("--tls-ca", cert("ca.pem"))

    def test_a_rogue_client_certificate_is_refused(self):
        self.assertDenseRefused("--tls-ca", cert("ca.pem"), "--tls-cert", cert("rogue.pem"),
                                "--tls-key", cert("rogue.key"))

    def test_a_worker_certificate_from_another_ca_is_refused(self):
        self.assertDenseRefused("--tls-ca", cert("rogue-ca.pem"), "--tls-cert", cert("dense.pem"),
                                "--tls-key", cert("dense.key"))

    def test_plain_text_and_certificateless_clients_fail_on_the_worker_port(self):
        rc, _, _ = health(self.w.grpc)
        self.assertNotEqual(rc, 0)
        rc, _, _ = health(self.w.grpc, "--tls-ca", cert("ca.pem"))
        self.assertNotEqual(rc, 0)
        rc, _, _ = health(self.w.grpc, "--tls-ca", cert("ca.pem"), "--tls-cert",
                          cert("rogue.pem"), "--tls-key", cert("rogue.key"))
        self.assertNotEqual(rc, 0)
        rc, out, err = health(self.w.grpc, "--tls-ca", cert("ca.pem"), "--tls-cert",
                              cert("dense.pem"), "--tls-key", cert("dense.key"))
        self.assertEqual((rc, out.strip()), (0, "SERVING"), err)
        # The name checked can be overridden (a worker addressed by IP whose
        # certificate names a host).
        rc, out, err = health(self.w.grpc, "--tls-ca", cert("ca.pem"), "--tls-cert",
                              cert("dense.pem"), "--tls-key", cert("dense.key"),
                              "--tls-server-name", "localhost")
        self.assertEqual((rc, out.strip()), (0, "SERVING"), err)


class UpTest(unittest.TestCase):
    def test_up_passes_keys_and_tls_on_and_prompts_through_them(self):
        rc, out, err = moesplit(
            "up", "--model", rel.make_model(), "--grpc", "%s:%d" % (HOST, free_port()),
            "--threads", "1", "--dense-threads", "1", "--api-key-file", key_file(), "--tls-cert",
            cert("dense.pem"), "--tls-key", cert("dense.key"), "--tls-ca", cert("ca.pem"),
            "--prompt", "Hello", "-n", "3", timeout=100)
        self.assertEqual(rc, 0, err)
        self.assertIn("API keys: 2; TLS: on", err)
        self.assertIn("moesplit up: 3 tokens", err)


if __name__ == "__main__":
    rel.BIN, rel.WORK = sys.argv[1], sys.argv[2]
    os.makedirs(rel.WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
