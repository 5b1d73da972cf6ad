#!/usr/bin/env python3
"""Regenerates common/chat/testdata/templates/<name>.expected.json and
<name>.tools.expected.json: the prompts llama.cpp's server renders
(POST /apply-template: its Jinja engine and chat handling) for the chat
templates of the oracle fixtures that came without renderings, and for the
templates this repository keeps itself beside them
(common/chat/testdata/templates/<name>.jinja, copied unchanged from
llama.cpp's models/templates; see README.md there).

For each template it starts llama-server on a tiny fixture model (the BOS /
EOS tokens the template sees are the model's: `<|endoftext|>` / `<|im_end|>`
of the tiny qwen3moe model, as for the fixtures' own renderings), with
`--jinja --chat-template-file <template> --reasoning on` (enable_thinking
true unless a case's chat_template_kwargs say otherwise), posts every case
and writes the files in the fixtures' format (fixtures/README.md):

  <name>.expected.json        {"template", "date", "renderer", "cases": [{"request":
                              {"messages", "add_generation_prompt",
                              "chat_template_kwargs"?}, "prompt"}]}
  <name>.tools.expected.json  {"date", "renderer", "cases": [{"request":
                              {"messages", "tools", "add_generation_prompt"},
                              "prompt"}]}
("renderer": the first line of `llama-server --version`.) A case the
template refuses (raise_exception: Llama 3.x takes one call per message)
has "error": llama-server's message instead of "prompt".

Usage:
  python3 common/chat/testdata/template_renderings.py \
      --llama-server /path/to/llama-server \
      [--fixtures /work/shared/fixtures] [--model M.gguf] \
      [--out common/chat/testdata/templates] [NAME ...]
NAME defaults to every template this repository keeps renderings for.
"""
import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

TEMPLATES = ["GLM-4.6", "GLM-4.7-Flash", "MiniMax-M2", "Qwen3-Coder", "google-gemma-4-31B-it",
             "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "meta-llama-Llama-3.1-8B-Instruct",
             "meta-llama-Llama-3.3-70B-Instruct"]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the internal documentation",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
                "filters": {
                    "type": "object",
                    "properties": {
                        "team": {"type": "string"},
                        "tags": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
            "required": ["query"],
        },
    },
}


def call(id_, name, arguments):
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


# The first four are the cases of every fixture's .expected.json.
PLAIN_CASES = [
    {"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello. How can I help?"},
                  {"role": "user", "content": "Name a prime number.\nJust one."}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "Unicode: naïve café — 日本語 🦙"}],
     "add_generation_prompt": False},
    # Thinking off (GLM's "/nothink" and empty think block).
    {"messages": [{"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": True,
     "chat_template_kwargs": {"enable_thinking": False}},
    # Reasoning given back by the client on an earlier turn (before the last
    # user message: templates drop it), and reasoning inside the content.
    {"messages": [{"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello.", "reasoning_content": "Greet back."},
                  {"role": "user", "content": "And now?"},
                  {"role": "assistant", "content": "<think>\nStill greeting.\n</think>\n\nHello again."},
                  {"role": "user", "content": "Bye."}],
     "add_generation_prompt": True},
]

# The first two are the cases of every fixture's .tools.expected.json.
TOOLS_CASES = [
    {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "What is the weather in Paris?"}],
     "tools": [WEATHER], "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "Weather in Oslo, in celsius?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [call("call_0", "get_weather", {"city": "Oslo", "unit": "celsius"})]},
                  {"role": "tool", "tool_call_id": "call_0", "content": "{\"temp\": -3, \"sky\": \"snow\"}"}],
     "tools": [WEATHER, SEARCH], "add_generation_prompt": True},
    # Parallel calls after reasoning (interleaved thinking: the reasoning of
    # the turn since the last user message is rendered back), two results.
    {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "Weather in Oslo, and the on-call docs?"},
                  {"role": "assistant", "content": "Checking both.",
                   "reasoning_content": "Two tools are needed.",
                   "tool_calls": [call("call_1", "get_weather", {"city": "Oslo"}),
                                  call("call_2", "search_docs",
                                       {"query": "on-call", "limit": 5,
                                        "filters": {"team": "infra", "tags": ["pager", "rota"]}})]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": -3}"},
                  {"role": "tool", "tool_call_id": "call_2", "content": "No results."}],
     "tools": [WEATHER, SEARCH], "add_generation_prompt": True},
    # A finished tool turn, then a new question: its reasoning is dropped.
    {"messages": [{"role": "user", "content": "Weather in Rome?"},
                  {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
                   "tool_calls": [call("call_3", "get_weather", {"city": "Rome"})]},
                  {"role": "tool", "tool_call_id": "call_3", "content": "sunny"},
                  {"role": "assistant", "content": "It is sunny in Rome.",
                   "reasoning_content": "Report it."},
                  {"role": "user", "content": "Thanks!"}],
     "tools": [WEATHER], "add_generation_prompt": True},
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/apply-template",
                                 data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["prompt"]


def render_all(server, model, template, cases):
    port = free_port()
    log = open(os.devnull, "w")
    proc = subprocess.Popen([server, "-m", model, "--jinja", "--chat-template-file", template,
                             "--reasoning", "on", "--host", "127.0.0.1", "--port", str(port),
                             "-c", "512", "-t", "1", "--no-warmup"], stdout=log, stderr=log)
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if proc.poll() is not None or time.time() > deadline:
                sys.exit(f"llama-server did not start for {template}")
            time.sleep(0.2)
        out = []
        for c in cases:
            try:
                out.append({"request": c, "prompt": post(port, c)})
            except urllib.error.HTTPError as e:
                if e.code != 400:
                    raise
                out.append({"request": c, "error": json.loads(e.read())["error"]["message"]})
        return out
    finally:
        proc.terminate()
        proc.wait()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--fixtures", default=os.environ.get("MOESPLIT_FIXTURES_DIR", "/work/shared/fixtures"))
    ap.add_argument("--model", help="default: <fixtures>/models/qwen3moe-tiny-q8_0.gguf")
    ap.add_argument("--out", default=os.path.join(here, "templates"))
    ap.add_argument("names", nargs="*", default=TEMPLATES)
    a = ap.parse_args()
    model = a.model or os.path.join(a.fixtures, "models", "qwen3moe-tiny-q8_0.gguf")
    version = subprocess.run([a.llama_server, "--version"], capture_output=True, text=True)
    renderer = "llama-server " + (version.stdout + version.stderr).strip().splitlines()[0]
    os.makedirs(a.out, exist_ok=True)
    for name in a.names:
        template = os.path.join(a.fixtures, "templates", name + ".jinja")
        if not os.path.exists(template):  # one this repository keeps
            template = os.path.join(a.out, name + ".jinja")
        date = datetime.date.today().isoformat()
        plain = {"template": name + ".jinja", "date": date, "renderer": renderer,
                 "cases": render_all(a.llama_server, model, template, PLAIN_CASES)}
        tools = {"date": date, "renderer": renderer,
                 "cases": render_all(a.llama_server, model, template, TOOLS_CASES)}
        for suffix, data in ((".expected.json", plain), (".tools.expected.json", tools)):
            with open(os.path.join(a.out, name + suffix), "w", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=False, indent=1)
                f.write("\n")
        print(f"{name}: {len(plain['cases'])} + {len(tools['cases'])} cases")


if __name__ == "__main__":
    main()
