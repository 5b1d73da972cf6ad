#!/usr/bin/env bash
# End-to-end checks of the real `moesplit` binary (run by ctest):
#   1. make-test-model writes a Qwen3-30B-A3B-shaped 2-layer Q4_K_M model;
#      inspect describes it; generate runs on it (exit 0, non-empty text,
#      speeds on stderr; seeded sampling reproducible); tokenize and logits
#      produce what their contracts say.
#   2. the error table: each bad input exits 2 with ONE stderr line
#      "moesplit: <message>" containing the expected text.
# Usage: cli_test.sh MOESPLIT_BINARY WORK_DIR FIXTURES_DIR
set -uo pipefail

BIN=$1
WORK=$2
FIXTURES=$3
rm -rf "$WORK"
mkdir -p "$WORK"
[[ -n "${KEEP_WORK:-}" ]] || trap 'rm -rf "$WORK"' EXIT

failures=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }

# run NAME -- ARGS...: runs the binary, keeps stdout/stderr/status.
run() {
  local name=$1
  shift
  [[ ${1:-} == "--" ]] && shift
  "$BIN" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  echo $? >"$WORK/$name.rc"
}
rc() { cat "$WORK/$1.rc"; }

# ---- 1. a Qwen3-30B-A3B-shaped 2-layer Q4_K_M model -----------------------
MODEL=$WORK/qwen3-30b-a3b-2l.gguf
run make -- make-test-model --arch qwen3moe --preset qwen3-30b-a3b --layers 2 \
  --type Q4_K_M --out "$MODEL"
# Every shape flag, as the README spells them (qwen2moe, with a shared expert).
SMALL=$WORK/small-qwen2moe.gguf
run make2 -- make-test-model --arch qwen2moe --layers 3 --d 128 --heads 4 --kv-heads 2 \
  --head-dim 32 --experts 6 --top-k 3 --expert-ffn 96 --shared-ffn 160 --vocab 400 \
  --ctx 512 --type Q8_0 --seed 9 --out "$SMALL"
run inspect2 -- inspect "$SMALL"
if [[ $(rc make2) == 0 && $(rc inspect2) == 0 ]] &&
   grep -Eq "n_embd +128" "$WORK/inspect2.out" && grep -Eq "n_layer +3" "$WORK/inspect2.out" &&
   grep -Eq "^  expert_ffn +96" "$WORK/inspect2.out" &&
   grep -Eq "n_expert +6" "$WORK/inspect2.out" && grep -Eq "n_expert_used +3" "$WORK/inspect2.out" &&
   grep -Eq "head_dim k/v +32 / 32" "$WORK/inspect2.out" && grep -Eq "n_vocab +400" "$WORK/inspect2.out" &&
   grep -Eq "shared_expert_ffn +160" "$WORK/inspect2.out" && grep -Eq "n_ctx_train +512" "$WORK/inspect2.out"; then
  pass "make-test-model with every shape flag"; else
  fail "make-test-model shape flags: $(cat "$WORK/make2.err" "$WORK/inspect2.out" "$WORK/inspect2.err")"; fi
if [[ $(rc make) == 0 && -s "$MODEL" ]]; then pass "make-test-model"; else
  fail "make-test-model: $(cat "$WORK/make.err")"; fi

run inspect -- inspect "$MODEL"
if [[ $(rc inspect) == 0 ]] && grep -q "architecture:  qwen3moe" "$WORK/inspect.out" &&
   grep -q "routed_experts" "$WORK/inspect.out" && grep -q "Q6_K" "$WORK/inspect.out" &&
   grep -q "n_expert .*128" "$WORK/inspect.out"; then pass "inspect"; else
  fail "inspect: $(cat "$WORK/inspect.out" "$WORK/inspect.err")"; fi

# The GPU memory plan (no GPU needed): the 2-layer model from its file, and
# the full Qwen3-30B-A3B shape at Q4_K_M from hyper-parameters alone.
run plan -- plan --model "$MODEL" --gpu-memory 8GiB --ctx 65536 --kv-type q8_0 --parallel 1
# KV: 2 layers x 4 KV heads x (128 + 128) q8_0 = 2 x 1088 bytes per position, in
# 256 pages of 256 positions (+ a 4-byte block-table entry each).
if [[ $(rc plan) == 0 ]] && grep -Eq "KV cache +142607360 " "$WORK/plan.out" &&
   grep -q "expert cache" "$WORK/plan.out" && grep -q "routed experts" "$WORK/plan.out"; then
  pass "plan --model"; else fail "plan --model: $(cat "$WORK/plan.out" "$WORK/plan.err")"; fi
