#!/usr/bin/env bash
# Installs the dependencies, builds moesplit and generates text with it.
#   ./scripts/run.sh [MODEL.gguf] [PROMPT]
# The model comes from $1, else $MODEL; without either, `moesplit generate`
# first writes a small Qwen3-30B-A3B-shaped test model (2 layers, Q4_K_M,
# random weights) into its cache directory and uses that.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
bash scripts/build.sh --target moesplit

BUILD_DIR=${BUILD_DIR:-build}
model=${1:-${MODEL:-}}
prompt=${2:-${PROMPT:-"The quick brown fox"}}
args=(generate --prompt "$prompt" -n "${N_TOKENS:-48}")
if [[ -n "$model" ]]; then
  args+=(--model "$model")
fi
exec "$BUILD_DIR/services/cli/moesplit" "${args[@]}"
