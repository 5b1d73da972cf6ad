#!/usr/bin/env bash
# The README's quickstart, run as written: the shell blocks between
# <!-- quickstart:serve --> and <!-- quickstart:client --> markers (and their
# closing <!-- /quickstart:... -->) are extracted, the model path is replaced
# by a generated model, build/bin/ by BIN_DIR and the two ports by free ones;
# the serve block (moesplit plan, then moesplit up) runs in its own process
# group, the client block (curl) runs once `moesplit up` serves, its answers
# are checked, and Ctrl-C (SIGINT to the group) must stop everything and
# leave no shared-memory segment behind. Bounded: ~20 s here, 240 s at most.
# Usage: quickstart_test.sh REPO_ROOT BIN_DIR WORK_DIR
set -uo pipefail
REPO=$(cd "$1" && pwd)
BIN=$(cd "$2" && pwd)
WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
failures=0 passes=0
pass() { echo "ok   $1"; passes=$((passes + 1)); }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
GROUP=
cleanup() { [[ -n $GROUP ]] && kill -KILL -- "-$GROUP" 2>/dev/null; }
trap cleanup EXIT

# block NAME: the fenced code between the NAME markers of README.md.
block() {
  python3 - "$REPO/README.md" "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"<!-- quickstart:%s -->\s*```[a-z]*\n(.*?)```\s*<!-- /quickstart:%s -->"
              % (sys.argv[2], sys.argv[2]), text, re.S)
if not m:
    sys.exit(f"README.md has no quickstart:{sys.argv[2]} block")
print(m.group(1), end="")
PY
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

block serve >"$WORK/serve.orig" || { fail "$(cat "$WORK/serve.orig")"; exit 1; }
block client >"$WORK/client.orig" || { fail "$(cat "$WORK/client.orig")"; exit 1; }
"$BIN/moesplit" make-test-model --out "$WORK/model.gguf" --threads 2 >"$WORK/make.log" 2>&1 ||
  { fail "make-test-model: $(cat "$WORK/make.log")"; exit 1; }
HTTP_PORT=$(free_port)
GRPC_PORT=$(free_port)
# substitute IN OUT REQUIRED...: the replacements; each REQUIRED one (model,
# bin, http, grpc) must find something to replace.
substitute() {
  python3 - "$WORK/model.gguf" "$BIN" "$HTTP_PORT" "$GRPC_PORT" "$@" <<'PY'
import re, sys
model, bin_dir, http, grpc, src, dst, *required = sys.argv[1:]
text = open(src).read()
rules = {"model": (r"^MODEL=.*$", f"MODEL={model}"),
         "bin": (r"\bbuild/bin/", bin_dir + "/"),
         "http": (r"127\.0\.0\.1:8080\b", f"127.0.0.1:{http}"),
         "grpc": (r"127\.0\.0\.1:50051\b", f"127.0.0.1:{grpc}")}
for what, (pattern, repl) in rules.items():
    text, n = re.subn(pattern, repl, text, flags=re.M)
    if n == 0 and what in required:
        sys.exit(f"{src}: nothing to replace for {what} ({pattern})")
open(dst, "w").write(text)
PY
}
substitute "$WORK/serve.orig" "$WORK/serve.sh" model bin http grpc || { fail "serve block"; exit 1; }
substitute "$WORK/client.orig" "$WORK/client.sh" http || { fail "client block"; exit 1; }
pass "README blocks extracted: $(grep -c . "$WORK/serve.orig") + $(grep -c . "$WORK/client.orig") lines"

# The serve block in its own process group, as in a terminal.
setsid bash "$WORK/serve.sh" >"$WORK/serve.log" 2>&1 &
GROUP=$!
deadline=$((SECONDS + 120))
while ((SECONDS < deadline)) && ! grep -q "^moesplit up: serving" "$WORK/serve.log"; do
  kill -0 "$GROUP" 2>/dev/null || break
  sleep 0.2
done
if grep -q "^moesplit up: serving gRPC on 127.0.0.1:$GRPC_PORT, HTTP on 127.0.0.1:$HTTP_PORT" "$WORK/serve.log"; then
  pass "moesplit up serves HTTP on 127.0.0.1:$HTTP_PORT"; else
  fail "moesplit up is not serving: $(tail -n 20 "$WORK/serve.log")"; exit 1; fi
if grep -q "^  host (CPU)" "$WORK/serve.log" && grep -Eq "^  routed experts +[0-9]+ " "$WORK/serve.log" &&
   grep -Eq "^  KV cache +[0-9]+ " "$WORK/serve.log"; then
  pass "moesplit plan printed VRAM and RAM: $(grep -E '^  (total|routed experts)' "$WORK/serve.log" | tr -s ' ' | paste -sd';')"; else
  fail "no plan in the output: $(head -n 30 "$WORK/serve.log")"; fi

# The client block.
if timeout 60 bash "$WORK/client.sh" >"$WORK/client.out" 2>"$WORK/client.err"; then
  pass "client block ran"; else fail "client block: $(cat "$WORK/client.err")"; fi
if out=$(python3 - "$WORK/client.out" <<'PY' 2>&1
import json, sys
text = open(sys.argv[1]).read()
dec, i, docs = json.JSONDecoder(), 0, []
while i < len(text):
    if text[i].isspace():
        i += 1
        continue
    if not text[i] in "{[":  # a plain-text answer (GET /health)
        j = text.find("{", i)
        docs.append(text[i:j if j >= 0 else len(text)].strip())
        i = j if j >= 0 else len(text)
        continue
    doc, i = dec.raw_decode(text, i)
    docs.append(doc)
models = [d for d in docs if isinstance(d, dict) and d.get("object") == "list"]
chats = [d for d in docs if isinstance(d, dict) and d.get("object") == "chat.completion"]
assert models and models[0]["data"] and models[0]["data"][0]["id"], docs
assert chats, f"no chat completion in {docs}"
c = chats[0]
assert c["choices"][0]["message"]["role"] == "assistant", c
assert c["usage"]["completion_tokens"] > 0 and c["choices"][0]["finish_reason"] in ("length", "stop"), c
print(f"/v1/models lists {models[0]['data'][0]['id']}; the chat completion has "
      f"{c['usage']['completion_tokens']} tokens ({c['choices'][0]['finish_reason']})")
PY
); then pass "$out"; else fail "client answers: $out"; fi

# Ctrl-C: SIGINT to the foreground group stops everything.
prefix=$(sed -n 's/.*--listen-shm \(moesplit-[0-9]*\)-w0.*/\1/p' "$WORK/serve.log" | head -n 1)
kill -INT -- "-$GROUP" 2>/dev/null
deadline=$((SECONDS + 30))
while ((SECONDS < deadline)) && pgrep -g "$GROUP" >/dev/null; do sleep 0.2; done
if pgrep -g "$GROUP" >/dev/null; then
  fail "still running 30 s after Ctrl-C: $(pgrep -a -g "$GROUP")"
elif ! grep -q "moesplit-dense: stopped" "$WORK/serve.log" || ! grep -q "^moesplit-expert-worker: stopped" "$WORK/serve.log"; then
  fail "the services did not stop cleanly: $(tail -n 5 "$WORK/serve.log")"
elif [[ -z $prefix ]] || compgen -G "/dev/shm/$prefix*" >/dev/null; then
  fail "shared-memory segments of '$prefix' left: $(ls /dev/shm | grep "${prefix:-none}")"
else
  pass "Ctrl-C stopped the dense service and the worker; no /dev/shm/$prefix* left"
  GROUP=
fi
echo "quickstart: $passes passed, $failures failed"
exit $((failures > 0))