run plan30 -- plan --preset qwen3-30b-a3b --type Q4_K_M --gpu-memory 8GiB --ctx 65536 --kv-type q8_0 --parallel 1
if [[ $(rc plan30) == 0 ]] && grep -Eq "KV cache +3422553088 " "$WORK/plan30.out" &&
   grep -Eq "dense weights +822523904 " "$WORK/plan30.out" &&
   grep -q "1294 experts of 3059712 bytes = 26 per layer of 128" "$WORK/plan30.out"; then
  pass "plan --preset qwen3-30b-a3b (64K, q8_0, 8 GiB)"; else
  fail "plan --preset: $(cat "$WORK/plan30.out" "$WORK/plan30.err")"; fi
# DeepSeek-V3 (MLA): the latent KV, 61 layers x (512 + 64) f16 = 70272 bytes
# per position; the routed experts on two 256 GiB workers by layer ranges.
# The prefix cache's device tier comes out of the expert cache (1 GiB: 943
# slots left of 1294) and is printed with the other tiers.
run plan30d -- plan --preset qwen3-30b-a3b --type Q4_K_M --gpu-memory 8GiB --ctx 65536 --kv-type q8_0 --parallel 1 --cache-device 1GiB --cache-ram 16GiB
if [[ $(rc plan30d) == 0 ]] && grep -Eq "prefix cache \(device\) +1073741824 " "$WORK/plan30d.out" &&
   grep -q "943 experts of 3059712 bytes" "$WORK/plan30d.out" &&
   grep -q "prefix cache: device tier 1.00 GiB; host RAM: primary tier .*, host tier 16.00 GiB" "$WORK/plan30d.out"; then
  pass "plan --cache-device"; else
  fail "plan --cache-device: $(cat "$WORK/plan30d.out" "$WORK/plan30d.err")"; fi
run planv3 -- plan --preset deepseek-v3 --gpu-memory 24GiB --ctx 65536 --parallel 1 --worker-memory 256GiB
if [[ $(rc planv3) == 0 ]] && grep -Eq "KV cache +[0-9]+ .*70272 bytes/position x 65536" "$WORK/planv3.out" &&
   grep -q "expert-workers: 2 of 256.00 GiB" "$WORK/planv3.out" &&
   grep -q "worker 1: --shard layers=32-60" "$WORK/planv3.out"; then
  pass "plan --preset deepseek-v3 --worker-memory"; else
  fail "plan --preset deepseek-v3: $(cat "$WORK/planv3.out" "$WORK/planv3.err")"; fi
# Qwen3.5-35B-A3B (hybrid): KV for the 10 attention layers only, 10 x 2 KV
# heads x (256 + 256) f16 = 20480 bytes per position; the 30 DeltaNet layers'
# conv (3 x 8192) + recurrent (32 x 128 x 128) f32 state, two buffers, of any
# context: 2 x 30 x (24576 + 524288) x 4 bytes.
run plan35 -- plan --preset qwen3.5-35b-a3b --gpu-memory 8GiB --ctx 65536 --parallel 1
if [[ $(rc plan35) == 0 ]] && grep -Eq "KV cache +1342178304 .*10 attention layers" "$WORK/plan35.out" &&
   grep -Eq "recurrent state +131727360 .*30 DeltaNet layers" "$WORK/plan35.out" &&
   grep -q "30 gated DeltaNet (16/32 heads x 128, conv 4) + 10 attention" "$WORK/plan35.out"; then
  pass "plan --preset qwen3.5-35b-a3b (64K, 8 GiB)"; else
  fail "plan --preset qwen3.5: $(cat "$WORK/plan35.out" "$WORK/plan35.err")"; fi
