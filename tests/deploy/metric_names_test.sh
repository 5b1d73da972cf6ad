#!/usr/bin/env bash
# Every metric name that the Prometheus rules and the Grafana dashboards use is
# exported by the real services: starts moesplit-dense and two expert-workers
# (tests/deploy/services.sh), runs one completion, scrapes all three /metrics
# and compares (promql_check.py names). Also checks `moesplit health`.
# Usage: metric_names_test.sh REPO_ROOT BIN_DIR WORK_DIR
set -uo pipefail
REPO=$(cd "$1" && pwd)
BIN=$2
WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
source "$REPO/tests/deploy/services.sh"
trap stop_services EXIT

failures=0 passes=0
pass() { echo "ok   $1"; passes=$((passes + 1)); }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }

start_services "$BIN" "$WORK" || exit 1
for addr in "$DENSE_GRPC" "$W1_GRPC"; do
  if out=$("$BIN/moesplit" health --addr "$addr" 2>&1) && [[ $out == SERVING ]]; then
    pass "moesplit health $addr: $out"; else fail "moesplit health $addr: $out"; fi
done
# A port nobody serves: not healthy, one error line, non-zero exit.
"$BIN/moesplit" health --addr 127.0.0.1:1 --timeout-ms 500 >"$WORK/h.out" 2>"$WORK/h.err"
rc=$?
if [[ $rc != 0 && $(wc -l <"$WORK/h.err") == 1 ]] && grep -q "^moesplit: 127.0.0.1:1" "$WORK/h.err"; then
  pass "moesplit health on a closed port exits $rc"; else
  fail "moesplit health on a closed port: rc=$rc $(cat "$WORK/h.out" "$WORK/h.err")"; fi

"$BIN/moesplit" complete --addr 127.0.0.1:1 --prompt hi --timeout-ms 500 >"$WORK/c.out" 2>"$WORK/c.err"
rc=$?
if [[ $rc != 0 ]] && grep -q "^moesplit: 127.0.0.1:1" "$WORK/c.err"; then
  pass "moesplit complete against a closed port exits $rc"; else
  fail "moesplit complete against a closed port: rc=$rc $(cat "$WORK/c.err")"; fi
run_completion "$BIN" "$WORK" || exit 1
pass "one completion through the dense service: $(tail -n 1 "$WORK/complete.err")"
# The dense service's per-call histograms are observed, not only exported.
curl -sf "http://$DENSE_METRICS/metrics" >"$WORK/dense.metrics"
for h in moesplit_expert_roundtrip_seconds moesplit_expert_worker_seconds moesplit_expert_call_tokens; do
  if grep -Eq "^${h}_count(\{\})? [1-9]" "$WORK/dense.metrics"; then
    pass "$h observed: $(grep -E "^${h}_count" "$WORK/dense.metrics")"; else
    fail "$h never observed: $(grep -E "^${h}_count" "$WORK/dense.metrics")"; fi
done
if python3 "$REPO/tests/deploy/promql_check.py" names "$REPO" \
     "http://$DENSE_METRICS/metrics" "http://$W0_METRICS/metrics" "http://$W1_METRICS/metrics"; then
  pass "metric names"; else fail "metric names (see the list above)"; fi
echo "metric names: $passes passed, $failures failed"
exit $((failures > 0))
