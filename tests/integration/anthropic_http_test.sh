#!/usr/bin/env bash
# The dense service's Anthropic Messages API (docs/api.md) driven by curl and
# by the official `@anthropic-ai/sdk` npm client, installed by this script
# into WORK/npm (kept between runs; the npm registry is needed the first
# time), on a tiny test model with Qwen3's chat template, with an API key
# (the SDK sends it as x-api-key).
# Usage: anthropic_http_test.sh BIN_DIR WORK_DIR FIXTURES_DIR
set -euo pipefail
BIN=$1
WORK=$2
FIXTURES=$3
HERE=$(cd "$(dirname "$0")" && pwd)
TEMPLATE=$FIXTURES/templates/Qwen-Qwen3-0.6B.jinja
[[ -f $TEMPLATE ]] || { echo "FAIL: no $TEMPLATE" >&2; exit 1; }
mkdir -p "$WORK"
source "$HERE/dense_service.sh"

KEY=anthropic-test-key-0123456789
printf '%s\n' "$KEY" >"$WORK/keys"
"$BIN/moesplit" make-test-model --out "$WORK/model.gguf" --name claude-test --threads 2 >/dev/null
URL=$(start_dense "$WORK/dense.log" --model "$WORK/model.gguf" --ctx 2048 --threads 2 --parallel 2 \
  --chat-template-file "$TEMPLATE" --http-sse-heartbeat-ms 1 --api-key-file "$WORK/keys")

# --- curl: x-api-key and Bearer, Anthropic's error shape, the event stream.
ASK='"model":"claude-test","messages":[{"role":"user","content":"Hi"}]'
code=$(curl -s -o "$WORK/err.json" -w '%{http_code}' "$URL/v1/messages" -d "{$ASK,\"max_tokens\":4}")
[[ $code == 401 ]] || fail "no key gave HTTP $code"
grep -q '^{"type":"error","error":{"type":"authentication_error","message":' "$WORK/err.json" \
  || fail "401 shape: $(cat "$WORK/err.json")"
out=$(curl -sf "$URL/v1/messages" -H "x-api-key: $KEY" -H 'anthropic-version: 2023-06-01' \
  -d "{$ASK,\"max_tokens\":4,\"temperature\":0}") || fail "x-api-key"
grep -q '"type":"message"' <<<"$out" || fail "message: $out"
grep -q '"stop_reason":"max_tokens"' <<<"$out" || fail "stop_reason: $out"
curl -sf "$URL/v1/messages/count_tokens" -H "Authorization: Bearer $KEY" -d "{$ASK}" \
  | grep -q '^{"input_tokens":[1-9][0-9]*}$' || fail "count_tokens"
code=$(curl -s -o "$WORK/err.json" -w '%{http_code}' "$URL/v1/messages" -H "x-api-key: $KEY" \
  -d "{$ASK}")
[[ $code == 400 ]] || fail "no max_tokens gave HTTP $code"
grep -q '"type":"invalid_request_error","message":"max_tokens: Field required"' "$WORK/err.json" \
  || fail "400 shape: $(cat "$WORK/err.json")"
sse=$(curl -sfN "$URL/v1/messages" -H "x-api-key: $KEY" \
  -d "{$ASK,\"max_tokens\":4,\"temperature\":0,\"stream\":true}") || fail "stream"
events=$(grep '^event: ' <<<"$sse" | sed 's/^event: //' | tr '\n' ' ')
[[ $events =~ ^message_start\ ping\ (content_block_start\ (content_block_delta\ )+content_block_stop\ )?message_delta\ message_stop\ $ ]] \
  || fail "event sequence: $events"
# Claude Code's ?beta=true query; an unknown path under /v1/messages is 404 in
# Anthropic's shape.
curl -sf "$URL/v1/messages?beta=true" -H "x-api-key: $KEY" -H 'anthropic-beta: x' \
  -d "{$ASK,\"max_tokens\":2}" | grep -q '"type":"message"' || fail "?beta=true"
code=$(curl -s -o "$WORK/err.json" -w '%{http_code}' "$URL/v1/messages/batches" -H "x-api-key: $KEY" -d '{}')
[[ $code == 404 ]] || fail "/v1/messages/batches gave HTTP $code"
grep -q '"type":"not_found_error"' "$WORK/err.json" || fail "404 shape: $(cat "$WORK/err.json")"
# llama-server's /v1/health is open like /health; its /tokenize needs the key.
curl -sf "$URL/v1/health" | grep -q '"ok"' || fail "/v1/health without a key"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/tokenize" -d '{"content":"x"}')
[[ $code == 401 ]] || fail "/tokenize without a key gave HTTP $code"
echo "curl: ok"

# --- @anthropic-ai/sdk
command -v node >/dev/null 2>&1 || fail "no node (scripts/install-deps.sh installs it)"
NPM=$WORK/npm
if [[ ! -d $NPM/node_modules/@anthropic-ai/sdk ]]; then
  npm install --prefix "$NPM" --no-audit --no-fund --loglevel=error @anthropic-ai/sdk >/dev/null \
    || fail "npm install @anthropic-ai/sdk (needs the npm registry)"
fi
# A second service with Qwen3.5's template, whose generation prompt opens a
# reasoning block: the answer comes as thinking blocks.
THINK_URL=$(start_dense "$WORK/dense-thinking.log" --model "$WORK/model.gguf" --ctx 2048 \
  --threads 2 --parallel 1 --chat-template-file "$FIXTURES/templates/Qwen3.5-4B.jinja" \
  --api-key-file "$WORK/keys")
cp "$HERE/anthropic_client_test.mjs" "$NPM/"
node "$NPM/anthropic_client_test.mjs" "$URL" "$KEY" claude-test "$THINK_URL" || fail "anthropic client"
