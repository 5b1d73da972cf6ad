#!/usr/bin/env bash
# The dense service's OpenAI-compatible HTTP API driven by curl and by the
# official `openai` npm client (installed into a scratch folder under WORK,
# outside the repository).
# Usage: openai_http_test.sh BIN_DIR WORK_DIR
set -euo pipefail
BIN=$1
WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
source "$HERE/dense_service.sh"

"$BIN/moesplit" make-test-model --out "$WORK/model.gguf" --name http-test --threads 2 >/dev/null
# --http-sse-heartbeat-ms 1: a `: ping` comment line whenever a stream is
# silent for 1 ms (between tokens too), which curl's and the npm client's
# streams below must pass over. Whether a ping falls inside a 4-token stream
# depends on the machine's speed, so it is not asserted here: HeartbeatTest
# (tests/reliability) holds a stream in the queue and counts its pings.
URL=$(start_dense "$WORK/dense.log" --model "$WORK/model.gguf" --ctx 512 --threads 2 --parallel 4 \
  --http-sse-heartbeat-ms 1)

# --- curl
curl -sf "$URL/health" | grep -q '"ok"' || fail "/health"
curl -sf "$URL/v1/models" | grep -q '"id":"http-test"' || fail "/v1/models"
out=$(curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Hello","max_tokens":5,"temperature":0}')
echo "$out" | grep -q '"completion_tokens":5' || fail "completion: $out"
sse=$(curl -sfN "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}')
[[ $(echo "$sse" | grep -c '^data: ') -ge 6 ]] || fail "too few SSE events: $sse"
[[ $(echo "$sse" | grep '^data: ' | tail -1) == 'data: [DONE]' ]] || fail "stream does not end with [DONE]"
echo "$sse" | grep -q '"usage":{"prompt_tokens"' || fail "no usage chunk"
code=$(curl -s -o "$WORK/err.json" -w '%{http_code}' "$URL/v1/completions" -d '{"prompt":"x","top_p":2}')
[[ $code == 400 ]] || fail "top_p 2 gave HTTP $code"
grep -q '"type":"invalid_request_error"' "$WORK/err.json" || fail "error shape: $(cat "$WORK/err.json")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/nothing")
[[ $code == 404 ]] || fail "unknown path gave HTTP $code"
# Read the whole scrape first: `curl | grep -q` under pipefail fails when grep
# stops reading early and curl gets SIGPIPE.
metrics=$(curl -sf "$URL/metrics") || fail "/metrics"
grep -q '^moesplit_requests_total{api="http",endpoint="completions",outcome="ok"} [1-9]' <<<"$metrics" \
  || fail "/metrics does not count the completion"
echo "curl: ok"

# --- llama-server's routes: the un-prefixed aliases, /v1/health, /tokenize,
# /detokenize (a round trip), /apply-template (the prompt the chat runs: its
# tokens are the chat's prompt_tokens).
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
curl -sf "$URL/v1/health" | grep -q '"ok"' || fail "/v1/health"
curl -sf "$URL/models" | grep -q '"id":"http-test"' || fail "/models"
CHAT='{"messages":[{"role":"user","content":"Hi there"}],"max_tokens":4,"temperature":0}'
a=$(curl -sf "$URL/chat/completions" -d "$CHAT" | json 'd["choices"][0]["message"]["content"]') \
  || fail "/chat/completions"
b=$(curl -sf "$URL/v1/chat/completions" -d "$CHAT" | json 'd["choices"][0]["message"]["content"]')
[[ $a == "$b" ]] || fail "/chat/completions gave '$a', /v1/chat/completions '$b'"
curl -sf "$URL/completions" -d '{"prompt":"Hello","max_tokens":5,"temperature":0}' \
  | grep -q '"completion_tokens":5' || fail "/completions"
ids=$(curl -sf "$URL/tokenize" -d '{"content":"Hello world, again"}' | json 'json.dumps(d["tokens"])') \
  || fail "/tokenize"
[[ $ids == \[[0-9]* ]] || fail "/tokenize: $ids"
back=$(curl -sf "$URL/detokenize" -d "{\"tokens\":$ids}" | json 'd["content"]') || fail "/detokenize"
[[ $back == "Hello world, again" ]] || fail "/detokenize gave '$back'"
pieces=$(curl -sf "$URL/tokenize" -d '{"content":"Hi","with_pieces":true}' \
  | json '"".join(p["piece"] for p in d["tokens"])')
[[ $pieces == Hi ]] || fail "/tokenize with_pieces: $pieces"
code=$(curl -s -o "$WORK/err.json" -w '%{http_code}' "$URL/detokenize" -d '{"tokens":[-1]}')
[[ $code == 400 ]] || fail "/detokenize of id -1 gave HTTP $code"
prompt=$(curl -sf "$URL/apply-template" -d "$CHAT" | json 'json.dumps({"content": d["prompt"], "add_special": True})') \
  || fail "/apply-template"
n=$(curl -sf "$URL/tokenize" -d "$prompt" | json 'len(d["tokens"])')
want=$(curl -sf "$URL/v1/chat/completions" -d "$CHAT" | json 'd["usage"]["prompt_tokens"]')
[[ $n == "$want" ]] || fail "/apply-template's prompt has $n tokens, the chat ran $want"
echo "llama-server routes: ok"

# --- a conversation ending with the assistant's message is continued (no
# end of turn after it), as llama-server renders it, in /apply-template,
# render-template and the prompt the chat runs; continue_final_message with
# add_generation_prompt is a 400.
PREFILL='[{"role":"user","content":"Hi there"},{"role":"assistant","content":"Sure, the answer is"}]'
p1=$(curl -sf "$URL/apply-template" -d "{\"messages\":$PREFILL}" | json 'd["prompt"]') || fail "/apply-template prefill"
[[ $p1 == *"Sure, the answer is" ]] || fail "prefill: the turn is closed: '$p1'"
p2=$(curl -sf "$URL/apply-template" \
  -d "{\"messages\":$PREFILL,\"continue_final_message\":true,\"add_generation_prompt\":false}" | json 'd["prompt"]')
[[ $p2 == "$p1" ]] || fail "continue_final_message true rendered '$p2', the prefill '$p1'"
echo "$PREFILL" >"$WORK/prefill.json"
p3=$("$BIN/moesplit" render-template --model "$WORK/model.gguf" --messages-json "$WORK/prefill.json")
[[ $p3 == "$p1" ]] || fail "render-template rendered '$p3', /apply-template '$p1'"
code=$(curl -s -o "$WORK/err.json" -w '%{http_code}' "$URL/apply-template" \
  -d "{\"messages\":$PREFILL,\"continue_final_message\":true}")
[[ $code == 400 ]] || fail "continue_final_message with add_generation_prompt gave HTTP $code"
grep -q '"param":"continue_final_message"' "$WORK/err.json" || fail "error: $(cat "$WORK/err.json")"
grep -q 'cannot set both add_generation_prompt and continue_final_message' "$WORK/err.json" \
  || fail "error: $(cat "$WORK/err.json")"
n=$(curl -sf "$URL/tokenize" -d "$(json 'json.dumps({"content": d["prompt"], "add_special": True})' \
  <<<"{\"prompt\": $(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$p1")}")" \
  | json 'len(d["tokens"])')
want=$(curl -sf "$URL/v1/chat/completions" -d "{\"messages\":$PREFILL,\"max_tokens\":2}" \
  | json 'd["usage"]["prompt_tokens"]')
[[ $n == "$want" ]] || fail "the prefill's prompt has $n tokens, the chat ran $want"
echo "prefill: ok"

# --- openai npm client
NPM=$WORK/npm
if [[ ! -d $NPM/node_modules/openai ]]; then
  npm install --prefix "$NPM" --no-audit --no-fund --loglevel=error openai >/dev/null \
    || fail "npm install openai (needs the npm registry)"
fi
cp "$HERE/openai_client_test.mjs" "$NPM/"
node "$NPM/openai_client_test.mjs" "$URL/v1" || fail "openai client"