run plan35l -- plan --preset qwen3.5-35b-a3b --gpu-memory 8GiB --ctx 262144 --kv-type q8_0 --parallel 1
if [[ $(rc plan35l) == 0 ]] && grep -Eq "KV cache +2852130816 " "$WORK/plan35l.out"; then
  pass "plan --preset qwen3.5-35b-a3b (262144, q8_0, 8 GiB)"; else
  fail "plan 262144: $(cat "$WORK/plan35l.out" "$WORK/plan35l.err")"; fi
# The main job on a hybrid model: two workers, the dense service, a prompt.
HYBRID=$WORK/qwen35-small.gguf
run make35 -- make-test-model --preset qwen3.5-35b-a3b --layers 4 --experts 16 --vocab 1024 \
  --out "$HYBRID"
run up35 -- up --model "$HYBRID" --prompt "The quick brown fox" -n 8 --workers 2 \
  --grpc "127.0.0.1:$((20000 + RANDOM % 20000))"
if [[ $(rc make35) == 0 && $(rc up35) == 0 ]] && grep -q "8 tokens" "$WORK/up35.err"; then
  pass "up on a qwen35moe model (2 workers)"; else
  fail "up qwen35moe: $(cat "$WORK/make35.err" "$WORK/up35.out" "$WORK/up35.err")"; fi
# Files with a NextN / MTP block: the trunk is planned (GLM-4.7-Flash: 47 MLA
# layers x (512 + 64) f16 = 54144 bytes per position), the block's bytes are
# shown apart on the host.
run planflash -- plan --preset glm-4.7-flash --gpu-memory 8GiB --ctx 65536 --parallel 1
if [[ $(rc planflash) == 0 ]] && grep -Eq "KV cache +[0-9]+ .*54144 bytes/position x 65536 x 1 \(47 attention layers\)" "$WORK/planflash.out" &&
   grep -Eq "NextN/MTP blocks +[0-9]+ .*1 block\(s\) after the trunk" "$WORK/planflash.out"; then
  pass "plan --preset glm-4.7-flash (64K, 8 GiB)"; else
  fail "plan glm-4.7-flash: $(cat "$WORK/planflash.out" "$WORK/planflash.err")"; fi
# GLM-4.5-Air: 46 GQA layers x 8 KV heads x (128 + 128) q4_0 = 52992 bytes per position.
run planair -- plan --preset glm-4.5-air --gpu-memory 8GiB --ctx 65536 --kv-type q4_0 --parallel 1
if [[ $(rc planair) == 0 ]] && grep -Eq "KV cache +3472884736 .*52992 bytes/position" "$WORK/planair.out" &&
   grep -q "NextN/MTP blocks" "$WORK/planair.out"; then
  pass "plan --preset glm-4.5-air (64K, q4_0, 8 GiB)"; else
  fail "plan glm-4.5-air: $(cat "$WORK/planair.out" "$WORK/planair.err")"; fi
run planmtp -- plan --preset qwen3.6-35b-a3b-mtp --gpu-memory 8GiB --ctx 65536 --parallel 1
if [[ $(rc planmtp) == 0 ]] && grep -Eq "KV cache +1342178304 .*10 attention layers" "$WORK/planmtp.out" &&
   grep -q "NextN/MTP blocks" "$WORK/planmtp.out"; then
  pass "plan --preset qwen3.6-35b-a3b-mtp (64K, 8 GiB)"; else
  fail "plan qwen3.6-35b-a3b-mtp: $(cat "$WORK/planmtp.out" "$WORK/planmtp.err")"; fi
# A glm4moe model with its NextN block (block_count 4 = 3 + 1): two workers
# split the trunk's 3 layers (the NextN block's experts stay unloaded).
GLM=$WORK/glm-small.gguf
run makeglm -- make-test-model --preset glm-4.5-air --layers 3 --experts 16 --d 512 --heads 8 \
  --kv-heads 2 --ffn 1024 --expert-ffn 256 --vocab 1024 --ctx 4096 --out "$GLM"
run upglm -- up --model "$GLM" --prompt "The quick brown fox" -n 8 --workers 2 \
  --grpc "127.0.0.1:$((20000 + RANDOM % 20000))"
