#!/usr/bin/env bash
# Runs ON the GPU machine, from the repo root, with gpu-pack/ (made by
# tests/gpu/package.sh) carried along:
#   1. the CUDA tests: block decoders, device, backend consistency (every op
#      vs the CPU reference, the DeltaNet ops included), the GPU forward vs
#      llama.cpp's fixture logits (qwen3moe, qwen2moe, qwen35moe, gpt-oss
#      and deepseek2: the package carries qwen35moe-tiny-f16 and -q8_0 and
#      deepseek2-tiny-f16 and -q8_0 among others; the summary says
#      whether they ran) and vs the CPU forward;
#   2. gpu_bench on a Qwen3-30B-A3B-shaped Q4_K_M model generated into
#      /dev/shm (--gpu-memory 8GiB --ctx 65536 --kv-type q8_0), then, with
#      the time left, on a Qwen3.5-35B-A3B-shaped one (40 layers: 30 gated
#      DeltaNet + 10 gated attention; the same options), then on a
#      gpt-oss-120b-shaped one cut to 6 of its 36 layers (MXFP4 experts,
#      --ctx 131072 f16: the sliding-window rings).
# Writes a summary to $OUT/summary.txt (and logs to $OUT/logs/) when $OUT is
# set, and prints it. Without a GPU the tests skip and the bench reports it;
# a summary is written either way. Budget: under 8 minutes.
set -u
cd "$(dirname "$0")/../.."
PKG=${MOESPLIT_GPU_PKG:-gpu-pack}
# The ~18 GB bench model goes to /dev/shm when it has room (RAM), else /tmp.
free_gib() { df -P -B1G "$1" 2>/dev/null | awk 'NR==2{print $4}'; }
MODEL_DIR=/dev/shm
[ "$(free_gib /dev/shm || echo 0)" -ge 22 ] 2>/dev/null || MODEL_DIR=/tmp
[ -f /dev/shm/moesplit-qwen3-30b-a3b-q4_k_m.gguf ] && MODEL_DIR=/dev/shm
MODEL=${MOESPLIT_BENCH_MODEL:-$MODEL_DIR/moesplit-qwen3-30b-a3b-q4_k_m.gguf}
MODEL35=${MOESPLIT_BENCH_MODEL35:-$MODEL_DIR/moesplit-qwen3.5-35b-a3b-q4_k_m.gguf}
MODELOSS=${MOESPLIT_BENCH_MODELOSS:-$MODEL_DIR/moesplit-gpt-oss-120b-6l-mxfp4.gguf}
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/logs"
  LOGS=$OUT/logs
else
  LOGS=$(mktemp -d)
fi
SUMMARY=${OUT:-$LOGS}/summary.txt
: > "$SUMMARY"
T0=$(date +%s)
say() { echo "$*" | tee -a "$SUMMARY"; }
finish() {
  say "total_seconds: $(( $(date +%s) - T0 ))"
  echo
  echo "===== summary ($SUMMARY) ====="
  cat "$SUMMARY"
}
trap finish EXIT

say "moesplit GPU run $(date -u +%FT%TZ)"
if [ ! -d "$PKG/bin" ]; then
  say "FAIL: $PKG/bin missing: run bash tests/gpu/package.sh first and carry $PKG"
  exit 1
fi
sed -n 's/^/package /p' "$PKG/MANIFEST.txt" | head -3 | tee -a "$SUMMARY"
export LD_LIBRARY_PATH="$PWD/$PKG/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export MOESPLIT_FIXTURES_DIR="$PWD/$PKG/fixtures"
export TEST_TMPDIR=${TEST_TMPDIR:-/tmp}
if command -v nvidia-smi >/dev/null 2>&1; then
  say "gpu: $(nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 | head -1)"
else
  say "gpu: nvidia-smi not found"
fi
say "cpu: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM"

