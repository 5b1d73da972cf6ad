# Sourced by the deploy tests: runs moesplit-dense and two expert-workers (one
# over shared memory, one over gRPC) on loopback with a small generated model,
# ports chosen by the services (port 0, read back from their "ready" lines),
# and stops them on exit. Sets DENSE_GRPC, DENSE_METRICS, W0_METRICS,
# W1_METRICS, W1_GRPC (HOST:PORT) and PIDS.
PIDS=()
stop_services() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  PIDS=()
}

# wait_ready LOG PID SECONDS: until LOG has a "ready" line; fails if PID exits.
wait_ready() {
  local log=$1 pid=$2 deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    grep -q ": ready " "$log" && return 0
    kill -0 "$pid" 2>/dev/null || { echo "FAIL: process exited: $(cat "$log")"; return 1; }
    sleep 0.1
  done
  echo "FAIL: not ready after $3 s: $(cat "$log")"
  return 1
}

# start_services BIN_DIR WORK
start_services() {
  local bin=$1 work=$2 name="moesplit-deploy-$$"
  "$bin/moesplit" make-test-model --out "$work/model.gguf" --type Q8_0 --threads 2 \
    >"$work/make.log" 2>&1 || { echo "FAIL: make-test-model: $(cat "$work/make.log")"; return 1; }
  "$bin/moesplit-expert-worker" --model "$work/model.gguf" --shard layers=0-1 \
    --listen-shm "$name" --metrics 127.0.0.1:0 --threads 1 --worker-id w0 2>"$work/w0.log" &
  PIDS+=($!)
  "$bin/moesplit-expert-worker" --model "$work/model.gguf" --shard layers=2-3 \
    --listen-grpc 127.0.0.1:0 --metrics 127.0.0.1:0 --threads 1 --worker-id w1 2>"$work/w1.log" &
  PIDS+=($!)
  wait_ready "$work/w0.log" "${PIDS[0]}" 60 || return 1
  wait_ready "$work/w1.log" "${PIDS[1]}" 60 || return 1
  W0_METRICS=127.0.0.1:$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$work/w0.log")
  W1_METRICS=127.0.0.1:$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$work/w1.log")
  W1_GRPC=$(sed -n 's/.*ready on \(grpc:\/\/\)\{0,1\}\(127\.0\.0\.1:[0-9]*\).*/\2/p' "$work/w1.log")
  "$bin/moesplit-dense" --model "$work/model.gguf" --experts "shm://$name,grpc://$W1_GRPC" \
    --grpc 127.0.0.1:0 --metrics 127.0.0.1:0 --threads 1 --ctx 256 2>"$work/dense.log" &
  PIDS+=($!)
  wait_ready "$work/dense.log" "${PIDS[2]}" 60 || return 1
  DENSE_GRPC=127.0.0.1:$(sed -n 's/.*ready on grpc port \([0-9]*\).*/\1/p' "$work/dense.log")
  DENSE_METRICS=127.0.0.1:$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$work/dense.log")
  for a in "$W0_METRICS" "$W1_METRICS" "$W1_GRPC" "$DENSE_GRPC" "$DENSE_METRICS"; do
    [[ $a =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] || {
      echo "FAIL: could not read the services' ports: '$a' $(cat "$work"/*.log)"; return 1; }
  done
}

# run_completion BIN_DIR WORK: one completion through the dense service, then
# waits (bounded) until the dense service's metrics show the expert calls.
run_completion() {
  local bin=$1 work=$2
  "$bin/moesplit" complete --addr "$DENSE_GRPC" --prompt "Hello world" -n 4 --timeout-ms 60000 \
    >"$work/complete.out" 2>"$work/complete.err" || {
    echo "FAIL: moesplit complete: $(cat "$work/complete.err")"; return 1; }
  for _ in $(seq 50); do
    curl -sf "http://$DENSE_METRICS/metrics" | grep -Eq '^moesplit_expert_client_calls_total\{.*\} [1-9]' && return 0
    sleep 0.1
  done
  echo "FAIL: the dense service's metrics show no expert call after a completion"
  return 1
}
