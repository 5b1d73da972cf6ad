#!/usr/bin/env bash
# A real Prometheus (Debian's) scrapes a running dense service and two
# expert-workers on loopback, loads the alert rules, and answers a query for
# the expert activation counter through its HTTP API. Bounded waits; every
# process is stopped on exit.
# Usage: prometheus_scrape_test.sh REPO_ROOT BIN_DIR WORK_DIR
set -uo pipefail
REPO=$(cd "$1" && pwd)
BIN=$2
WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
source "$REPO/tests/deploy/services.sh"
trap stop_services EXIT
command -v prometheus >/dev/null || { echo "FAIL: no prometheus binary (scripts/install-deps.sh installs it)"; exit 1; }

start_services "$BIN" "$WORK" || exit 1
run_completion "$BIN" "$WORK" || exit 1

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$WORK/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $REPO/deploy/prometheus/rules/*.yml
scrape_configs:
  - job_name: moesplit-dense
    static_configs:
      - targets: ["$DENSE_METRICS"]
  - job_name: moesplit-expert-worker
    static_configs:
      - targets: ["$W0_METRICS", "$W1_METRICS"]
YML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PORT" --log.level=warn >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)

API=http://127.0.0.1:$PORT/api/v1
# query EXPR: prints the JSON result of an instant query.
query() { curl -sf --get --data-urlencode "query=$1" "$API/query"; }
value_of() {  # the single sample's value of a JSON query answer, or nothing
  python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if len(r)==1 else "")'
}
deadline=$((SECONDS + 60))
want_ok=0
while ((SECONDS < deadline)); do
  ups=$(query 'sum(up{job=~"moesplit.*"})' | value_of 2>/dev/null)
  acts=$(query 'sum(moesplit_expert_activations_total{job="moesplit-expert-worker"})' | value_of 2>/dev/null)
  if [[ $ups == 3 && -n $acts ]] && python3 -c "import sys; sys.exit(0 if float('$acts') > 0 else 1)"; then
    want_ok=1
    break
  fi
  kill -0 "${PIDS[-1]}" 2>/dev/null || { echo "FAIL: prometheus exited: $(cat "$WORK/prometheus.log")"; exit 1; }
  sleep 0.5
done
if ((want_ok == 0)); then
  echo "FAIL: after 60 s: up=$ups activations=$acts; $(tail -n 5 "$WORK/prometheus.log")"
  exit 1
fi
echo "ok   prometheus scraped 3 targets; sum(moesplit_expert_activations_total) = $acts"

# Both workers' layers appear in the heat map (worker 0: layers 0-1, worker 1: 2-3).
layers=$(query 'count by (layer) (moesplit_expert_activations_total)' |
  python3 -c 'import json,sys; print(" ".join(sorted(r["metric"]["layer"] for r in json.load(sys.stdin)["data"]["result"])))')
if [[ $layers != "0 1 2 3" ]]; then echo "FAIL: heat-map layers '$layers', want '0 1 2 3'"; exit 1; fi
echo "ok   activations of layers $layers"

rules=$(curl -sf "$API/rules" | python3 -c 'import json,sys; print(sum(len(g["rules"]) for g in json.load(sys.stdin)["data"]["groups"]))')
if [[ $rules -lt 6 ]]; then echo "FAIL: prometheus loaded $rules rules, want 6"; exit 1; fi
echo "ok   prometheus loaded $rules alert rules"
echo "prometheus scrape: 3 passed, 0 failed"
