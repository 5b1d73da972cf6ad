#!/usr/bin/env bash
# deploy/docker-compose.yml (and docker-compose.tls.yml on top of it):
# `docker-compose config` (Debian's docker-compose) accepts them, and the
# resolved files keep what compose_check.py lists (HTTP API published on
# 127.0.0.1, secrets, disjoint cpusets, no :latest, grace period > drain
# timeout, Grafana without anonymous access, ...), with the defaults and with
# variables overridden; broken settings are caught by the same check, and a
# file with an unknown key is refused by docker-compose.
# Usage: compose_test.sh REPO_ROOT WORK_DIR
set -uo pipefail
REPO=$(cd "$1" && pwd)
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
command -v docker-compose >/dev/null || { echo "FAIL: no docker-compose (scripts/install-deps.sh installs it)"; exit 1; }
failures=0 passes=0
pass() { echo "ok   $1"; passes=$((passes + 1)); }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
BASE=$REPO/deploy/docker-compose.yml
TLS=$REPO/deploy/docker-compose.tls.yml
# The caller's environment must not change what is rendered.
unset $(compgen -v | grep '^MOESPLIT_') 2>/dev/null

# resolve NAME [VAR=VALUE...]: the resolved base and TLS files into WORK/NAME{,-tls}.yml.
resolve() {
  local name=$1
  shift
  env "$@" docker-compose -f "$BASE" config >"$WORK/$name.yml" 2>"$WORK/$name.err" &&
    env "$@" docker-compose -f "$BASE" -f "$TLS" config >"$WORK/$name-tls.yml" 2>>"$WORK/$name.err"
}
# promises NAME [VAR=VALUE...]: compose_check.py on NAME's resolved files.
promises() {
  local name=$1
  shift
  env "$@" python3 "$REPO/tests/deploy/compose_check.py" "$REPO" "$WORK/$name.yml" "$WORK/$name-tls.yml" \
    >"$WORK/$name.check" 2>&1
}

if resolve default; then pass "docker-compose config (base, and with the TLS file)"; else
  fail "docker-compose config: $(cat "$WORK/default.err")"; fi
if promises default; then pass "defaults: $(tail -n 1 "$WORK/default.check")"; cat "$WORK/default.check"; else
  fail "defaults:"; cat "$WORK/default.check"; fi

# The default image tag is the project's version (CMakeLists.txt) and the chart's appVersion.
version=$(sed -n 's/^project(moesplit VERSION \([0-9.]*\).*/\1/p' "$REPO/CMakeLists.txt")
app=$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$REPO/helm/moesplit/Chart.yaml")
if [[ -n $version && $version == "$app" ]] && grep -q "image: moesplit-dense:$version$" "$WORK/default.yml" &&
   grep -q "image: moesplit-expert-worker:$version$" "$WORK/default.yml"; then
  pass "default images are tagged $version (CMake project version = chart appVersion)"; else
  fail "default image tags: CMake $version, chart $app, compose $(grep 'image: moesplit' "$WORK/default.yml" | sort -u)"; fi

# Overridden: all interfaces, other ports and CPUs, a longer drain.
over=(MOESPLIT_BIND=0.0.0.0 MOESPLIT_HTTP_PORT=18080 MOESPLIT_DENSE_CPUS=0-3 MOESPLIT_WORKER_0_CPUS=4-9
      MOESPLIT_WORKER_1_CPUS=10-15 MOESPLIT_DRAIN_TIMEOUT_MS=60000 MOESPLIT_STOP_GRACE_PERIOD=1m30s
      MOESPLIT_VERSION=0.2.0)
if resolve override "${over[@]}" && promises override "${over[@]}" &&
   grep -q '0.0.0.0:18080:8080' "$WORK/override.yml" && grep -q 'cpuset: 4-9' "$WORK/override.yml" &&
   grep -q 'moesplit-dense:0.2.0' "$WORK/override.yml"; then
  pass "variables override bind address, ports, cpusets, drain and version"; else
  fail "overrides: $(cat "$WORK/override.err" "$WORK/override.check")"; fi

# Settings that break a promise are caught.
broken() {  # broken WHAT EXPECTED_LINE VAR=VALUE...
  local what=$1 want=$2
  shift 2
  if ! resolve broken "$@"; then fail "$what: docker-compose config: $(cat "$WORK/broken.err")"; return; fi
  if promises broken "$@"; then fail "the check accepted $what"
  elif grep -q "^FAIL $want" "$WORK/broken.check"; then pass "the check refuses $what"
  else fail "$what refused without '$want': $(grep FAIL "$WORK/broken.check")"; fi
}
broken "overlapping cpusets" "cpusets are disjoint" MOESPLIT_WORKER_1_CPUS=1-3
broken "a drain timeout longer than the grace period" "stop_grace_period" MOESPLIT_DRAIN_TIMEOUT_MS=60000
broken "a :latest image" "dense: image" MOESPLIT_VERSION=latest
# Ports published on another address than MOESPLIT_BIND says.
if resolve wide MOESPLIT_BIND=0.0.0.0 && ! promises wide && grep -q "^FAIL every published port" "$WORK/wide.check"; then
  pass "the check refuses ports published on 0.0.0.0 when 127.0.0.1 is expected"; else
  fail "ports on 0.0.0.0 not caught: $(cat "$WORK/wide.check")"; fi
sed -e 's/GF_AUTH_ANONYMOUS_ENABLED: "false"/GF_AUTH_ANONYMOUS_ENABLED: "true"/' \
    -e 's/- --http=0.0.0.0:8080/- --http=127.0.0.1:8080/' "$BASE" >"$WORK/edited.yml"
docker-compose -f "$WORK/edited.yml" config >"$WORK/edited-resolved.yml" 2>/dev/null
python3 "$REPO/tests/deploy/compose_check.py" "$REPO" "$WORK/edited-resolved.yml" >"$WORK/edited.check" 2>&1
if grep -q "^FAIL Grafana" "$WORK/edited.check" && grep -q "^FAIL dense serves the OpenAI HTTP API" "$WORK/edited.check"; then
  pass "the check refuses anonymous Grafana and an HTTP API on the container's loopback"; else
  fail "edited file not caught: $(cat "$WORK/edited.check")"; fi

sed 's/^    shm_size:/    shm_sizee:/' "$BASE" >"$WORK/broken-key.yml"
if docker-compose -f "$WORK/broken-key.yml" config >/dev/null 2>"$WORK/broken-key.err"; then
  fail "docker-compose config accepted an unknown key"
elif grep -q "shm_sizee" "$WORK/broken-key.err"; then
  pass "docker-compose config refuses an unknown key"
else
  fail "docker-compose config failed on the broken file for another reason: $(cat "$WORK/broken-key.err")"
fi
echo "compose: $passes passed, $failures failed"
exit $((failures > 0))
