#!/usr/bin/env python3
"""The dense service's gRPC API through Python's grpcio: a real moesplit-dense
on loopback (in-process experts, the generated test model of
http_reliability_test.py), its proto compiled with grpc_tools.protoc at test
time.

Python's protobuf checks proto3 `string` fields for UTF-8 on parse (C++ does
not), so a server string holding a byte token or half a character fails the
whole call with INTERNAL there. These cases drive exactly those fields
(logprobs, Detokenize) and the list limits shared with the HTTP API.

Usage: grpc_python_client_test.py BIN_DIR WORK_DIR PROTO_DIR [unittest args]
  Needs an interpreter that imports grpc and grpc_tools (Debian
  python3-grpcio, python3-grpc-tools); without them it fails, naming them.
"""
import atexit
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_reliability_test as rel  # noqa: E402  (the model and the Dense process)

PROTO = None
pb = pb_grpc = grpc = None

# Text whose rarer characters the small test vocabulary has no merges for:
# they tokenize into byte tokens, each one byte of a character.
EXOTIC = "caf\u00e9 \u2603 \U0001d11e \u65e5\u672c\u8a9e \U0001f642 \u00fc\u00df"


def load_grpc():
    """Imports grpc and the generated modules, or exits saying what is missing."""
    global pb, pb_grpc, grpc
    try:
        import grpc as grpc_module
        import grpc_tools  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError as e:
        sys.exit("FAIL: %s cannot import %s; install python3-grpcio python3-grpc-tools "
                 "python3-protobuf (scripts/install-deps.sh does)" % (sys.executable, e.name))
    out = os.path.join(rel.WORK, "grpc_python_%d" % os.getpid())
    os.makedirs(out, exist_ok=True)
    atexit.register(shutil.rmtree, out, True)  # the modules stay loaded; the files go
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + PROTO, "--python_out=" + out,
                    "--grpc_python_out=" + out,
                    os.path.join(PROTO, "moesplit", "v1", "inference.proto")],
                   check=True, timeout=60)
    sys.path.insert(0, out)
    from moesplit.v1 import inference_pb2, inference_pb2_grpc
    grpc, pb, pb_grpc = grpc_module, inference_pb2, inference_pb2_grpc


def valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


class GrpcTest(unittest.TestCase):
    dense = None

    @classmethod
    def setUpClass(cls):
        cls.dense = rel.Dense(parallel=2)
        port = int(re.search(r"grpc port (\d+)", cls.dense.stderr()).group(1))
        cls.channel = grpc.insecure_channel("%s:%d" % (rel.HOST, port))
        grpc.channel_ready_future(cls.channel).result(timeout=20)
        cls.stub = pb_grpc.InferenceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.dense.stop()

    def call(self, method, request):
        """A unary call; a failed one fails the test with its code and details."""
        try:
            return method(request, timeout=30)
        except grpc.RpcError as e:
            self.fail("%s: %s %s" % (method._method, e.code(), e.details()))

    def stream(self, method, request):
        try:
            return list(method(request, timeout=60))
        except grpc.RpcError as e:
            self.fail("%s: %s %s" % (method._method, e.code(), e.details()))

    def exotic_tokens(self):
        return list(self.call(self.stub.Tokenize,
                              pb.TokenizeRequest(text=EXOTIC.encode())).tokens)

    def check_logprob(self, lp):
        # `text` is valid by construction (Python decoded it); it is the raw
        # bytes with each invalid part replaced (Python's "replace" is the
        # same maximal-subpart rule as the server's).
        self.assertEqual(lp.text, lp.text_bytes.decode("utf-8", errors="replace"), lp)
        return not valid_utf8(lp.text_bytes)


