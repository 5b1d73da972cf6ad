#!/usr/bin/env python3
"""Structured output (response_format) end to end: a real moesplit-dense on
loopback serving the tiny random-weight fixture models that carry real BPE
vocabularies (qwen3moe-tiny, qwen35moe-tiny), driven over HTTP and gRPC.
Every constrained output must parse and validate against its schema with a
real JSON Schema validator (python3-jsonschema, Draft 2020-12), for greedy
decoding and temperature 1 with several seeds; unsupported keywords and
malformed response_format objects are refused with HTTP 400 / gRPC
INVALID_ARGUMENT naming them.

Usage: structured_output_test.py BIN_DIR WORK_DIR PROTO_DIR FIXTURES_DIR [unittest args]
  Needs an interpreter that imports jsonschema, grpc and grpc_tools (Debian
  python3-jsonschema, python3-grpcio, python3-grpc-tools).
"""
import json
import os
import re
import sys
import unittest
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_reliability_test as rel  # noqa: E402  (the Dense process, raw HTTP)
import grpc_python_client_test as gpc  # noqa: E402  (the generated gRPC modules)

try:
    import jsonschema
except ImportError:
    sys.exit("FAIL: %s cannot import jsonschema; install python3-jsonschema "
             "(scripts/install-deps.sh does)" % sys.executable)

FIXTURES = PROTO = None
MODELS = ("qwen3moe-tiny-q8_0.gguf", "qwen35moe-tiny-q8_0.gguf")
SEEDS = (1, 2, 3)
MAX_TOKENS = 600

S = {"type": "string", "maxLength": 8}
INT = {"type": "integer"}

# Twenty-four schemas; every string and array is bounded so that a random model
# reaches the end of the JSON well inside MAX_TOKENS.
SCHEMAS = [
    ("flat", {"type": "object", "properties": {"name": S, "age": INT, "ok": {"type": "boolean"}},
              "required": ["name", "age", "ok"], "additionalProperties": False}),
    ("nested", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"name": S, "age": INT},
                 "required": ["name", "age"], "additionalProperties": False},
        "active": {"type": "boolean"}}, "required": ["user", "active"],
        "additionalProperties": False}),
    ("int_array", {"type": "array", "items": INT, "minItems": 1, "maxItems": 4}),
    ("enum", {"enum": ["red", "green", "blue"]}),
    ("enum_and_number", {"type": "object", "properties": {
        "colour": {"enum": ["red", "green"]}, "weight": {"type": "number"}},
        "required": ["colour", "weight"]}),
    ("escaped_const", {"const": "line\nbreak \"quoted\" \\ tab\t caf\u00e9 \u2603"}),
    ("any_of", {"anyOf": [INT, {"type": "string", "maxLength": 5}, {"type": "null"}]}),
    ("ref_points", {"$defs": {"point": {"type": "object", "properties": {
        "x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"],
        "additionalProperties": False}},
        "type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 3}),
    ("ref_chain", {"$defs": {"leaf": {"type": "string", "maxLength": 4},
                             "pair": {"type": "object", "properties": {
                                 "a": {"$ref": "#/$defs/leaf"}, "b": {"$ref": "#/$defs/leaf"}},
                                 "required": ["a", "b"]}},
                   "$ref": "#/$defs/pair"}),
    ("optional", {"type": "object", "properties": {"a": INT, "b": S, "c": {"type": "null"}},
                  "additionalProperties": False}),
    ("type_list", {"type": ["integer", "string", "null"], "maxLength": 6}),
    ("nullable_string", {"type": ["string", "null"], "maxLength": 4}),
    ("const_values", {"type": "object", "properties": {
        "v": {"const": 2}, "t": {"const": True}, "n": {"const": None}},
        "required": ["v", "t", "n"]}),
    ("enum_array", {"type": "array", "items": {"enum": ["x", "yy", 3, False]},
                    "minItems": 2, "maxItems": 3}),
    ("array_of_objects", {"type": "array", "minItems": 1, "maxItems": 2, "items": {
        "type": "object", "properties": {
            "id": INT, "tags": {"type": "array", "items": {"type": "string", "maxLength": 3},
                                "maxItems": 2}},
        "required": ["id", "tags"]}}),
    ("number", {"type": "number"}),
    ("boolean", {"type": "boolean"}),
    ("one_of", {"oneOf": [{"type": "boolean"}, {"type": "object", "properties": {"k": INT},
                                                 "required": ["k"]}]}),
    ("unicode_string", {"type": "string", "minLength": 2, "maxLength": 4}),
    ("deep", {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "object", "properties": {"c": {"type": "object", "properties": {
            "d": INT}, "required": ["d"]}}, "required": ["c"]}}, "required": ["b"]}},
        "required": ["a"]}),
    ("int_bounds", {"type": "object", "properties": {
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "n": {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991},
        "step": {"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100}},
        "required": ["days", "n", "step"], "additionalProperties": False}),
    ("number_bounds", {"type": "array", "minItems": 1, "maxItems": 3, "items": {
        "type": "number", "exclusiveMinimum": 0, "maximum": 1}}),
    ("pattern_format", {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{2,4}$"},
        "day": {"type": "string", "format": "date"},
        "id": {"type": "string", "format": "uuid"}}, "required": ["code", "day", "id"]}),
    ("all_of", {"allOf": [{"type": "object", "properties": {"a": INT}, "required": ["a"]},
                          {"properties": {"b": S}, "required": ["b"]}]}),
]


