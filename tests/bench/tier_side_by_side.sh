#!/usr/bin/env bash
# Experts beyond RAM (issue 45), side by side in one sitting, each run inside
# its own memory cgroup of LIMIT bytes (v1 or v2, whichever the machine has;
# needs root):
#   1. dd iflag=direct of MODEL: the disk's direct read rate;
#   2. moesplit: one expert-worker in the cgroup (--expert-ram auto: the
#      cgroup's headroom, so a model larger than LIMIT runs from its RAM
#      tier) and `moesplit bench` against it over shm; prefill / decode tok/s,
#      the tier's hits, misses and bytes read (its /metrics), peak memory.
#      The bench process (the dense part) runs outside the cgroup unless
#      DENSE_IN_CGROUP=1: after the timed runs it measures the DRAM read rate
#      and a read-only replay through its own mapping of the experts, which
#      a cgroup smaller than the model does not hold;
#   3. llama.cpp's llama-bench (mmap, its default) on the same file in the
#      same kind of cgroup; "killed" when the cgroup's OOM killer ends it.
# The page cache of MODEL is dropped before each run (dd iflag=nocache).
#
# Usage: tier_side_by_side.sh MODEL LIMIT [THREADS] [PROMPT] [GEN] [EXTRA_WORKER_FLAGS...]
#   LIMIT in bytes or with a unit understood by numfmt (6G, 10G: powers of 1024).
# Environment: BIN (default build/bin), LLAMA_BENCH (default the native peer
# build, ~/.cache/moesplit/llama.cpp/build-native/bin/llama-bench; "" skips it).
# Prints one table; numbers are printed, never asserted.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

