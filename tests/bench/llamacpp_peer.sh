#!/usr/bin/env bash
# llama.cpp's own benchmark (`llama-bench`, built natively: GGML_NATIVE=ON,
# so AVX-512/VNNI where the CPU has them) on MODEL, for side-by-side figures
# with `moesplit bench`. The source is the release node-llama-cpp@3.21.1
# ships (node_modules/node-llama-cpp/llama/gitRelease.bundle, the same
# llama.cpp that made the oracle fixtures), cloned and built once into a
# cache folder outside the repository ($MOESPLIT_PEER_DIR, default
# ~/.cache/moesplit). Prints one JSON object:
#   {"prefill_tok_s", "decode_tok_s", "depth", "threads", "llama_bench": [...]}
#
#   tests/bench/llamacpp_peer.sh MODEL [--threads 2] [--prompt 512] [--gen 128]
#                                [--reps 3] [--depth 0]
# `--build-only` builds the peer and exits; `--build-server` also builds
# llama.cpp's `llama-server` the same way and prints its path (for
# serving_side_by_side.sh).
#
# MOESPLIT_PEER_NO_AMX=1 builds (into build-native-noamx) with AMX switched
# off (-mno-amx-*: still -march=native otherwise). On a 2-vCPU Intel Xeon VM
# with AMX (12-07), this release's AMX matmul died in every run of a Q8_0 or
# Q4_0 model (SIGILL on `tilezero` in a compute thread, or SIGSEGV, although
# the kernel granted XTILEDATA and keeps tile state across switches), so the
# peer can only be measured there without it.
set -euo pipefail
dir=${MOESPLIT_PEER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/moesplit}
src=$dir/llama.cpp
build=$src/build-native
cflags=
if [[ "${MOESPLIT_PEER_NO_AMX:-0}" == 1 ]]; then
  build=$src/build-native-noamx
  cflags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
bin=$build/bin/llama-bench
server=$build/bin/llama-server

build_peer() {
  if [[ -x "$bin" ]]; then return; fi
  mkdir -p "$dir"
  if [[ ! -d "$src/.git" ]]; then
    local npm_dir=$dir/node-llama-cpp
    if [[ ! -f "$npm_dir/package/llama/gitRelease.bundle" ]]; then
      mkdir -p "$npm_dir"
      echo "llamacpp_peer: fetching node-llama-cpp@3.21.1 (for llama.cpp's source)" >&2
      (cd "$npm_dir" && npm pack --silent node-llama-cpp@3.21.1 >/dev/null &&
       tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle)
    fi
    git clone -q "$npm_dir/package/llama/gitRelease.bundle" "$src"
  fi
  echo "llamacpp_peer: building llama-bench (GGML_NATIVE=ON${cflags:+, $cflags}) in $build" >&2
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$cflags" -DCMAKE_CXX_FLAGS="$cflags" \
    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >&2
  cmake --build "$build" -j"$(nproc)" --target llama-bench >&2
}

model=${1:?usage: llamacpp_peer.sh MODEL [--threads T] [--prompt N] [--gen N] [--reps R] [--depth D]}
if [[ "$model" == --build-only ]]; then build_peer; exit 0; fi
if [[ "$model" == --build-server ]]; then
  build_peer
  if [[ ! -x "$server" ]]; then
    echo "llamacpp_peer: building llama-server (GGML_NATIVE=ON${cflags:+, $cflags}) in $build" >&2
    cmake --build "$build" -j"$(nproc)" --target llama-server >&2
  fi
  echo "$server"
  exit 0
fi
shift
threads=2 prompt=512 gen=128 reps=3 depth=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --gen) gen=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    *) echo "llamacpp_peer: unknown flag $1" >&2; exit 2 ;;
  esac
done
build_peer
# CPU only (no GPU layers), memory-mapped as moesplit maps it; one JSON array.
# A run that fails says so, with llama-bench's last words and how it ended.
err=$(mktemp)
trap 'rm -f "$err"' EXIT
rc=0
out=$("$bin" -m "$model" -t "$threads" -p "$prompt" -n "$gen" -d "$depth" -r "$reps" \
      -ngl 0 -o json 2>"$err") || rc=$?
if [[ $rc -ne 0 ]]; then
  tail -5 "$err" >&2
  how="exit status $rc"
  if [[ $rc -gt 128 ]]; then how="signal $(kill -l $((rc - 128)))"; fi
  echo "llamacpp_peer: llama-bench failed ($how) on $model" >&2
  if [[ $rc -gt 128 && -z "$cflags" ]] && grep -qw amx_int8 /proc/cpuinfo 2>/dev/null; then
    echo "llamacpp_peer: this CPU has AMX; MOESPLIT_PEER_NO_AMX=1 builds the peer without it" >&2
  fi
  exit 1
fi
python3 - "$out" "$threads" "$depth" <<'EOF'
import json, sys
rows = json.loads(sys.argv[1])
pp = [r["avg_ts"] for r in rows if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0]
tg = [r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
print(json.dumps({"prefill_tok_s": pp[0] if pp else None, "decode_tok_s": tg[0] if tg else None,
                  "depth": int(sys.argv[3]), "threads": int(sys.argv[2]),
                  "llama_bench": [{k: r.get(k) for k in ("n_prompt", "n_gen", "n_depth",
                                                          "avg_ts", "stddev_ts", "build_commit")}
                                  for r in rows]}))
EOF
