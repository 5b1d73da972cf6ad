#!/usr/bin/env bash
# The `openai` npm client's tool-calling loop against moesplit-dense on a tiny
# test model with Qwen3's chat template (tests/integration/
# openai_tools_client_test.mjs). The client comes from the cache folder
# scripts/install-deps.sh fills ($MOESPLIT_NPM_DIR, default
# ~/.cache/moesplit/npm); without it, or without node, the test is skipped
# (exit 77).
# Usage: openai_tools_test.sh BIN_DIR WORK_DIR FIXTURES_DIR
set -euo pipefail
BIN=$1
WORK=$2
FIXTURES=$3
HERE=$(cd "$(dirname "$0")" && pwd)
NPM=${MOESPLIT_NPM_DIR:-$HOME/.cache/moesplit/npm}
if ! command -v node >/dev/null 2>&1 || [[ ! -d $NPM/node_modules/openai ]]; then
  echo "SKIP: no node or no openai npm package in $NPM (run scripts/install-deps.sh)"
  exit 77
fi
TEMPLATE=$FIXTURES/templates/Qwen-Qwen3-0.6B.jinja
[[ -f $TEMPLATE ]] || { echo "FAIL: no $TEMPLATE" >&2; exit 1; }
rm -rf "$WORK"
mkdir -p "$WORK"
LOG=$WORK/dense.log
DENSE_PID=
cleanup() { if [[ -n $DENSE_PID ]]; then kill "$DENSE_PID" 2>/dev/null || true; wait "$DENSE_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- dense log:" >&2; cat "$LOG" >&2 || true; exit 1; }

"$BIN/moesplit" make-test-model --out "$WORK/model.gguf" --name tools-test --threads 2 >/dev/null
"$BIN/moesplit-dense" --model "$WORK/model.gguf" --grpc 127.0.0.1:0 --http 127.0.0.1:0 \
  --ctx 1024 --threads 2 --parallel 2 --chat-template-file "$TEMPLATE" 2>"$LOG" &
DENSE_PID=$!
for _ in $(seq 1 300); do
  grep -q ready "$LOG" 2>/dev/null && break
  kill -0 "$DENSE_PID" 2>/dev/null || break
  sleep 0.1
done
grep -q ready "$LOG" || fail "dense service did not start"
PORT=$(sed -n 's/.*http port \([0-9]*\).*/\1/p' "$LOG" | head -1)
[[ -n $PORT ]] || fail "no http port on the ready line"
# The script beside a node_modules link, so that `import 'openai'` resolves.
ln -s "$NPM/node_modules" "$WORK/node_modules"
cp "$HERE/openai_tools_client_test.mjs" "$WORK/"
node "$WORK/openai_tools_client_test.mjs" "http://127.0.0.1:$PORT/v1" || fail "openai tools client"
