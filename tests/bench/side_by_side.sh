#!/usr/bin/env bash
# Prefill and decode of `moesplit bench` and of llama.cpp's own llama-bench
# (built natively, llamacpp_peer.sh) on the same model, alternated ROUNDS
# times in one sitting so that both see the same machine: on a shared VM the
# speed of either drifts by tens of percent within minutes, so only ratios
# taken side by side mean anything. Prints each round and the median of the
# per-round ratios.
#   tests/bench/side_by_side.sh [MODEL] [ROUNDS=5] [THREADS=2] [DEPTH=0]
# Without MODEL it uses the cached Qwen3-30B-A3B-shaped model `moesplit bench`
# writes. EXPERTS=local|shm|grpc (default shm: an expert-worker process
# joined by shared memory) is passed to `moesplit bench --experts`. Needs
# build/bin/moesplit (built); the peer builds itself once.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${MOESPLIT_BIN:-$root/build/bin/moesplit}
model=${1:-}
rounds=${2:-5}
threads=${3:-2}
depth=${4:-0}
prompt=${PROMPT:-512}
gen=${GEN:-128}
experts=${EXPERTS:-shm}
if [[ -z "$model" ]]; then
  # The bench's default model (written on first use).
  model=$("$bin" bench --threads "$threads" --prompt 8 --gen 1 --reps 1 --json 2>/dev/null | \
          sed -n 's/.*"model":"\([^"]*\)".*/\1/p')
fi
bash "$here/llamacpp_peer.sh" --build-only
num() { python3 -c "import json,sys; v=json.loads(sys.stdin.read()).get('$1'); print(v if v is not None else 'nan')"; }
pre=() dec=()
printf "%-6s %12s %12s %7s %12s %12s %7s\n" round "ours pp" "llama pp" ratio "ours tg" "llama tg" ratio
err=$(mktemp)
trap 'rm -f "$err"' EXIT
# A run that fails (e.g. a depth past the model's context) stops the script
# with that run's own message.
run_or_say() {
  local what=$1
  shift
  if ! "$@" 2>"$err"; then
    echo "side_by_side.sh: $what failed:" >&2
    cat "$err" >&2
    exit 1
  fi
}
for ((r = 1; r <= rounds; ++r)); do
  ours=$(run_or_say "moesplit bench" "$bin" bench --model "$model" --threads "$threads" \
         --prompt "$prompt" --gen "$gen" --depth "$depth" --reps 3 --experts "$experts" --json)
  peer=$(run_or_say "llama-bench" bash "$here/llamacpp_peer.sh" "$model" --threads "$threads" \
         --prompt "$prompt" --gen "$gen" --depth "$depth" --reps 3 | tail -1)
  op=$(num prefill_tok_s <<<"$ours")
  od=$(num decode_tok_s <<<"$ours")  # at --depth (one depth given)
  pp=$(num prefill_tok_s <<<"$peer")
  pd=$(num decode_tok_s <<<"$peer")
  rp=$(awk -v a="$op" -v b="$pp" 'BEGIN { printf "%.2f", a / b }')
  rd=$(awk -v a="$od" -v b="$pd" 'BEGIN { printf "%.2f", a / b }')
  pre+=("$rp") dec+=("$rd")
  printf "%-6s %12.1f %12.1f %7s %12.1f %12.1f %7s\n" "$r" "$op" "$pp" "$rp" "$od" "$pd" "$rd"
done
median() { printf "%s\n" "$@" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "median ratio (moesplit --experts $experts / llama.cpp llama-bench), $rounds rounds, $threads threads, depth $depth:" \
     "prefill $(median "${pre[@]}"), decode $(median "${dec[@]}")"
