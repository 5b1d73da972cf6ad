#!/usr/bin/env bash
# deploy/docker-compose.yml: `docker-compose config` (Debian's docker-compose)
# accepts it, and the resolved file has what the shm transport and the GPU
# need; a file with an unknown key is refused by the same command.
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

if docker-compose -f "$REPO/deploy/docker-compose.yml" config >"$WORK/resolved.yml" 2>"$WORK/err"; then
  pass "docker-compose config"; else fail "docker-compose config: $(cat "$WORK/err")"; fi
if out=$(python3 - "$WORK/resolved.yml" "$REPO" <<'PY' 2>&1
import os, sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
repo = sys.argv[2]
s = c["services"]
workers = sorted(k for k in s if k.startswith("expert-worker"))
assert len(workers) >= 1, "no expert-worker"
owner = [w for w in workers if s[w].get("ipc") == "shareable"]
assert len(owner) == 1, f"one worker must own a shareable IPC namespace: {owner}"
owner = owner[0]
assert s[owner].get("shm_size"), "the IPC owner has no shm_size"
for name in workers + ["dense"]:
    if name != owner:
        assert s[name].get("ipc") == f"service:{owner}", f"{name} does not share {owner}'s IPC namespace"
for w in workers:
    assert s[w]["ulimits"]["memlock"] == {"soft": -1, "hard": -1}, f"{w}: memlock not unlimited"
    assert s[w]["healthcheck"]["test"][1:3] == ["moesplit", "health"], w
shm = [a.split("=", 1)[1] for a in s["dense"]["command"] if a.startswith("--experts=")][0]
names = [a.split("=", 1)[1] for w in workers for a in s[w]["command"] if a.startswith("--listen-shm=")]
assert shm == ",".join("shm://" + n for n in names), f"dense --experts {shm} vs workers {names}"
dev = s["dense"]["deploy"]["resources"]["reservations"]["devices"][0]
assert dev["driver"] == "nvidia" and "gpu" in dev["capabilities"], dev
for w in workers:
    assert s["dense"]["depends_on"][w]["condition"] == "service_healthy", w
prom = yaml.safe_load(open(os.path.join(repo, "deploy/prometheus/prometheus.yml")))
targets = {t for j in prom["scrape_configs"] for sc in j["static_configs"] for t in sc["targets"]}
want = {"dense:9400"} | {f"{w}:9401" for w in workers}
assert targets == want, f"prometheus scrapes {targets}, want {want}"
for v in s["grafana"]["volumes"]:
    src = v.split(":")[0] if isinstance(v, str) else v["source"]
    if src.startswith("/") or src.startswith("."):
        assert os.path.isdir(src), f"grafana mounts missing {src}"
print(f"dense + {len(workers)} workers share {owner}'s IPC namespace; GPU reserved; Prometheus scrapes all")
PY
); then pass "$out"; else fail "compose structure: $out"; fi

sed 's/^    shm_size:/    shm_sizee:/' "$REPO/deploy/docker-compose.yml" >"$WORK/broken.yml"
if docker-compose -f "$WORK/broken.yml" config >/dev/null 2>"$WORK/broken.err"; then
  fail "docker-compose config accepted an unknown key"
elif grep -q "shm_sizee" "$WORK/broken.err"; then
  pass "docker-compose config refuses an unknown key"
else
  fail "docker-compose config failed on the broken file for another reason: $(cat "$WORK/broken.err")"
fi
echo "compose: $passes passed, $failures failed"
exit $((failures > 0))
