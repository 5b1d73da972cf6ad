#!/usr/bin/env bash
# The Helm chart helm/moesplit: lint, render with several value sets and
# validate every manifest against the Kubernetes schemas (validate_k8s.mjs),
# check what the chart promises (shards cover every layer exactly once, gRPC
# across pods or shm co-location, ServiceMonitor; and helm_promises.py: the
# OpenAI HTTP API with its Service port and probes, drain and grace period,
# PodDisruptionBudgets, the worker rollout, NetworkPolicies, API keys and TLS
# from Secrets, Guaranteed QoS, threads = CPU request, IPC_LOCK, huge pages,
# topology spread), what NOTES.txt says, and that bad values are refused. Tools come from npm (tools.sh); a failed install fails the test.
# Usage: helm_chart_test.sh REPO_ROOT WORK_DIR TOOLS_PREFIX
set -uo pipefail
REPO=$(cd "$1" && pwd)
WORK=$2
PREFIX=$3
CHART=$REPO/helm/moesplit
TESTS=$REPO/tests/deploy
rm -rf "$WORK"
mkdir -p "$WORK"

failures=0 passes=0
pass() { echo "ok   $1"; passes=$((passes + 1)); }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }

source "$TESTS/tools.sh"
deploy_tools "$PREFIX" || exit 1
cp "$TESTS/validate_k8s.mjs" "$TOOLS_DIR/validate_k8s.mjs"
validate() { (cd "$TOOLS_DIR" && node validate_k8s.mjs "$1"); }

if out=$("$HELM" lint --strict "$CHART" 2>&1); then pass "helm lint --strict"; else fail "helm lint: $out"; fi

# render NAME ARGS...: helm template into $WORK/NAME.yaml (tests included).
render() {
  local name=$1
  shift
  "$HELM" template rel "$CHART" --namespace ml "$@" >"$WORK/$name.yaml" 2>"$WORK/$name.err"
}

