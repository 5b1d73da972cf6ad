#!/usr/bin/env bash
# Builds the GGUF fuzzer with clang (ASan+UBSan+libFuzzer) in its own build tree
# and runs it for a few seconds over a seed corpus cut from the fixtures.
# usage: run_fuzz.sh SOURCE_DIR BUILD_DIR SECONDS
set -euo pipefail
src=$1 build=$2 secs=${3:-30}
fixtures=${MOESPLIT_FIXTURES_DIR:-$src/../shared/fixtures}
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DMOESPLIT_FUZZ=ON -DMOESPLIT_CUDA=OFF >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" --target gguf_fuzz -j"$(nproc)" >"$build.build.log" 2>&1 ||
  { tail -50 "$build.build.log"; exit 1; }
corpus=$build/corpus
mkdir -p "$corpus"
for f in "$fixtures"/models/*.gguf "$fixtures"/vocab/*.gguf; do
  [ -f "$f" ] && head -c 4096 "$f" >"$corpus/$(basename "$f").head"
done
# formats.gguf is small enough to seed whole: tensors and data included.
cp "$fixtures/models/formats.gguf" "$corpus/formats.gguf" 2>/dev/null || true
"$build/tests/fuzz/gguf_fuzz" -max_total_time="$secs" -max_len=300000 \
  -rss_limit_mb=2048 -print_final_stats=1 "$corpus" 2>&1 | tail -15