class TextTest(GrpcTest):
    def test_detokenize_byte_tokens_round_trips_raw_bytes(self):
        ids = self.exotic_tokens()
        # One id at a time: some are one byte of a character (INTERNAL here
        # when the server put raw bytes into the string).
        singles = [self.call(self.stub.Detokenize, pb.DetokenizeRequest(tokens=[i])) for i in ids]
        partial = 0
        raw = b""
        for i, one in zip(ids, singles):
            raw += one.text_bytes
            self.assertEqual(one.text, one.text_bytes.decode("utf-8", errors="replace"), i)
            if not valid_utf8(one.text_bytes):
                partial += 1
        whole = self.call(self.stub.Detokenize, pb.DetokenizeRequest(tokens=ids))
        self.assertEqual(whole.text_bytes, EXOTIC.encode())
        self.assertEqual(whole.text, EXOTIC)
        self.assertEqual(raw, EXOTIC.encode(), "token by token, the raw bytes rebuild the text")
        self.assertGreater(partial, 0, "no token of %r is part of a character: the test "
                           "exercises nothing (tokens %s)" % (EXOTIC, ids))
        # Ids that cut a character: the raw bytes stay cut, the text shows U+FFFD.
        cut = self.call(self.stub.Detokenize, pb.DetokenizeRequest(tokens=ids[:-1]))
        self.assertTrue(EXOTIC.encode().startswith(cut.text_bytes))

    def test_generate_with_logprobs_streams_valid_text_and_raw_bytes(self):
        ids = self.exotic_tokens()
        # Greedy, then hot seeded sampling: the byte tokens (one byte of a
        # character each) are unlikely in this model's top 20 but get drawn
        # at temperature 2.
        runs = []
        for temperature, seed in ((0, 0), (2.0, 1), (2.0, 2), (2.0, 3)):
            req = pb.GenerateRequest(prompt_tokens=ids, max_tokens=32, logprobs=20)
            req.sampling.temperature = temperature
            req.sampling.seed = seed
            req.sampling.has_seed = seed > 0
            runs.append(self.stream(self.stub.Generate, req))
        partial = 0
        for chunks in runs:
            self.assertGreater(len(chunks), 2, "a stream of deltas")
            self.assertIn(chunks[-1].finish_reason, ("stop", "length"))
            tokens = []
            for c in chunks[:-1]:
                tokens.extend(c.token_ids)
                self.assertEqual(len(c.logprobs), 21, "the chosen token, then the top 20")
                self.assertEqual(c.logprobs[0].token, c.token_ids[0])
                partial += sum(self.check_logprob(lp) for lp in c.logprobs)
            self.assertEqual(chunks[-1].usage.completion_tokens, len(tokens))
        self.assertGreater(partial, 0, "no logprob token was part of a character")
        # The same prompt as text.
        req = pb.GenerateRequest(prompt=EXOTIC.encode(), max_tokens=8, logprobs=5)
        chunks = self.stream(self.stub.Generate, req)
        self.assertIn(chunks[-1].usage.completion_tokens, range(1, 9))

    def test_chat_with_logprobs_and_tokenize(self):
        runs = []
        for seed in (1, 2, 3):
            req = pb.ChatRequest(
                messages=[pb.ChatMessage(role=b"user", content=EXOTIC.encode())],
                max_tokens=32, logprobs=20)
            req.sampling.temperature = 2.0
            req.sampling.seed = seed
            req.sampling.has_seed = True
            runs.append(self.stream(self.stub.Chat, req))
        partial = 0
        for chunks in runs:
            self.assertIn(chunks[-1].usage.completion_tokens, range(1, 33))
            for c in chunks:
                for lp in c.logprobs:
                    partial += self.check_logprob(lp)
        self.assertGreater(partial, 0, "no logprob token was part of a character")
        model = self.call(self.stub.GetModel, pb.GetModelRequest())
        self.assertEqual(model.name, "reliability")
        # Tokenize refuses invalid UTF-8 by name (a bytes field: no parse failure).
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.Tokenize(pb.TokenizeRequest(text=b"\xff\xfe"), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("text", e.exception.details())


class ProgressTest(GrpcTest):
    """return_progress: progress messages (prompt_progress set, no text)
    while the prompt is evaluated; the initial metadata comes as soon as the
    request is accepted, before any token (here: while it waits in the
    queue behind two long requests)."""

    def test_generate_and_chat_send_progress_messages(self):
        words = " ".join("w%d" % i for i in range(400))
        ids = list(self.call(self.stub.Tokenize, pb.TokenizeRequest(text=words.encode())).tokens)
        self.assertGreater(len(ids), 640)
        for progress in (True, False):
            gen = self.stream(self.stub.Generate, pb.GenerateRequest(
                prompt_tokens=ids, max_tokens=2, return_progress=progress))
            chat = self.stream(self.stub.Chat, pb.ChatRequest(
                messages=[pb.ChatMessage(role=b"user", content=words.encode())], max_tokens=2,
                return_progress=progress))
            for out in (gen, chat):
                marks = [r.prompt_progress for r in out if r.HasField("prompt_progress")]
                if not progress:
                    self.assertEqual(marks, [])
                    continue
                total = out[-1].usage.prompt_tokens
                self.assertGreaterEqual(len(marks), total // 64, marks)
                self.assertTrue(all(m.total == total for m in marks))
                self.assertEqual(marks[0].processed, marks[0].cache)
                self.assertEqual(marks[-1].processed, total)
                done = [m.processed for m in marks]
                self.assertEqual(done, sorted(set(done)))
                # They come first and carry nothing else.
                self.assertTrue(all(r.HasField("prompt_progress") for r in out[:len(marks)]))
                for r in out[:len(marks)]:
                    self.assertEqual(len(r.token_ids), 0)
                    self.assertEqual(r.finish_reason, "")

    def test_initial_metadata_comes_before_the_first_token(self):
        d = self.dense
        self.assertTrue(d.wait_idle())
        # ignore_eos: the test model's greedy text may end early; these must
        # run until closed.
        body = b'{"prompt": "A long story:", "max_tokens": 0, "temperature": 0, "ignore_eos": true}'
        blockers = []
        for _ in range(2):  # --parallel 2: both slots busy until closed
            s = d.connect()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(body), body))
            blockers.append(s)
        deadline = time.monotonic() + 10
        while d.metric("moesplit_running_sequences") != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(d.metric("moesplit_running_sequences"), 2)
        call = self.stub.Generate(pb.GenerateRequest(prompt=b"Hi", max_tokens=2), timeout=60)
        t0 = time.monotonic()
        call.initial_metadata()  # blocks until the server sent it
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(d.metric("moesplit_queue_depth"), 1)  # still queued: no token yet
        for s in blockers:
            s.close()
        out = list(call)
        self.assertEqual(out[-1].finish_reason, "length")


