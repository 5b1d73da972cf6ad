#!/usr/bin/env bash
# The dense service's OpenAI Responses API (docs/api.md) driven by curl and by
# the official `openai` npm client's client.responses, installed by this
# script into WORK/npm (kept between runs; the npm registry is needed the
# first time), on a tiny test model with Qwen3's chat template, and a second
# service with Qwen3.5's (whose generation prompt opens a reasoning block).
# Usage: responses_http_test.sh BIN_DIR WORK_DIR FIXTURES_DIR
set -euo pipefail
BIN=$1
WORK=$2
FIXTURES=$3
HERE=$(cd "$(dirname "$0")" && pwd)
TEMPLATE=$FIXTURES/templates/Qwen-Qwen3-0.6B.jinja
[[ -f $TEMPLATE ]] || { echo "FAIL: no $TEMPLATE" >&2; exit 1; }
mkdir -p "$WORK"
source "$HERE/dense_service.sh"
# start LOG TEMPLATE [FLAGS...]: a service on the test model; prints its URL.
start() {
  start_dense "$1" --model "$WORK/model.gguf" --ctx 2048 --threads 2 --parallel 2 \
    --chat-template-file "$2" --http-sse-heartbeat-ms 1 "${@:3}"
}

"$BIN/moesplit" make-test-model --out "$WORK/model.gguf" --name gpt-test --threads 2 >/dev/null
URL=$(start "$WORK/dense.log" "$TEMPLATE")
# (It keeps one stored response.)
THINK_URL=$(start "$WORK/dense-thinking.log" "$FIXTURES/templates/Qwen3.5-4B.jinja" --responses-store 1)

# --- curl: the whole answer, the raw event sequence, GET / DELETE, errors.
ASK='"model":"gpt-test","input":"Hi","temperature":0'
out=$(curl -sf "$URL/v1/responses" -d "{$ASK,\"max_output_tokens\":4}") || fail "POST /v1/responses"
grep -q '"object":"response"' <<<"$out" || fail "response: $out"
grep -q '"status":"incomplete","error":null,"incomplete_details":{"reason":"max_output_tokens"}' <<<"$out" \
  || fail "incomplete: $out"
id=$(sed -n 's/^{"id":"\(resp_[^"]*\)".*/\1/p' <<<"$out")
[[ -n $id ]] || fail "no id: $out"
[[ $(curl -sf "$URL/v1/responses/$id") == "$out" ]] || fail "GET /v1/responses/$id differs"
sse=$(curl -sfN "$URL/responses" -d "{$ASK,\"max_output_tokens\":4,\"stream\":true}") || fail "stream"
events=$(grep '^event: ' <<<"$sse" | sed 's/^event: //' | tr '\n' ' ')
[[ $events =~ ^response.created\ response.in_progress\ (response.output_item.added\ response.content_part.added\ (response.output_text.delta\ )+response.output_text.done\ response.content_part.done\ response.output_item.done\ )?response.incomplete\ $ ]] \
  || fail "event sequence: $events"
curl -sf -X DELETE "$URL/v1/responses/$id" | grep -q "^{\"id\":\"$id\",\"object\":\"response.deleted\",\"deleted\":true}$" \
  || fail "DELETE"
code=$(curl -s -o "$WORK/err.json" -w '%{http_code}' -X DELETE "$URL/v1/responses/$id")
[[ $code == 404 ]] || fail "second DELETE gave HTTP $code"
grep -q '"code":"response_not_found"' "$WORK/err.json" || fail "404 shape: $(cat "$WORK/err.json")"
code=$(curl -s -o "$WORK/err.json" -w '%{http_code}' "$URL/v1/responses" -d '{"model":"gpt-test","input":"x","tools":[{"type":"image_generation"}]}')
[[ $code == 400 ]] || fail "image_generation tool gave HTTP $code"
grep -q '^{"error":{"message":"Tools of type .image_generation.*","type":"invalid_request_error","param":"tools\[0\].type","code":null}}$' "$WORK/err.json" \
  || fail "400 shape: $(cat "$WORK/err.json")"
# --responses-store 1: a second response pushes the first out.
a=$(curl -sf "$THINK_URL/v1/responses" -d "{$ASK,\"max_output_tokens\":2}" | sed -n 's/^{"id":"\([^"]*\)".*/\1/p')
b=$(curl -sf "$THINK_URL/v1/responses" -d "{$ASK,\"max_output_tokens\":2}" | sed -n 's/^{"id":"\([^"]*\)".*/\1/p')
[[ -n $a && -n $b ]] || fail "no ids from the second service"
[[ $(curl -s -o /dev/null -w '%{http_code}' "$THINK_URL/v1/responses/$a") == 404 ]] || fail "--responses-store 1 kept $a"
[[ $(curl -s -o /dev/null -w '%{http_code}' "$THINK_URL/v1/responses/$b") == 200 ]] || fail "--responses-store 1 lost $b"
echo "curl: ok"

# --- openai npm client
command -v node >/dev/null 2>&1 || fail "no node (scripts/install-deps.sh installs it)"
NPM=$WORK/npm
if [[ ! -d $NPM/node_modules/openai ]]; then
  npm install --prefix "$NPM" --no-audit --no-fund --loglevel=error openai >/dev/null \
    || fail "npm install openai (needs the npm registry)"
fi
cp "$HERE/responses_client_test.mjs" "$NPM/"
node "$NPM/responses_client_test.mjs" "$URL/v1" gpt-test "$THINK_URL/v1" || fail "responses client"