if [[ $(rc makeglm) == 0 && $(rc upglm) == 0 ]] && grep -q "8 tokens" "$WORK/upglm.err" &&
   grep -q "shard layers=1-2 " "$WORK/upglm.err" && grep -q "glm4moe, 3 layers" "$WORK/upglm.err"; then
  pass "up on a glm4moe model with a NextN block (2 workers)"; else
  fail "up glm4moe: $(cat "$WORK/makeglm.err" "$WORK/upglm.out" "$WORK/upglm.err")"; fi
# gpt-oss-120b at 128K in f16 on 8 GiB: the sliding-window layers keep a ring.
run planoss -- plan --preset gpt-oss-120b --gpu-memory 8GiB --ctx 131072 --parallel 1
if [[ $(rc planoss) == 0 ]] && grep -Eq "KV cache +4860153856 " "$WORK/planoss.out" &&
   grep -q "18 full-attention layers x 131072 + 18 sliding-window layers x 768" "$WORK/planoss.out"; then
  pass "plan --preset gpt-oss-120b (131072, f16, 8 GiB)"; else
  fail "plan gpt-oss-120b: $(cat "$WORK/planoss.out" "$WORK/planoss.err")"; fi
run planj -- plan --model "$MODEL" --gpu-memory 7.5G --ctx 4096 --parallel 2 --json
if [[ $(rc planj) == 0 ]] && grep -q '"budget_bytes": 8053063680' "$WORK/planj.out" &&
   grep -q '"parallel": 2' "$WORK/planj.out" && grep -q '"expert_cache"' "$WORK/planj.out"; then
  pass "plan --json"; else fail "plan --json: $(cat "$WORK/planj.out" "$WORK/planj.err")"; fi

# bench: the whole path (a worker over shared memory) on the small model;
# the JSON keys outside checks read, the worker's own time (reported over
# shm), the read-only roofline, and the worker-alone rounds.
run bench -- bench --model "$MODEL" --prompt 32 --gen 4 --depth 0,8 --reps 2 --json
if [[ $(rc bench) == 0 ]] && grep -q '"prefill_tok_s":' "$WORK/bench.out" &&
   grep -q '"prefill_first_tok_s":' "$WORK/bench.out" &&
   grep -q '"decode_tok_s":' "$WORK/bench.out" && grep -q '"worker_weight_gbps":' "$WORK/bench.out" &&
   grep -q '"dram_read_gbps":' "$WORK/bench.out" &&
   grep -q '"decode_tok_s_by_depth":{"0":[0-9.e+]*,"8":' "$WORK/bench.out" &&
   grep -q '"worker_busy_weight_gbps":[0-9]' "$WORK/bench.out" &&
   grep -q '"read_only_weight_gbps":[0-9]' "$WORK/bench.out" &&
   [[ $(grep -o '"worker_weight_gbps":' "$WORK/bench.out" | wc -l) == 3 ]]; then
  pass "bench --json"; else fail "bench --json: $(cat "$WORK/bench.out" "$WORK/bench.err")"; fi

run gen -- generate --model "$MODEL" --prompt "The quick brown fox" -n 12 --temp 0
if [[ $(rc gen) == 0 ]] && grep -q '[^[:space:]]' "$WORK/gen.out" &&
   grep -q "generation: .* tok/s" "$WORK/gen.err" &&
   grep -q "prompt: .* tok/s" "$WORK/gen.err"; then pass "generate (greedy)"; else
  fail "generate: rc=$(rc gen) out=[$(cat "$WORK/gen.out")] err=[$(cat "$WORK/gen.err")]"; fi

run s1 -- generate --model "$MODEL" --prompt "Hello" -n 10 --temp 0.9 --seed 7
run s2 -- generate --model "$MODEL" --prompt "Hello" -n 10 --temp 0.9 --seed 7
if [[ $(rc s1) == 0 && $(rc s2) == 0 ]] && cmp -s "$WORK/s1.out" "$WORK/s2.out" &&
   grep -q '[^[:space:]]' "$WORK/s1.out"; then pass "generate (seeded, reproducible)"; else
  fail "seeded generate differs or failed: [$(cat "$WORK/s1.out")] [$(cat "$WORK/s2.out")] $(cat "$WORK/s1.err")"; fi