def rf_schema(name, schema, strict=True):
    return {"type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": strict}}


def post(dense, path, body, timeout=120):
    status, _, out = rel.request(dense, "POST", path, json.dumps(body).encode(), timeout=timeout)
    return status, json.loads(out)


def completion(dense, index, rf, seed):
    """One request; the chat endpoint for odd indices. Returns (status, text, finish)."""
    body = {"max_tokens": MAX_TOKENS, "response_format": rf}
    if seed is None:
        body["temperature"] = 0
    else:
        body.update(temperature=1.0, seed=seed)
    chat = index % 2 == 1
    if chat:
        body["messages"] = [{"role": "user", "content": "Answer in JSON."}]
    else:
        body["prompt"] = "The answer, as JSON:"
    status, out = post(dense, "/v1/chat/completions" if chat else "/v1/completions", body)
    if status != 200:
        return status, json.dumps(out), None
    choice = out["choices"][0]
    text = choice["message"]["content"] if chat else choice["text"]
    return status, text, choice["finish_reason"]


class ModelTest(unittest.TestCase):
    model = None

    @classmethod
    def setUpClass(cls):
        cls.dense = rel.Dense(model=os.path.join(FIXTURES, "models", cls.model), parallel=4)

    @classmethod
    def tearDownClass(cls):
        cls.dense.stop()

    def test_twenty_schemas_greedy_and_sampled_outputs_validate(self):
        jobs = [(i, name, schema, seed) for i, (name, schema) in enumerate(SCHEMAS)
                for seed in (None,) + SEEDS]
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(
                lambda j: completion(self.dense, j[0], rf_schema(j[1], j[2]), j[3]), jobs))
        lengths = []
        for (i, name, schema, seed), (status, text, finish) in zip(jobs, results):
            what = "%s (%s, seed %s): %r" % (name, self.model, seed, text)
            self.assertEqual(status, 200, what)
            self.assertEqual(finish, "stop", what)
            value = json.loads(text)
            jsonschema.Draft202012Validator(schema).validate(value)
            lengths.append(len(text))
        print("%s: %d outputs valid, %d..%d bytes" % (self.model, len(results), min(lengths),
                                                       max(lengths)))

    def test_json_object_stream_and_logprobs(self):
        outs = []
        for seed in SEEDS:
            body = {"prompt": "JSON:", "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": seed,
                    "response_format": {"type": "json_object"}, "logprobs": 2}
            status, out = post(self.dense, "/v1/completions", body)
            self.assertEqual(status, 200, out)
            choice = out["choices"][0]
            if choice["finish_reason"] == "stop":
                self.assertIsInstance(json.loads(choice["text"]), dict, choice["text"])
            else:
                # Cut by max_tokens: what came is still a prefix of an object.
                self.assertEqual(choice["finish_reason"], "length")
                self.assertTrue(choice["text"].startswith("{"), choice["text"])
            self.assertEqual(len(choice["logprobs"]["tokens"]), out["usage"]["completion_tokens"])
            outs.append(choice["finish_reason"])
        self.assertIn("stop", outs)
        # Streaming: the deltas concatenate to a valid document.
        schema = SCHEMAS[1][1]
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": MAX_TOKENS,
                "temperature": 0, "stream": True, "response_format": rf_schema("s", schema)}
        status, _, raw = rel.request(self.dense, "POST", "/v1/chat/completions",
                                     json.dumps(body).encode(), timeout=120)
        self.assertEqual(status, 200, raw)
        text = ""
        finish = None
        for line in raw.decode().split("\n"):
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                for c in chunk.get("choices", []):
                    text += c.get("delta", {}).get("content") or ""
                    finish = c.get("finish_reason") or finish
        self.assertEqual(finish, "stop", text)
        jsonschema.Draft202012Validator(schema).validate(json.loads(text))


class Qwen3MoeTest(ModelTest):
    model = MODELS[0]


class Qwen35MoeTest(ModelTest):
    model = MODELS[1]


class RefusalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dense = rel.Dense(model=os.path.join(FIXTURES, "models", MODELS[0]), parallel=2)
        port = int(re.search(r"grpc port (\d+)", cls.dense.stderr()).group(1))
        gpc.PROTO = PROTO
        gpc.load_grpc()
        cls.channel = gpc.grpc.insecure_channel("%s:%d" % (rel.HOST, port))
        gpc.grpc.channel_ready_future(cls.channel).result(timeout=20)
        cls.stub = gpc.pb_grpc.InferenceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.dense.stop()

    BAD = [
        (rf_schema("p", {"type": "string", "pattern": "^(?!x)a+$"}),
         "pattern at offset 1: lookahead (?= / (?! is not supported"),
        (rf_schema("f", {"type": "object", "properties": {
            "when": {"type": "string", "format": "ipv6"}}}),
         "#/properties/when: format 'ipv6' is not supported"),
        (rf_schema("m", {"type": "integer", "minimum": 3, "maximum": 2}), "no integer satisfies"),
        (rf_schema("u", {"type": "array", "uniqueItems": True}), "uniqueItems true"),
        (rf_schema("a", {"type": "object", "additionalProperties": True}),
         "additionalProperties must be false when strict is true"),
        ("json", "response_format must be an object"),
        ({"type": "xml"}, "response_format.type must be one of"),
        ({"type": "json_schema"}, "response_format.json_schema must be an object"),
        ({"type": "json_schema", "json_schema": {"name": "x"}},
         "response_format.json_schema.schema is required"),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}},
         "strict must be true or false"),
    ]

    def test_http_400_names_the_keyword_and_nothing_is_queued(self):
        for rf, want in self.BAD:
            for path, extra in (("/v1/completions", {"prompt": "x"}),
                                ("/v1/chat/completions",
                                 {"messages": [{"role": "user", "content": "x"}]})):
                body = dict(extra, max_tokens=4, response_format=rf)
                status, out = post(self.dense, path, body)
                self.assertEqual(status, 400, (rf, out))
                self.assertEqual(out["error"]["type"], "invalid_request_error", out)
                self.assertEqual(out["error"]["param"], "response_format", out)
                self.assertIn(want, out["error"]["message"], out)
        self.assertEqual(self.dense.metric("moesplit_running_sequences"), 0)
        status, out = post(self.dense, "/v1/completions",
                           {"prompt": "x", "max_tokens": 4, "response_format": {"type": "text"}})
        self.assertEqual(status, 200, out)

    def grpc_stream(self, method, request):
        return list(method(request, timeout=60))

    def test_grpc_generate_and_chat_follow_the_schema(self):
        pb = gpc.pb
        for i, (name, schema) in enumerate(SCHEMAS[:6]):
            fmt = pb.ResponseFormat(type="json_schema", schema=json.dumps(schema).encode(),
                                    name=name, strict=True)
            sampling = pb.SamplingParams(temperature=1.0, seed=7)
            if i % 2 == 0:
                out = self.grpc_stream(self.stub.Generate, pb.GenerateRequest(
                    prompt=b"JSON:", max_tokens=MAX_TOKENS, sampling=sampling,
                    response_format=fmt))
                text = "".join(r.text for r in out)
            else:
                out = self.grpc_stream(self.stub.Chat, pb.ChatRequest(
                    messages=[pb.ChatMessage(role=b"user", content=b"JSON please")],
                    max_tokens=MAX_TOKENS, sampling=sampling, response_format=fmt))
                text = "".join(r.content for r in out)
            self.assertEqual(out[-1].finish_reason, "stop", (name, text))
            jsonschema.Draft202012Validator(schema).validate(json.loads(text))
        out = self.grpc_stream(self.stub.Generate, pb.GenerateRequest(
            prompt=b"JSON:", max_tokens=MAX_TOKENS, sampling=pb.SamplingParams(temperature=0),
            response_format=pb.ResponseFormat(type="json_object")))
        if out[-1].finish_reason == "stop":
            self.assertIsInstance(json.loads("".join(r.text for r in out)), dict)

    def test_grpc_invalid_argument_names_the_keyword(self):
        pb = gpc.pb
        cases = [
            (pb.ResponseFormat(type="json_schema", schema=b'{"type":"string","pattern":"(a)\\\\1"}'),
             "backreference is not supported"),
            (pb.ResponseFormat(type="json_schema", schema=b'{"type":'), "not valid JSON"),
            (pb.ResponseFormat(type="json_schema"), "schema is required"),
            (pb.ResponseFormat(type="yaml"), "response_format.type must be one of"),
        ]
        for fmt, want in cases:
            for call in (
                    lambda: self.grpc_stream(self.stub.Generate, pb.GenerateRequest(
                        prompt=b"x", max_tokens=4, response_format=fmt)),
                    lambda: self.grpc_stream(self.stub.Chat, pb.ChatRequest(
                        messages=[pb.ChatMessage(role=b"user", content=b"x")], max_tokens=4,
                        response_format=fmt))):
                with self.assertRaises(gpc.grpc.RpcError) as e:
                    call()
                self.assertEqual(e.exception.code(), gpc.grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(want, e.exception.details())


if __name__ == "__main__":
    rel.BIN, rel.WORK = sys.argv[1], sys.argv[2]
    PROTO, FIXTURES = sys.argv[3], sys.argv[4]
    os.makedirs(rel.WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + sys.argv[5:], verbosity=2)