declare -A SETS=(
  [default]=""
  [colocated]="--set coLocation.enabled=true --set expertWorker.replicas=3"
  [servicemonitor]="--set serviceMonitor.enabled=true --set expertWorker.replicas=4 --set model.layers=94"
  [colocated-monitor]="--set coLocation.enabled=true --set serviceMonitor.enabled=true --set dense.gpus=0 --set expertWorker.resources.requests.cpu=2500m"
  [secure]="--set tls.enabled=true --set apiKeys.enabled=true --set apiKeys.keys={key-one,key-two}
    --set dense.guaranteedQoS=true --set expertWorker.guaranteedQoS=true --set expertWorker.hugepages2Mi=4Gi
    --set dense.replicas=2 --set podDisruptionBudget.dense.maxUnavailable=1 --set dense.drainTimeoutMs=120000
    --set expertWorker.updateStrategy=RollingUpdate --set expertWorker.threads=6 --set tls.serverName=workers.example
    --set networkPolicy.apiFrom[0].namespaceSelector.matchLabels.team=ml
    --set expertWorker.topologySpreadConstraints[0].maxSkew=1
    --set expertWorker.topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname
    --set expertWorker.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule"
  [deepseek-v3]="-f $CHART/values-deepseek-v3.yaml"
  [deepseek-split]="-f $CHART/values-deepseek-v3.yaml --set expertWorker.replicas=5
    --set-json expertWorker.shards=[\"layers=0-17\",\"layers=18-31\",\"layers=32-46\",\"layers=47-60,experts=0-127\",\"layers=47-60,experts=128-255\"]"
  [colocated-secure]="--set coLocation.enabled=true --set tls.enabled=true --set apiKeys.enabled=true
    --set apiKeys.existingSecret=my-keys --set tls.denseSecret=my-cert --set tls.caSecret=my-cert"
  [replicas]="--set expertWorker.replicas=3 --set expertWorker.replicasPerShard=2 --set tls.enabled=true"
  [replicas-deepseek]="-f $CHART/values-deepseek-v3.yaml --set expertWorker.replicasPerShard=3"
  [lws]="--set leaderWorkerSet.enabled=true --set expertWorker.replicas=4 --set leaderWorkerSet.groups=3"
)
for name in default colocated servicemonitor colocated-monitor secure colocated-secure \
            deepseek-v3 deepseek-split replicas replicas-deepseek lws; do
  # shellcheck disable=SC2086
  if ! render "$name" ${SETS[$name]}; then fail "render $name: $(cat "$WORK/$name.err")"; continue; fi
  if out=$(validate "$WORK/$name.yaml"); then pass "$out"; else fail "$out"; fi
done

# What each value set must produce.
if out=$(python3 - "$WORK" <<'PY' 2>&1
import re, subprocess, sys, yaml
work = sys.argv[1]
def load(name):
    return [d for d in yaml.safe_load_all(open(f"{work}/{name}.yaml")) if d]
def one(docs, kind, suffix=""):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {len(found)} found"
    return found[0]
def arg(container, flag):
    vals = [a.split("=", 1)[1] for a in container["args"] if a.startswith(flag + "=")]
    assert len(vals) == 1, f"{container['name']}: {flag} given {len(vals)} times"
    return vals[0]

def wrapper_shards(sts, n):
    """The --shard each ordinal's shell wrapper passes to a stub worker; ordinal n is refused."""
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][:2] == ["/bin/sh", "-c"], c["command"]
    out = []
    for i in range(n + 1):
        stub = f"{work}/stub"
        import os
        os.makedirs(stub, exist_ok=True)
        with open(f"{stub}/moesplit-expert-worker", "w") as f:
            f.write('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
        os.chmod(f"{stub}/moesplit-expert-worker", 0o755)
        r = subprocess.run(["/bin/sh", "-c", c["command"][2], c["command"][3], *c["args"]],
                           env={"PATH": f"{stub}:/usr/bin:/bin", "HOSTNAME": f"{sts['metadata']['name']}-{i}"},
                           capture_output=True, text=True)
        if i == n:
            assert r.returncode == 2 and "only" in r.stderr, f"ordinal {i} of {n} accepted: {r.stdout}{r.stderr}"
            continue
        assert r.returncode == 0, r.stderr
        shard = [a for a in r.stdout.split("\n") if a.startswith("--shard=")]
        assert len(shard) == 1, r.stdout
        out.append(shard[0][len("--shard="):])
    return out

def shards_of_wrapper(sts, layers, n):
    """The layer ranges of an even split; they cover every layer once."""
    out = []
    for s in wrapper_shards(sts, n):
        m = re.fullmatch(r"layers=(\d+)-(\d+)", s)
        assert m, s
        out.append((int(m.group(1)), int(m.group(2))))
    covered = [l for b, e in out for l in range(b, e + 1)]
    assert covered == list(range(layers)), f"shards {out} do not cover layers 0-{layers - 1} once each"
    return out

# default: 2 gRPC shards of 48 layers in a StatefulSet behind a headless Service.
d = load("default")
sts = one(d, "StatefulSet")
assert sts["spec"]["replicas"] == 2
assert shards_of_wrapper(sts, 48, 2) == [(0, 23), (24, 47)]
dense = one(d, "Deployment")["spec"]["template"]["spec"]
assert arg(dense["containers"][0], "--experts") == ",".join(
    f"grpc://rel-moesplit-expert-worker-{i}.rel-moesplit-expert-worker.ml.svc:50061" for i in range(2))
assert dense["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
assert one(d, "Service", "expert-worker")["spec"]["clusterIP"] == "None"
assert not [x for x in d if x["kind"] == "ServiceMonitor"]
test = one(d, "Pod")
assert test["metadata"]["annotations"]["helm.sh/hook"] == "test"
assert test["spec"]["containers"][0]["args"][:2] == ["complete", "--addr=rel-moesplit-dense.ml.svc:50051"]

# 4 shards of 94 layers.
s = load("servicemonitor")
assert shards_of_wrapper(one(s, "StatefulSet"), 94, 4) == [(0, 22), (23, 46), (47, 69), (70, 93)]

# deepseek-v3 (values-deepseek-v3.yaml): explicit shards, each (layer,
# expert) of the 61 x 256 owned exactly once; and a layer split by expert id
# across two workers (deepseek-split).
def pairs(shards, n_layer=61, n_expert=256):
    owned = []
    for s in shards:
        m = re.fullmatch(r"layers=(\d+)(?:-(\d+))?(?:,experts=(\d+)-(\d+))?", s)
        assert m, s
        lb = int(m.group(1)); le = int(m.group(2) or lb)
        eb, ee = (int(m.group(3)), int(m.group(4))) if m.group(3) else (0, n_expert - 1)
        owned += [(l, e) for l in range(lb, le + 1) for e in range(eb, ee + 1)]
    assert sorted(owned) == [(l, e) for l in range(n_layer) for e in range(n_expert)], \
        f"shards {shards} do not own every (layer, expert) once"
for name, n in (("deepseek-v3", 4), ("deepseek-split", 5)):
    docs = load(name)
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["replicas"] == n, sts["spec"]["replicas"]
    got = wrapper_shards(sts, n)
    pairs(got)
    w = sts["spec"]["template"]["spec"]["containers"][0]
    assert w["resources"]["requests"]["memory"] == "110Gi", w["resources"]
    assert w["resources"]["limits"]["memory"] == "110Gi", w["resources"]  # Guaranteed QoS
    assert arg(w, "--numa") == "auto"
    dense = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert len(arg(dense, "--experts").split(",")) == n
    assert arg(dense, "--ctx") == "65536", arg(dense, "--ctx")
assert wrapper_shards(one(load("deepseek-split"), "StatefulSet"), 5)[3:] == [
    "layers=47-60,experts=0-127", "layers=47-60,experts=128-255"]
sm = one(s, "ServiceMonitor")
assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]

# co-located: 3 worker containers in the dense pod over shm, no StatefulSet.
c = load("colocated")
assert not [x for x in c if x["kind"] == "StatefulSet"]
pod = one(c, "Deployment")["spec"]["template"]["spec"]
names = [x["name"] for x in pod["containers"]]
assert names == ["dense", "expert-worker-0", "expert-worker-1", "expert-worker-2"], names
assert arg(pod["containers"][0], "--experts") == "shm://moesplit-w0,shm://moesplit-w1,shm://moesplit-w2"
shm = [v for v in pod["volumes"] if v["name"] == "shm"][0]
assert shm["emptyDir"]["medium"] == "Memory", shm
for x in pod["containers"]:
    assert {"name": "shm", "mountPath": "/dev/shm"} in x["volumeMounts"], x["name"]
assert [arg(x, "--shard") for x in pod["containers"][1:]] == ["layers=0-15", "layers=16-31", "layers=32-47"]
assert [arg(x, "--listen-shm") for x in pod["containers"][1:]] == ["moesplit-w0", "moesplit-w1", "moesplit-w2"]
for docs in (d, c):
    jobs = sorted(x["metadata"]["labels"]["moesplit.io/job"] for x in docs if x["kind"] == "Service")
    assert jobs == ["moesplit-dense", "moesplit-expert-worker"], jobs
cm = load("colocated-monitor")
assert one(cm, "ServiceMonitor")["spec"]["jobLabel"] == "moesplit.io/job"
assert [e["port"] for e in one(cm, "ServiceMonitor")["spec"]["endpoints"]] == ["metrics", "metrics-w0", "metrics-w1"]
assert "nvidia.com/gpu" not in one(cm, "Deployment")["spec"]["template"]["spec"]["containers"][0]["resources"].get("limits", {})

# Replicas per shard: one StatefulSet per shard (its pods the replicas, rolled
# one at a time), a PDB per shard that lets one go, the dense service naming
# each shard's replicas A|B.
r = load("replicas")
sets = sorted((x for x in r if x["kind"] == "StatefulSet"), key=lambda x: x["metadata"]["name"])
assert [x["metadata"]["name"] for x in sets] == [f"rel-moesplit-expert-worker-s{i}" for i in range(3)]
for i, st in enumerate(sets):
    assert st["spec"]["replicas"] == 2
    assert st["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert st["spec"]["minReadySeconds"] == 5
    assert st["spec"]["serviceName"] == "rel-moesplit-expert-worker"
    assert st["spec"]["selector"]["matchLabels"]["moesplit.io/shard"] == str(i)
    c = st["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][:2] == ["moesplit-expert-worker", f"--shard=layers={i * 16}-{i * 16 + 15}"], c["command"]
    assert arg(c, "--tls-cert") == "/etc/moesplit/tls/tls.crt"
pdbs = {x["metadata"]["name"]: x["spec"] for x in r if x["kind"] == "PodDisruptionBudget"}
assert set(pdbs) == {"rel-moesplit-dense"} | {f"rel-moesplit-expert-worker-s{i}" for i in range(3)}, pdbs
for i in range(3):
    b = pdbs[f"rel-moesplit-expert-worker-s{i}"]
    assert b["maxUnavailable"] == 1 and b["selector"]["matchLabels"]["moesplit.io/shard"] == str(i), b
experts = arg(one(r, "Deployment")["spec"]["template"]["spec"]["containers"][0], "--experts")
assert experts == ",".join("|".join(
    f"grpc://rel-moesplit-expert-worker-s{i}-{k}.rel-moesplit-expert-worker.ml.svc:50061" for k in range(2))
    for i in range(3)), experts
# deepseek-v3's explicit shards, 3 replicas each: every (layer, expert) once per replica group.
rd = load("replicas-deepseek")
sets = sorted((x for x in rd if x["kind"] == "StatefulSet"), key=lambda x: x["metadata"]["name"])
assert len(sets) == 4 and all(x["spec"]["replicas"] == 3 for x in sets)
pairs([x["spec"]["template"]["spec"]["containers"][0]["command"][1][len("--shard="):] for x in sets])
assert all(len(g.split("|")) == 3 for g in arg(one(rd, "Deployment")["spec"]["template"]["spec"]["containers"][0], "--experts").split(","))

# LeaderWorkerSet: groups of leader (dense) + 4 workers (shards), no Deployment
# or StatefulSet; the leader's wrapper dials its group's workers, each
# worker's wrapper picks its shard from LWS_WORKER_INDEX.
l = load("lws")
assert not [x for x in l if x["kind"] in ("Deployment", "StatefulSet")]
lws = one(l, "LeaderWorkerSet")["spec"]
assert lws["replicas"] == 3 and lws["leaderWorkerTemplate"]["size"] == 5
assert lws["rolloutStrategy"]["rollingUpdateConfiguration"]["maxUnavailable"] == 1
leader = lws["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
stub = f"{work}/stub"
with open(f"{stub}/moesplit-dense", "w") as f:
    f.write('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
import os
os.chmod(f"{stub}/moesplit-dense", 0o755)
out = subprocess.run(["/bin/sh", "-c", leader["command"][2], leader["command"][3], *leader["args"]],
                     env={"PATH": f"{stub}:/usr/bin:/bin", "LWS_LEADER_ADDRESS": "rel-moesplit-1.rel-moesplit.ml"},
                     capture_output=True, text=True, check=True).stdout.split("\n")
assert "--experts=" + ",".join(f"grpc://rel-moesplit-1-{i}.rel-moesplit.ml:50061" for i in range(1, 5)) in out, out
worker = lws["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
got = []
for i in range(1, 6):
    w = subprocess.run(["/bin/sh", "-c", worker["command"][2], worker["command"][3], *worker["args"]],
                       env={"PATH": f"{stub}:/usr/bin:/bin", "LWS_WORKER_INDEX": str(i), "HOSTNAME": "h"},
                       capture_output=True, text=True)
    if i == 5:
        assert w.returncode == 2 and "no shard" in w.stderr, w
        continue
    got += [a for a in w.stdout.split("\n") if a.startswith("--shard=")]
assert got == [f"--shard=layers={b}-{b + 11}" for b in (0, 12, 24, 36)], got
print("rendered objects are what the values ask for")
PY
); then pass "$out"; else fail "chart structure: $out"; fi
if out=$(python3 "$TESTS/helm_promises.py" "$WORK" 2>&1); then pass "$out"; else fail "chart promises: $out"; fi

# The inference-gateway example (deploy/gateway/inferencepool.yaml) against a
# release named as it assumes, with two dense replicas: the pool selects the
# dense pods and targets their HTTP port; the route's backend is the pool.
if "$HELM" template moesplit "$CHART" --set dense.replicas=2 --set podDisruptionBudget.dense.maxUnavailable=1 \
     >"$WORK/gateway.yaml" 2>"$WORK/gateway.err"; then
  printf -- '---\n' >>"$WORK/gateway.yaml"
  cat "$REPO/deploy/gateway/inferencepool.yaml" >>"$WORK/gateway.yaml"
  if out=$(validate "$WORK/gateway.yaml"); then pass "gateway example: $out"; else fail "gateway example: $out"; fi
  sed 's/number: 8080/number: 8081/' "$WORK/gateway.yaml" >"$WORK/broken-gateway.yaml"
  if out=$(validate "$WORK/broken-gateway.yaml"); then fail "validator accepted a pool on no container port"
  else pass "validator rejects a pool on no container port: $(echo "$out" | sed -n 2p)"; fi
else
  fail "render for the gateway example: $(cat "$WORK/gateway.err")"
fi

# NOTES.txt renders (a client-side dry-run install needs no cluster) and says
# how to reach the HTTP API and what an upgrade costs.
notes() {  # notes WHAT PATTERN... -- HELM_ARGS...
  local what=$1 ok=1 patterns=()
  shift
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  "$HELM" install rel "$CHART" --dry-run=client --namespace ml "$@" >"$WORK/notes.out" 2>&1 || ok=0
  for p in "${patterns[@]}"; do grep -qF -- "$p" "$WORK/notes.out" || { ok=0; echo "  NOTES lack: $p"; }; done
  if ((ok)); then pass "NOTES.txt: $what"; else fail "NOTES.txt $what: $(sed -n '/^NOTES:/,$p' "$WORK/notes.out")"; fi
}
notes "defaults" "helm test rel -n ml" "moesplit complete --addr" "base_url http://rel-moesplit-dense.ml.svc:8080/v1" \
  "curl http://127.0.0.1:8080/v1/chat/completions" "ONE outage" \
  "kubectl -n ml delete pod -l app.kubernetes.io/instance=rel,app.kubernetes.io/component=expert-worker" \
  "terminationGracePeriodSeconds 45" "kubectl drain" --
notes "co-located" "helm test rel -n ml" "recreates the one pod: one outage" -- \
  --set coLocation.enabled=true --set serviceMonitor.enabled=true
notes "replicas per shard" "a worker restart is no outage" "0 failed requests" "3 model loads" \
  "2 live replica(s)" "one outage" -- --set expertWorker.replicasPerShard=3
notes "rolling update, TLS and keys" "3 outages" "base_url https://" "Authorization: Bearer" -- \
  --set expertWorker.updateStrategy=RollingUpdate --set expertWorker.replicas=3 --set tls.enabled=true \
  --set apiKeys.enabled=true --set apiKeys.existingSecret=k

# Bad values are refused (values.schema.json, templates/validate.yaml).
refuse() {
  local what=$1 want=$2
  shift 2
  if "$HELM" template rel "$CHART" "$@" >/dev/null 2>"$WORK/refuse.err"; then
    fail "accepted $what"
  elif grep -q -- "$want" "$WORK/refuse.err"; then
    pass "refuses $what"
  else
    fail "refuses $what but without '$want': $(cat "$WORK/refuse.err")"
  fi
}
refuse "a non-integer replica count" "replicas" --set expertWorker.replicas=two
refuse "zero workers" "replicas" --set expertWorker.replicas=0
refuse "an unknown value key" "replicaz" --set expertWorker.replicaz=2
refuse "more workers than layers" "must not exceed model.layers" --set expertWorker.replicas=5 --set model.layers=4
refuse "shards not one per worker" "one --shard per worker" --set expertWorker.replicas=3 \
  --set-json 'expertWorker.shards=["layers=0-23","layers=24-47"]'
refuse "a malformed shard" "shards" --set-json 'expertWorker.shards=["layers=0-23","rows=24-47"]'
refuse "an absolute model file" "file" --set model.file=/etc/passwd.gguf
refuse "co-location with 2 dense replicas" "coLocation.enabled needs" --set coLocation.enabled=true --set dense.replicas=2
refuse "a dense PDB that lets the only pod go" "must be below dense.replicas" --set podDisruptionBudget.dense.maxUnavailable=1
refuse "a worker PDB value (always 0)" "expertWorker" --set podDisruptionBudget.expertWorker.maxUnavailable=1
refuse "Guaranteed QoS with a fractional CPU" "integer expertWorker.resources.requests.cpu" \
  --set expertWorker.guaranteedQoS=true --set expertWorker.resources.requests.cpu=2500m
refuse "API keys without keys" "apiKeys.enabled needs" --set apiKeys.enabled=true
refuse "an unknown rollout" "updateStrategy" --set expertWorker.updateStrategy=Blue
refuse "an HTTP port out of range" "httpPort" --set dense.httpPort=70000
refuse "replicas per shard when co-located" "replicasPerShard must be 1" --set coLocation.enabled=true \
  --set expertWorker.replicasPerShard=2
refuse "17 replicas per shard" "replicasPerShard" --set expertWorker.replicasPerShard=17
refuse "LeaderWorkerSet with TLS" "leaderWorkerSet.enabled does not combine" --set leaderWorkerSet.enabled=true \
  --set tls.enabled=true

# The validator itself rejects broken manifests.
python3 - "$WORK/default.yaml" "$WORK" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
def save(name, ds):
    with open(f"{sys.argv[2]}/{name}.yaml", "w") as f:
        yaml.safe_dump_all(ds, f)
import copy
a = copy.deepcopy(docs)
next(d for d in a if d["kind"] == "StatefulSet")["spec"]["replicas"] = "two"
save("broken-type", a)
b = copy.deepcopy(docs)
del next(d for d in b if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
save("broken-probe", b)
c = copy.deepcopy(docs)
next(d for d in c if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None")["spec"]["ports"][0]["targetPort"] = "grpcx"
save("broken-port", c)
e = copy.deepcopy(docs)
next(d for d in e if d["kind"] == "NetworkPolicy")["spec"]["ingress"][0]["ports"][0]["port"] = "grpcx"
save("broken-netpol", e)
f = copy.deepcopy(docs)
next(d for d in f if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = "htp"
save("broken-http-probe", f)
PY
for name in broken-type broken-probe broken-port broken-netpol broken-http-probe; do
  if out=$(validate "$WORK/$name.yaml"); then fail "validator accepted $name"; else pass "validator rejects $name: $(echo "$out" | sed -n 2p)"; fi
done

echo "helm chart: $passes passed, $failures failed"
exit $((failures > 0))