# run_test NAME SECONDS: one gtest binary; counts and the failures go to the summary.
run_test() {
  local name=$1 limit=$2 start rc log
  start=$(date +%s)
  log=$LOGS/$name.log
  timeout "$limit" "$PKG/bin/$name" --gtest_color=no > "$log" 2>&1
  rc=$?
  count() { grep -cE "^\[ *$1 *\] .*\([0-9]+ ms\)\$" "$log"; }
  say "$name: rc=$rc passed=$(count OK) failed=$(count FAILED) skipped=$(count SKIPPED) seconds=$(( $(date +%s) - start ))$([ $rc -eq 124 ] && echo ' TIMEOUT')"
  grep -E '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log" | head -20 | sed 's/^/    /' | tee -a "$SUMMARY"
  if [ $rc -ne 0 ]; then grep -E 'Failure|error|Expected|Which is|: got' "$log" | head -15 | sed 's/^/      /' | tee -a "$SUMMARY"; fi
}

run_test cuda_block_codec_test 60
run_test cuda_device_test 60
run_test cuda_ops_test 120
run_test cuda_forward_test 180
run_test sequence_runner_test 60
grep -E 'case [0-9]|prefill:|KV Q|expert cache|dynamic cache|streamed|switch-over' "$LOGS/cuda_forward_test.log" | sed 's/^/    /' | tee -a "$SUMMARY"
# The qwen35moe fixtures and tests: ran (OK / FAILED) or not (skipped, absent).
# gpt-oss: fixtures (if packaged), sinks + windows, rings, the GPU experts.
for t in CudaOracleTest.MatchesLlamaCppLogits/gptoss_tiny_f16 \
         CudaOracleTest.MatchesLlamaCppLogits/gptoss_tiny_mxfp4_moe CudaVsCpuTest.LogitsMatchTheCpuForward/gpt_oss \
         SlidingWindowRingsKeepTheWindowOnly HitsMatchTheCpuExperts; do
  say "gpt-oss $t: $(grep -E "^\[ *(OK|FAILED|SKIPPED) *\] [^ ]*$t" "$LOGS/cuda_forward_test.log" | sed -E 's/^\[ *([A-Z]+) *\].*/\1/' | sort | uniq -c | tr -s ' \n' ' ' || true)"
done
for t in SlidingWindowAndSinksMatchTheCpu TopKSoftmaxRouterMatchesTheCpu; do
  say "gpt-oss $t: $(grep -E "^\[ *(OK|FAILED|SKIPPED) *\] [^ ]*$t" "$LOGS/cuda_ops_test.log" | sed -E 's/^\[ *([A-Z]+) *\].*/\1/' | sort | uniq -c | tr -s ' \n' ' ' || true)"
done
# deepseek2: its fixtures (MLA, dense layers, the grouped router) and the MLA ops.
for t in CudaOracleTest.MatchesLlamaCppLogits/deepseek2_tiny_f16 \
         CudaOracleTest.MatchesLlamaCppLogits/deepseek2_tiny_q8_0; do
  say "deepseek2 $t: $(grep -E "^\[ *(OK|FAILED|SKIPPED) *\] [^ ]*$t" "$LOGS/cuda_forward_test.log" | sed -E 's/^\[ *([A-Z]+) *\].*/\1/' | sort | uniq -c | tr -s ' \n' ' ' || true)"
done
for t in GroupedMatVecEqualsMatVecPerGroup StridedNormNormRopeAndRowCopiesMatchTheCpu \
         GroupedRouterMatchesTheCpu LatentAttentionMatchesTheCpu; do
  say "deepseek2 $t: $(grep -E "^\[ *(OK|FAILED|SKIPPED) *\] [^ ]*$t" "$LOGS/cuda_ops_test.log" | sed -E 's/^\[ *([A-Z]+) *\].*/\1/' | sort | uniq -c | tr -s ' \n' ' ' || true)"
