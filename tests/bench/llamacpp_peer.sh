#!/usr/bin/env bash
# Runs llama.cpp's CPU build (the npm package node-llama-cpp@3.21.1, installed
# into a scratch folder outside the repository) on MODEL and prints its
# prefill speed as JSON, for side-by-side comparison with `moesplit bench`.
#   tests/bench/llamacpp_peer.sh MODEL [--threads 2] [--prompt 512] [--gen 32] [--reps 3]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
scratch=${MOESPLIT_PEER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/moesplit/node-llama-cpp}
if [[ ! -d "$scratch/node_modules/node-llama-cpp" ]]; then
  mkdir -p "$scratch"
  echo "llamacpp_peer: installing node-llama-cpp@3.21.1 into $scratch" >&2
  npm install --prefix "$scratch" --no-audit --no-fund node-llama-cpp@3.21.1 >&2
fi
cp "$here/llamacpp_peer.mjs" "$scratch/llamacpp_peer.mjs"
exec node "$scratch/llamacpp_peer.mjs" "$@"
