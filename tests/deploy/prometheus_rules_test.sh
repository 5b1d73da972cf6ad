#!/usr/bin/env bash
# The alert rules and the Prometheus config: promtool check rules / check
# config, the rules' unit tests (promtool test rules), and every PromQL
# expression of the rules and the Grafana dashboards parses.
# Usage: prometheus_rules_test.sh REPO_ROOT WORK_DIR
set -uo pipefail
REPO=$(cd "$1" && pwd)
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
command -v promtool >/dev/null || { echo "FAIL: no promtool (Debian's prometheus package; scripts/install-deps.sh)"; exit 1; }
failures=0 passes=0
check() {  # check NAME COMMAND...
  local name=$1
  shift
  if out=$("$@" 2>&1); then echo "ok   $name"; passes=$((passes + 1)); else
    echo "FAIL $name:"; echo "$out"; failures=$((failures + 1)); fi
}
check "promtool check rules" promtool check rules "$REPO"/deploy/prometheus/rules/*.yml
check "promtool test rules" bash -c "cd '$REPO/deploy/prometheus/tests' && promtool test rules *.test.yml"
check "promtool check config" promtool check config --syntax-only "$REPO/deploy/prometheus/prometheus.yml"
check "PromQL name extractor self-test" python3 "$REPO/tests/deploy/promql_check.py" selftest
mkdir -p "$WORK/dashboards"
check "dashboards are what deploy/grafana/make_dashboards.py writes" bash -c \
  "python3 '$REPO/deploy/grafana/make_dashboards.py' '$WORK/dashboards' && diff -r '$WORK/dashboards' '$REPO/deploy/grafana/dashboards'"
check "Grafana dashboards are well formed" python3 "$REPO/tests/deploy/promql_check.py" dashboards "$REPO"
check "every rule and dashboard expression parses" python3 "$REPO/tests/deploy/promql_check.py" parse "$REPO" "$WORK"
# A broken expression must be caught by the same path.
mkdir -p "$WORK/broken/deploy/prometheus/rules" "$WORK/broken/deploy/grafana/dashboards"
printf 'groups:\n- name: x\n  rules:\n  - alert: Broken\n    expr: sum(rate(moesplit_expert_calls_total[5m])\n' \
  >"$WORK/broken/deploy/prometheus/rules/broken.yml"
if python3 "$REPO/tests/deploy/promql_check.py" parse "$WORK/broken" "$WORK/broken-out" >"$WORK/broken.out" 2>&1 ||
   ! grep -q "FAIL: promtool rejects" "$WORK/broken.out"; then
  echo "FAIL a broken expression was not rejected by promtool: $(cat "$WORK/broken.out")"; failures=$((failures + 1)); else
  echo "ok   a broken expression is rejected"; passes=$((passes + 1)); fi
echo "prometheus rules: $passes passed, $failures failed"
exit $((failures > 0))