class LimitsTest(GrpcTest):
    def assertInvalid(self, method, request, *words):
        with self.assertRaises(grpc.RpcError) as e:
            list(method(request, timeout=30))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                         e.exception.details())
        for w in words:
            self.assertIn(w, e.exception.details())

    def test_stop_list_is_capped_at_the_http_limit(self):
        req = pb.GenerateRequest(prompt=b"Hello", max_tokens=2, stop=[b"x%d" % i for i in range(5)])
        self.assertInvalid(self.stub.Generate, req, "stop", "at most 4", "got 5")
        # A 200,000-string list is refused the same way, at once.
        req = pb.GenerateRequest(prompt=b"Hello", max_tokens=2,
                                 stop=[b"s%d" % i for i in range(200000)])
        self.assertInvalid(self.stub.Generate, req, "stop", "got 200000")
        chat = pb.ChatRequest(messages=[pb.ChatMessage(role=b"user", content=b"hi")],
                              max_tokens=2, stop=[b"x"] * 5)
        self.assertInvalid(self.stub.Chat, chat, "stop", "at most 4")
        # Four are fine.
        req = pb.GenerateRequest(prompt=b"Hello", max_tokens=2, stop=[b"x%d" % i for i in range(4)])
        self.assertEqual(self.stream(self.stub.Generate, req)[-1].usage.completion_tokens, 2)

    def test_long_prompt_is_refused_after_the_contexts_worth_of_tokens(self):
        # 3 MB of text: tokenizing stops once the prompt cannot fit (as on
        # HTTP), so the refusal says "at least" and comes at once.
        text = b"hello world " * 250000
        start = time.monotonic()
        self.assertInvalid(self.stub.Generate, pb.GenerateRequest(prompt=text, max_tokens=2),
                           "at least", "the context holds")
        chat = pb.ChatRequest(messages=[pb.ChatMessage(role=b"user", content=text)], max_tokens=2)
        self.assertInvalid(self.stub.Chat, chat, "at least", "the context holds")
        self.assertLess(time.monotonic() - start, 5.0)

    def test_messages_are_capped_at_the_http_limit(self):
        msgs = [pb.ChatMessage(role=b"user", content=b"hi")] * 2049
        self.assertInvalid(self.stub.Chat, pb.ChatRequest(messages=msgs, max_tokens=2),
                           "messages", "at most 2048", "got 2049")


if __name__ == "__main__":
    rel.BIN, rel.WORK, PROTO = sys.argv[1], sys.argv[2], sys.argv[3]
    load_grpc()
    unittest.main(argv=[sys.argv[0]] + sys.argv[4:], verbosity=2)
