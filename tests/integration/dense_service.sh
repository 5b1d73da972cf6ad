# Sourced by the HTTP integration scripts (with BIN and WORK set and WORK
# created): dense services on loopback ports they pick themselves, all of
# them stopped when the script exits.
#   fail MESSAGE      prints MESSAGE and the tail of every $WORK/dense*.log,
#                     exits 1
#   start_dense LOG FLAGS...
#                     starts "$BIN/moesplit-dense" --grpc 127.0.0.1:0
#                     --http 127.0.0.1:0 FLAGS (stderr to LOG, a dense*.log
#                     under WORK), waits for its ready line and prints its
#                     base URL; use it as URL=$(start_dense ...)
DENSE_PIDS=$WORK/dense.pids
: >"$DENSE_PIDS"
stop_dense() {
  local p
  while read -r p; do kill "$p" 2>/dev/null || true; done <"$DENSE_PIDS"
  wait 2>/dev/null || true
}
trap stop_dense EXIT
fail() {
  echo "FAIL: $*" >&2
  local l
  for l in "$WORK"/dense*.log; do echo "--- $l:" >&2; tail -50 "$l" >&2 || true; done
  exit 1
}
start_dense() {
  local log=$1 pid port
  shift
  "$BIN/moesplit-dense" --grpc 127.0.0.1:0 --http 127.0.0.1:0 "$@" >/dev/null 2>"$log" &
  pid=$!
  echo "$pid" >>"$DENSE_PIDS"
  for _ in $(seq 1 300); do
    grep -q ready "$log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q ready "$log" || fail "dense service ($log) did not start"
  port=$(sed -n 's/.*http port \([0-9]*\).*/\1/p' "$log" | head -1)
  [[ -n $port ]] || fail "no http port on the ready line of $log"
  echo "http://127.0.0.1:$port"
}
