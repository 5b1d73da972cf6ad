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
source "$HERE/dense_service.sh"

"$BIN/moesplit" make-test-model --out "$WORK/model.gguf" --name tools-test --threads 2 >/dev/null
URL=$(start_dense "$WORK/dense.log" --model "$WORK/model.gguf" --ctx 1024 --threads 2 \
  --parallel 2 --chat-template-file "$TEMPLATE")
# The script beside a node_modules link, so that `import 'openai'` resolves.
ln -s "$NPM/node_modules" "$WORK/node_modules"
cp "$HERE/openai_tools_client_test.mjs" "$WORK/"
node "$WORK/openai_tools_client_test.mjs" "$URL/v1" || fail "openai tools client"
