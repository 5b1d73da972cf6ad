#!/usr/bin/env bash
# Prefill (and decode) of `moesplit bench` and of llama.cpp's CPU build
# (llamacpp_peer.sh) on the same model, alternated ROUNDS times in one sitting
# so that both see the same machine: on a shared VM the speed of either drifts
# by tens of percent within minutes, so only ratios taken side by side mean
# anything. Prints each round and the median of the per-round prefill ratios.
#   tests/bench/side_by_side.sh [MODEL] [ROUNDS=5] [THREADS=2]
# Without MODEL it uses the cached Qwen3-30B-A3B-shaped model `moesplit bench`
# writes. Needs build/bin/moesplit (built) and node/npm (for the peer).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${MOESPLIT_BIN:-$root/build/bin/moesplit}
model=${1:-}
rounds=${2:-5}
threads=${3:-2}
if [[ -z "$model" ]]; then
  # The bench's default model (written on first use).
  model=$("$bin" bench --threads "$threads" --prompt 8 --gen 1 --reps 1 --json 2>/dev/null | \
          sed -n 's/.*"model":"\([^"]*\)".*/\1/p')
fi
num() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }
ratios=()
printf "%-6s %14s %14s %8s %14s %16s\n" round "ours prefill" "peer prefill" ratio "ours decode" "worker % DRAM"
for ((r = 1; r <= rounds; ++r)); do
  ours=$("$bin" bench --model "$model" --threads "$threads" --prompt 512 --gen 128 --reps 3 --json 2>/dev/null)
  peer=$(bash "$here/llamacpp_peer.sh" "$model" --threads "$threads" --prompt 512 --reps 3 2>/dev/null | tail -1)
  op=$(num prefill_tok_s <<<"$ours")
  pp=$(num prefill_tok_s <<<"$peer")
  od=$(num decode_tok_s <<<"$ours")
  wf=$(num worker_weight_fraction_of_dram <<<"$ours")
  ratio=$(awk -v a="$op" -v b="$pp" 'BEGIN { printf "%.2f", a / b }')
  ratios+=("$ratio")
  printf "%-6s %14.1f %14.1f %8s %14.1f %15.1f%%\n" "$r" "$op" "$pp" "$ratio" "$od" \
    "$(awk -v f="$wf" 'BEGIN { print 100 * f }')"
done
median=$(printf "%s\n" "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
echo "median prefill ratio (ours / llama.cpp CPU): $median over $rounds rounds"