run tok -- tokenize --model "$MODEL" --text "Hello world, hello!"
if [[ $(rc tok) == 0 ]] && grep -Eq '^[0-9]+( [0-9]+)*$' "$WORK/tok.out" &&
   [[ $(wc -l <"$WORK/tok.out") == 1 ]]; then pass "tokenize"; else
  fail "tokenize: $(cat "$WORK/tok.out" "$WORK/tok.err")"; fi

# The real Qwen2 vocabulary: llama.cpp's expected ids for the first test text.
VOCAB=$FIXTURES/vocab/ggml-vocab-qwen2.gguf
if [[ -f "$VOCAB" ]]; then
  printf 'Hello world' >"$WORK/hello.txt"
  run tokq -- tokenize --model "$VOCAB" --text-file "$WORK/hello.txt"
  if [[ $(rc tokq) == 0 && "$(cat "$WORK/tokq.out")" == "9707 1879" ]]; then
    pass "tokenize (qwen2 vocabulary)"; else
    fail "tokenize qwen2: $(cat "$WORK/tokq.out" "$WORK/tokq.err")"; fi
  run toks -- tokenize --model "$VOCAB" --text "<|im_start|>hi" --special
  if [[ $(rc toks) == 0 && "$(cut -d' ' -f1 "$WORK/toks.out")" == "151644" ]]; then
    pass "tokenize --special"; else
    fail "tokenize --special: $(cat "$WORK/toks.out" "$WORK/toks.err")"; fi
fi

run logits -- logits --model "$MODEL" --tokens 1,2,3 --out "$WORK/l.f32"
if [[ $(rc logits) == 0 && $(stat -c %s "$WORK/l.f32") == $((3 * 1024 * 4)) ]]; then
  pass "logits size"; else fail "logits: $(cat "$WORK/logits.err")"; fi
printf 'Hello there' >"$WORK/text.txt"
run tokt -- tokenize --model "$MODEL" --text-file "$WORK/text.txt"
n_text=$(wc -w <"$WORK/tokt.out")
run logt -- logits --model "$MODEL" --text-file "$WORK/text.txt" --out "$WORK/t.f32"
if [[ $(rc logt) == 0 && $(stat -c %s "$WORK/t.f32") == $((n_text * 1024 * 4)) ]]; then
  pass "logits --text-file"; else fail "logits --text-file: $(cat "$WORK/logt.err")"; fi

