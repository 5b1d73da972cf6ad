#!/usr/bin/env bash
# Installs the dependencies, builds moesplit and runs the main job: an
# expert-worker and the dense service on this host (shared-memory transport),
# one prompt through the dense service's gRPC API, then both stop.
#   ./scripts/run.sh [MODEL.gguf] [PROMPT]
# The model comes from $1, else $MODEL; without either, `moesplit up` first
# writes a small Qwen3-30B-A3B-shaped test model (2 layers, Q4_K_M, random
# weights) into its cache directory and uses that. WORKERS=N splits the
# layers over N workers; N_TOKENS sets the length.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
bash scripts/build.sh --target moesplit

BUILD_DIR=${BUILD_DIR:-build}
model=${1:-${MODEL:-}}
prompt=${2:-${PROMPT:-"The quick brown fox"}}
args=(up --prompt "$prompt" -n "${N_TOKENS:-48}" --workers "${WORKERS:-1}"
      --grpc "127.0.0.1:${GRPC_PORT:-50551}")
if [[ -n "$model" ]]; then
  args+=(--model "$model")
fi
exec "$BUILD_DIR/bin/moesplit" "${args[@]}"