done
for t in CudaOracleTest.MatchesLlamaCppLogits/qwen35moe_tiny_f16 \
         CudaOracleTest.MatchesLlamaCppLogits/qwen35moe_tiny_q8_0 CudaHybridTest CudaVsCpuTest.LogitsMatchTheCpuForward/qwen35moe; do
  say "qwen35moe $t: $(grep -E "^\[ *(OK|FAILED|SKIPPED) *\] [^ ]*$t" "$LOGS/cuda_forward_test.log" | sed -E 's/^\[ *([A-Z]+) *\].*/\1/' | sort | uniq -c | tr -s ' \n' ' ' || true)"
done

# Benchmark: generate the model once (kept in /dev/shm for a rerun), then run.
left=$(( 450 - ($(date +%s) - T0) ))
if [ $left -lt 60 ]; then
  say "gpu_bench: skipped, only ${left}s left of the 8-minute budget"
  exit 0
fi
# Half of what is left for the qwen3moe bench, the rest for qwen35moe.
first=$(( left / 2 > 200 ? left / 2 : (left > 200 ? 200 : left) ))
say "gpu_bench: model $MODEL, ${first}s allowed"
timeout "$first" "$PKG/bin/gpu_bench" --model "$MODEL" --generate --gpu-memory 8GiB \
  --ctx 65536 --kv-type q8_0 --prompt 512 --decode 32 > "$LOGS/gpu_bench.log" 2>&1
rc=$?
sed 's/^/    /' "$LOGS/gpu_bench.log" | tail -40 | tee -a "$SUMMARY"
say "gpu_bench: rc=$rc$([ $rc -eq 124 ] && echo ' TIMEOUT')"

left=$(( 450 - ($(date +%s) - T0) ))
if [ $left -lt 60 ]; then
  say "gpu_bench qwen35moe: skipped, only ${left}s left of the 8-minute budget"
  exit 0
fi
# One of the bench models in memory at a time when /dev/shm is tight.
if [ "$MODEL_DIR" = /dev/shm ] && [ "$(free_gib /dev/shm || echo 0)" -lt 22 ]; then
  rm -f "$MODEL"
fi
second=$(( left * 2 / 3 > 150 ? left * 2 / 3 : (left > 150 ? 150 : left) ))
say "gpu_bench qwen35moe: model $MODEL35, ${second}s allowed"
timeout "$second" "$PKG/bin/gpu_bench" --model "$MODEL35" --generate --preset qwen3.5-35b-a3b \
  --gpu-memory 8GiB --ctx 65536 --kv-type q8_0 --prompt 512 --decode 32 \
  > "$LOGS/gpu_bench_qwen35moe.log" 2>&1
rc=$?
sed 's/^/    /' "$LOGS/gpu_bench_qwen35moe.log" | tail -40 | tee -a "$SUMMARY"
say "gpu_bench qwen35moe: rc=$rc$([ $rc -eq 124 ] && echo ' TIMEOUT')"

left=$(( 450 - ($(date +%s) - T0) ))
if [ $left -lt 45 ]; then
  say "gpu_bench gpt-oss-120b: skipped, only ${left}s left of the 8-minute budget"
  exit 0
fi
if [ "$MODEL_DIR" = /dev/shm ] && [ "$(free_gib /dev/shm || echo 0)" -lt 22 ]; then
  rm -f "$MODEL35"
fi
say "gpu_bench gpt-oss-120b (6 layers): model $MODELOSS, ${left}s allowed"
timeout "$left" "$PKG/bin/gpu_bench" --model "$MODELOSS" --generate --preset gpt-oss-120b \
  --layers 6 --gpu-memory 8GiB --ctx 131072 --kv-type f16 --prompt 512 --decode 32 \
  > "$LOGS/gpu_bench_gptoss.log" 2>&1
rc=$?
sed 's/^/    /' "$LOGS/gpu_bench_gptoss.log" | tail -40 | tee -a "$SUMMARY"
say "gpu_bench gpt-oss-120b: rc=$rc$([ $rc -eq 124 ] && echo ' TIMEOUT')"