MODEL=${1:?usage: tier_side_by_side.sh MODEL LIMIT [THREADS] [PROMPT] [GEN] [WORKER_FLAGS...]}
LIMIT=$(numfmt --from=iec "${2:?LIMIT}") || exit 2
THREADS=${3:-2}
PROMPT=${4:-128}
GEN=${5:-32}
shift $(( $# < 5 ? $# : 5 ))
WORKER_FLAGS=("$@")
BIN=${BIN:-build/bin}
LLAMA_BENCH=${LLAMA_BENCH-$HOME/.cache/moesplit/llama.cpp/build-native/bin/llama-bench}
WORK=$(mktemp -d)
NAME=tier-bench-$$

if [[ -d /sys/fs/cgroup/memory ]]; then CGV=1; CGROOT=/sys/fs/cgroup/memory; else CGV=2; CGROOT=/sys/fs/cgroup; fi
cleanup() {
  [[ -n ${WORKER_PID:-} ]] && kill "$WORKER_PID" 2>/dev/null && wait "$WORKER_PID" 2>/dev/null
  for cg in "$CGROOT"/moesplit-*-$$; do  # new_cgroup runs in $(...): no list to keep
    for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 1; done
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# A fresh cgroup of LIMIT bytes; prints its path.
new_cgroup() {
  local cg="$CGROOT/moesplit-$1-$$"
  mkdir -p "$cg" || return 1
  if [[ $CGV == 1 ]]; then
    echo "$LIMIT" >"$cg/memory.limit_in_bytes" || return 1
    [[ -f $cg/memory.memsw.limit_in_bytes ]] && echo "$LIMIT" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null
  else
    echo "$LIMIT" >"$cg/memory.max" || return 1
    echo 0 >"$cg/memory.swap.max" 2>/dev/null
  fi
  echo "$cg"
}
peak() {  # peak bytes of cgroup $1
  if [[ $CGV == 1 ]]; then cat "$1/memory.max_usage_in_bytes"; else cat "$1/memory.peak" 2>/dev/null || echo 0; fi
}
oom_killed() {  # whether cgroup $1 saw an OOM kill
  if [[ $CGV == 1 ]]; then grep -q '^oom_kill [1-9]' "$1/memory.oom_control" 2>/dev/null
  else grep -q '^oom_kill [1-9]' "$1/memory.events" 2>/dev/null; fi
}
in_cgroup() {  # run "$@" inside cgroup $CG
  sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" "$@"
}
drop_cache() { dd if="$MODEL" iflag=nocache count=0 status=none 2>/dev/null; }
gib() { awk -v b="$1" 'BEGIN { printf "%.2f GiB", b / 1073741824 }'; }

SIZE=$(stat -c %s "$MODEL")
echo "model $MODEL ($(gib "$SIZE")), cgroup v$CGV limit $(gib "$LIMIT"), threads $THREADS, prompt $PROMPT, gen $GEN"

# 1. dd
drop_cache
CG=$(new_cgroup dd) || { echo "cannot make a memory cgroup under $CGROOT (root needed)"; exit 1; }
DD_BYTES=$(( SIZE < 4294967296 ? SIZE : 4294967296 ))
dd_out=$(in_cgroup dd if="$MODEL" of=/dev/null bs=4M iflag=direct count=$(( DD_BYTES / 4194304 )) 2>&1 | tail -n 1)
DD_RATE=$(echo "$dd_out" | awk -F', ' '{ print $NF }')
echo "dd iflag=direct: $dd_out"

# 2. moesplit: the worker, then bench against it, in one cgroup.
drop_cache
CG=$(new_cgroup moesplit) || exit 1
# Not through in_cgroup: a backgrounded function is a subshell, and $! must be
# the worker itself (sh execs it) for the kill below.
sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" "$BIN/moesplit-expert-worker" \
  --model "$MODEL" --listen-shm "$NAME" --threads "$THREADS" --metrics 127.0.0.1:0 \
  "${WORKER_FLAGS[@]}" 2>"$WORK/worker.err" &
WORKER_PID=$!
for _ in $(seq 600); do
  grep -q "ready on" "$WORK/worker.err" && break
  kill -0 "$WORKER_PID" 2>/dev/null || break
  sleep 1
done
if ! grep -q "ready on" "$WORK/worker.err"; then
  echo "moesplit worker did not start:"; cat "$WORK/worker.err"; MS="failed"
else
  grep "ready on" "$WORK/worker.err"
  MPORT=$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$WORK/worker.err")
  dense=()
  [[ ${DENSE_IN_CGROUP:-0} == 1 ]] && dense=(in_cgroup)
  "${dense[@]}" "$BIN/moesplit" bench --model "$MODEL" --experts "shm://$NAME" --threads "$THREADS" \
    --prompt "$PROMPT" --gen "$GEN" --reps 1 --json >"$WORK/bench.json" 2>"$WORK/bench.err"
  rc=$?
  curl -sf "http://127.0.0.1:$MPORT/metrics" >"$WORK/worker.metrics"
  metric() { awk -v n="$1" '$1 == n { print $2 }' "$WORK/worker.metrics"; }
  HITS=$(metric moesplit_worker_tier_hits_total); MISSES=$(metric moesplit_worker_tier_misses_total)
  READ=$(metric moesplit_worker_tier_read_bytes_total)
  READ_S=$(metric moesplit_worker_tier_read_duration_seconds_sum)
  READ_N=$(metric moesplit_worker_tier_read_duration_seconds_count)
  if [[ $rc != 0 ]]; then
    MS="failed (rc $rc$(oom_killed "$CG" && echo ', OOM-killed')): $(tail -n 2 "$WORK/bench.err")"
  else
    MS=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("prefill %.1f tok/s, decode %.2f tok/s" % (j["prefill_tok_s"], j["decode_tok_s"]))' "$WORK/bench.json")
  fi
fi
kill "$WORKER_PID" 2>/dev/null; wait "$WORKER_PID" 2>/dev/null; WORKER_PID=
MS_PEAK=$(peak "$CG")

# 3. llama-bench (mmap)
LB="skipped"; LB_PEAK=0
if [[ -n $LLAMA_BENCH && -x $LLAMA_BENCH ]]; then
  drop_cache
  CG=$(new_cgroup llama) || exit 1
  in_cgroup "$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -p "$PROMPT" -n "$GEN" -r 1 -o md \
    >"$WORK/llama.out" 2>"$WORK/llama.err"
  rc=$?
  if [[ $rc == 0 ]]; then LB=$(grep -E '\| +(pp|tg)' "$WORK/llama.out" | awk -F'|' '{ print $(NF-2) ":" $(NF-1) }' | tr -s ' ' | paste -sd ' ')
  else LB="killed or failed (rc $rc$(oom_killed "$CG" && echo ', OOM-killed'))"; fi
  LB_PEAK=$(peak "$CG")
fi

echo
echo "| run | result | peak cgroup memory |"
echo "|---|---|---|"
echo "| dd iflag=direct | $DD_RATE | |"
echo "| moesplit (worker in the cgroup, --expert-ram auto; bench over shm) | $MS | $(gib "$MS_PEAK") |"
if [[ -n ${MISSES:-} ]]; then
  echo "| moesplit RAM tier | $(python3 -c '
import sys
h, m, b, s, n = (float(x or 0) for x in sys.argv[1:6])
print("hits %d, misses %d (%.1f%% hit), %.2f GiB read, %.2f ms per expert read" % (
    h, m, 100 * h / max(h + m, 1), b / 2**30, 1e3 * s / max(n, 1)))' "$HITS" "$MISSES" "$READ" "$READ_S" "$READ_N") | |"
fi
echo "| llama-bench (mmap) | $LB | $(gib "$LB_PEAK") |"
