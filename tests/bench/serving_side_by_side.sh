#!/usr/bin/env bash
# Serving throughput side by side: `moesplit up` (an expert-worker over shared
# memory and the dense service with continuous batching) and llama.cpp's own
# `llama-server` (built natively by llamacpp_peer.sh) on the same model, each
# given STREAMS concurrent OpenAI /v1/completions requests of TOKENS greedy
# tokens by the same client (below: Python's standard library, one thread a
# stream, a distinct prompt each). Alternated ROUNDS times in one sitting;
# prints each round's total generated tokens per second (usage's
# completion_tokens over the wall time from the first request sent to the
# last answer) and the median of the per-round ratios.
#   tests/bench/serving_side_by_side.sh [MODEL] [ROUNDS=3] [STREAMS=16] [TOKENS=64] [THREADS=2]
# Without MODEL: the Qwen3-30B-A3B-shaped test model `moesplit bench` uses.
# Each server gets STREAMS sequences (moesplit --parallel, llama-server -np)
# of 512 context positions each, THREADS compute threads (moesplit: the
# dense service and the worker each), CPU only. Needs build/bin/moesplit.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin_dir=${MOESPLIT_BIN_DIR:-$root/build/bin}
model=${1:-}
rounds=${2:-3}
streams=${3:-16}
tokens=${4:-64}
threads=${5:-2}
ctx=512
if [[ -z "$model" ]]; then
  model=$("$bin_dir/moesplit" bench --threads "$threads" --prompt 8 --gen 1 --reps 1 --json 2>/dev/null | \
          sed -n 's/.*"model":"\([^"]*\)".*/\1/p')
fi
server=$(bash "$here/llamacpp_peer.sh" --build-server)
work=$(mktemp -d)
pid=
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_http URL SECONDS: until GET URL answers 200 (the server is ready).
wait_http() {
  python3 - "$1" "$2" "$pid" <<'EOF'
import os, sys, time, urllib.request
url, limit, pid = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
end = time.monotonic() + limit
while time.monotonic() < end:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("the server exited before it was ready")
    try:
        if urllib.request.urlopen(url, timeout=2).status == 200:
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.25)
sys.exit("not ready after %s s: %s" % (limit, url))
EOF
}

# load PORT: one untimed request, then STREAMS at once; prints "TOK_S TOKENS".
load() {
  python3 - "$1" "$streams" "$tokens" <<'EOF'
import json, sys, threading, time, urllib.request
port, streams, tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def complete(i):
    # ignore_eos (both servers take it): every stream makes TOKENS tokens.
    body = {"prompt": "Stream %d: write a short story about a lighthouse keeper." % i,
            "max_tokens": tokens, "temperature": 0, "stream": False, "ignore_eos": True}
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())["usage"]["completion_tokens"]
complete(-1)  # warm-up
got = [0] * streams
def run(i):
    got[i] = complete(i)
ts = [threading.Thread(target=run, args=(i,)) for i in range(streams)]
t0 = time.monotonic()
for t in ts: t.start()
for t in ts: t.join()
dt = time.monotonic() - t0
print("%.1f %d" % (sum(got) / dt, sum(got)))
EOF
}

run_moesplit() {
  local port
  port=$(free_port)
  "$bin_dir/moesplit" up --model "$model" --grpc 127.0.0.1:0 --http "127.0.0.1:$port" \
    --parallel "$streams" --ctx "$ctx" --threads "$threads" --dense-threads "$threads" \
    >"$work/moesplit.log" 2>&1 &
  pid=$!
  wait_http "http://127.0.0.1:$port/health" 600 || { tail -5 "$work/moesplit.log" >&2; exit 1; }
  load "$port"
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=
}

run_llama() {
  local port
  port=$(free_port)
  "$server" -m "$model" -t "$threads" -np "$streams" -c $((streams * ctx)) -ngl 0 \
    --host 127.0.0.1 --port "$port" >"$work/llama.log" 2>&1 &
  pid=$!
  wait_http "http://127.0.0.1:$port/health" 600 || { tail -5 "$work/llama.log" >&2; exit 1; }
  load "$port"
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=
}

printf "%-6s %16s %16s %7s\n" round "moesplit tok/s" "llama tok/s" ratio
ratios=()
for r in $(seq 1 "$rounds"); do
  run_moesplit >"$work/ours"
  run_llama >"$work/peer"
  read -r ours ours_n <"$work/ours"
  read -r peer peer_n <"$work/peer"
  ratio=$(python3 -c "print('%.2f' % ($ours / $peer))")
  ratios+=("$ratio")
  printf "%-6s %10s (%4s) %10s (%4s) %7s\n" "$r" "$ours" "$ours_n" "$peer" "$peer_n" "$ratio"
done
python3 - "$streams" "$tokens" "$threads" "${ratios[@]}" <<'EOF'
import statistics, sys
s, n, t, rs = sys.argv[1], sys.argv[2], sys.argv[3], [float(x) for x in sys.argv[4:]]
print("median ratio (moesplit up / llama-server), %d rounds, %s streams x %s tokens, %s threads: %.2f"
      % (len(rs), s, n, t, statistics.median(rs)))
EOF