# Without --model: a test model is written to the cache once, then reused.
export MOESPLIT_CACHE_DIR=$WORK/cache
run def1 -- generate --prompt "Once upon a time" -n 6
run def2 -- generate --prompt "Once upon a time" -n 6
if [[ $(rc def1) == 0 && $(rc def2) == 0 ]] && grep -q '[^[:space:]]' "$WORK/def1.out" &&
   grep -q "writing a random-weight test model" "$WORK/def1.err" &&
   ! grep -q "writing" "$WORK/def2.err" && cmp -s "$WORK/def1.out" "$WORK/def2.out" &&
   ls "$WORK/cache"/*.gguf >/dev/null 2>&1 && ! ls "$WORK/cache"/*.tmp-* >/dev/null 2>&1; then
  pass "generate without --model (cached test model)"; else
  fail "generate without --model: $(cat "$WORK/def1.err" "$WORK/def2.err")"; fi
rm -rf "$WORK/cache"
unset MOESPLIT_CACHE_DIR

# ---- 2. the error table ---------------------------------------------------
# A GGUF whose architecture nobody supports, and a truncated model.
printf 'GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x14\x00\x00\x00\x00\x00\x00\x00general.architecture\x08\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00gptxx' \
  >"$WORK/unknown-arch.gguf"
head -c 64 /dev/zero >>"$WORK/unknown-arch.gguf"  # padding to the data section
head -c 4096 "$MODEL" >"$WORK/truncated.gguf"
printf '' >"$WORK/empty.txt"

# expect_error NAME "EXPECTED TEXT" ARGS...
expect_error() {
  local name=$1 expected=$2
  shift 2
  run "$name" -- "$@"
  local lines
  lines=$(wc -l <"$WORK/$name.err")
  if [[ $(rc "$name") == 2 && $lines == 1 ]] &&
     grep -q '^moesplit: ' "$WORK/$name.err" &&
     grep -qF -- "$expected" "$WORK/$name.err"; then
    pass "error: $name"
  else
    fail "error: $name: rc=$(rc "$name") stderr=[$(cat "$WORK/$name.err")] want [$expected]"
  fi
}

expect_error no-command "missing command"
expect_error unknown-command "unknown command 'frobnicate'" frobnicate
expect_error unknown-flag "unknown flag --bogus" generate --bogus 1 --prompt hi
expect_error unknown-top-level-flag "unknown flag --verbose" --verbose inspect "$MODEL"
expect_error unknown-flag-inspect "unknown flag --verbose" inspect --verbose "$MODEL"
expect_error missing-file "no-such-model.gguf" inspect "$WORK/no-such-model.gguf"
expect_error missing-model-generate "no-such-model.gguf" generate --model "$WORK/no-such-model.gguf" --prompt hi
expect_error unsupported-arch "gptxx" inspect "$WORK/unknown-arch.gguf"
expect_error unsupported-arch-logits "gptxx" logits --model "$WORK/unknown-arch.gguf" --tokens 1 --out "$WORK/x.f32"
expect_error truncated-file "truncated.gguf" inspect "$WORK/truncated.gguf"
expect_error make-unsupported-arch "unsupported architecture 'llama'" make-test-model --arch llama --out "$WORK/x.gguf"
expect_error make-unsupported-type "unsupported type 'Q9_9'" make-test-model --type Q9_9 --out "$WORK/x.gguf"
expect_error make-no-out "missing --out" make-test-model
expect_error make-bad-shape "not a multiple of --kv-heads" make-test-model --heads 6 --kv-heads 4 --out "$WORK/x.gguf"
expect_error token-out-of-range "token id 1024 out of range [0, 1024)" logits --model "$MODEL" --tokens 1,1024 --out "$WORK/x.f32"
expect_error token-negative "token id -1 out of range" logits --model "$MODEL" --tokens=-1 --out "$WORK/x.f32"
expect_error token-not-a-number "bad token id 'abc'" logits --model "$MODEL" --tokens 1,abc --out "$WORK/x.f32"
expect_error logits-no-out "missing --out" logits --model "$MODEL" --tokens 1
expect_error logits-empty-text "no tokens" logits --model "$MODEL" --text-file "$WORK/empty.txt" --out "$WORK/x.f32"
expect_error empty-prompt "empty prompt" generate --model "$MODEL" --prompt ""
expect_error missing-prompt "empty prompt" generate --model "$MODEL"
expect_error bad-int "flag -n expects an integer, got 'many'" generate --model "$MODEL" --prompt hi -n many
expect_error bad-temp "temperature must be in [0, 2], got -1" generate --model "$MODEL" --prompt hi --temp -1
expect_error bench-bad-reps "--reps must be in 1..100, got 0" bench --model "$MODEL" --reps 0
expect_error tokenize-two-texts "exactly one of --text and --text-file" tokenize --model "$MODEL" --text a --text-file "$WORK/text.txt"
expect_error tokenize-missing-text-file "no-such.txt" tokenize --model "$MODEL" --text-file "$WORK/no-such.txt"
expect_error flag-needs-value "flag --model needs a value" tokenize --text hi --model
expect_error plan-does-not-fit "budget 6.00 GiB: 1.12 GiB short; try --ctx 53248 or --kv-type q8_0" plan --preset qwen3-30b-a3b --gpu-memory 6GiB --ctx 65536 --parallel 1
expect_error plan-bad-size "bad size '8XB': unknown unit 'XB'" plan --model "$MODEL" --gpu-memory 8XB
expect_error plan-no-budget "--gpu-memory is required" plan --model "$MODEL"
expect_error plan-bad-kv-type "flag --kv-type must be one of f16, q8_0, q4_0; got 'q5_1'" plan --model "$MODEL" --gpu-memory 8GiB --kv-type q5_1
expect_error plan-model-and-preset "exactly one of --model and --preset" plan --model "$MODEL" --preset tiny --gpu-memory 8GiB

[[ -f "$WORK/x.gguf" ]] && fail "a failed make-test-model left $WORK/x.gguf"
[[ -f "$WORK/x.f32" ]] && fail "a failed logits left $WORK/x.f32"

echo "----"
if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
