#!/usr/bin/env python3
"""What the Helm chart promises for serving, rendered with several value sets.

  helm_promises.py WORK

WORK holds `helm template` outputs named by value set (helm_chart_test.sh's
SETS): default, secure, colocated, colocated-secure, colocated-monitor.
Checks the OpenAI HTTP API (--http, container port, Service port, probes on
/health and /health/live), the drain (--drain-timeout, preStop,
terminationGracePeriodSeconds longer than both), PodDisruptionBudgets that no
single eviction gets past, the worker rollout (OnDelete or RollingUpdate, in
parallel), NetworkPolicies (workers: gRPC only from this release's dense pods,
metrics only from the Prometheus peers), API keys and TLS from Secrets mounted
read-only, Guaranteed QoS when asked, --threads = the CPU request, IPC_LOCK,
huge pages and topology spread. Prints one line; raises on a broken promise.
"""
import sys

import yaml

WORK = sys.argv[1]


def load(name):
    return [d for d in yaml.safe_load_all(open(f"{WORK}/{name}.yaml")) if d]


def one(docs, kind, suffix=""):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {len(found)} found"
    return found[0]


def arg(c, flag):
    vals = [a.split("=", 1)[1] for a in c["args"] if a.startswith(flag + "=")]
    assert len(vals) <= 1, f"{c['name']}: {flag} given {len(vals)} times"
    return vals[0] if vals else None


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def port_of(c, name):
    return next(p["containerPort"] for p in c["ports"] if p["name"] == name)


def qos(pod):
    """The Kubernetes QoS class of a pod spec (cpu and memory)."""
    res = [c.get("resources", {}) for c in pod["containers"]]

    def equal(r, k):
        lim = r.get("limits", {}).get(k)
        return lim is not None and str(r.get("requests", {}).get(k, lim)) == str(lim)

    if all(equal(r, "cpu") and equal(r, "memory") for r in res):
        return "Guaranteed"
    return "Burstable" if any(r.get("requests") or r.get("limits") for r in res) else "BestEffort"


def mounted(pod, c, path):
    """The volume mounted read-only at path in container c."""
    m = [m for m in c["volumeMounts"] if m["mountPath"] == path]
    assert len(m) == 1 and m[0].get("readOnly") is True, f"{c['name']}: {path} not mounted read-only: {m}"
    return next(v for v in pod["volumes"] if v["name"] == m[0]["name"])


for name in ("default", "secure", "colocated", "colocated-secure"):
    docs = load(name)
    dep = one(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    dense = pod["containers"][0]
    tls = name.endswith("secure")
    # The OpenAI HTTP API: served, a container port, a Service port, probed.
    assert arg(dense, "--http") == "0.0.0.0:8080", (name, arg(dense, "--http"))
    assert port_of(dense, "http") == 8080
    svc = one(docs, "Service", "-dense")
    http = [p for p in svc["spec"]["ports"] if p["name"] == "http"]
    assert http and http[0]["port"] == 8080 and http[0]["targetPort"] == "http", svc["spec"]["ports"]
    scheme = "HTTPS" if tls else "HTTP"
    for probe, path in (("readinessProbe", "/health"), ("livenessProbe", "/health/live"),
                        ("startupProbe", "/health/live")):
        g = dense[probe]["httpGet"]
        assert (g["path"], g["port"], g["scheme"]) == (path, "http", scheme), (name, probe, g)
    # SIGTERM drains for --drain-timeout after the preStop; the kubelet waits longer.
    drain_ms = int(arg(dense, "--drain-timeout"))
    assert drain_ms == (120000 if name == "secure" else 30000), drain_ms
    pre = dense["lifecycle"]["preStop"]["exec"]["command"]
    assert pre[0] == "sleep", pre
    grace = pod["terminationGracePeriodSeconds"]
    assert grace > int(pre[1]) + drain_ms / 1000, (name, grace, pre, drain_ms)
    # --threads is the CPU request, not the node.
    assert arg(dense, "--threads") == str(int(dense["resources"]["requests"]["cpu"])), dense["args"]
    # PodDisruptionBudgets: no single eviction takes the service down.
    pdb = one(docs, "PodDisruptionBudget", "-dense")["spec"]["maxUnavailable"]
    assert pdb < dep["spec"]["replicas"], (name, pdb, dep["spec"]["replicas"])
    # API keys and TLS from Secrets, mounted read-only.
    if tls:
        keys = arg(dense, "--api-key-file")
        v = mounted(pod, dense, keys.rsplit("/", 1)[0])
        want = "my-keys" if name == "colocated-secure" else "rel-moesplit-api-keys"
        assert v["secret"]["secretName"] == want, v
        secrets = [d for d in docs if d["kind"] == "Secret"]
        if name == "secure":
            assert len(secrets) == 1 and secrets[0]["metadata"]["name"] == want, secrets
            assert secrets[0]["stringData"][keys.rsplit("/", 1)[1]].split() == ["key-one", "key-two"], secrets
        else:
            assert not secrets, "an existing Secret is made again"
        crt = mounted(pod, dense, arg(dense, "--tls-cert").rsplit("/", 1)[0])
        assert crt == mounted(pod, dense, arg(dense, "--tls-key").rsplit("/", 1)[0])
        want = "my-cert" if name == "colocated-secure" else "rel-moesplit-dense-tls"
        assert crt["secret"]["secretName"] == want, crt
    else:
        assert not [a for a in dense["args"] if a.startswith(("--tls", "--api-key"))], dense["args"]
        assert not [d for d in docs if d["kind"] == "Secret"]
    if name.startswith("colocated"):
        for c in pod["containers"][1:]:
            assert ("exec" in c["readinessProbe"]) == tls, c["readinessProbe"]
        continue

    # The StatefulSet: rollout, probes, CPUs, mlock, QoS.
    sts = one(docs, "StatefulSet")
    wpod = sts["spec"]["template"]["spec"]
    w = wpod["containers"][0]
    want = "RollingUpdate" if name == "secure" else "OnDelete"
    assert sts["spec"]["updateStrategy"]["type"] == want, sts["spec"]["updateStrategy"]
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert one(docs, "PodDisruptionBudget", "-expert-worker")["spec"]["maxUnavailable"] == 0
    want = "6" if name == "secure" else str(int(w["resources"]["requests"]["cpu"]))
    assert arg(w, "--threads") == want, w["args"]
    assert w["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"], w["securityContext"]
    assert qos(wpod) == ("Guaranteed" if name == "secure" else "Burstable"), (name, w["resources"])
    assert qos(pod) == ("Guaranteed" if name == "secure" else "Burstable"), (name, dense["resources"])
    # NetworkPolicy: the workers take gRPC only from this release's dense pods.
    np = one(docs, "NetworkPolicy", "-expert-worker")["spec"]
    assert selects(np["podSelector"]["matchLabels"], sts["spec"]["template"]["metadata"]["labels"])
    assert np["policyTypes"] == ["Ingress"]
    rules = {tuple(p["port"] for p in r["ports"]): r.get("from") for r in np["ingress"]}
    assert set(rules) == {("grpc",), ("metrics",)}, rules
    grpc_from = rules[("grpc",)]
    assert len(grpc_from) == 1 and set(grpc_from[0]) == {"podSelector"}, grpc_from
    assert selects(grpc_from[0]["podSelector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
    test_pod = one(docs, "Pod")
    assert not selects(grpc_from[0]["podSelector"]["matchLabels"], test_pod["metadata"]["labels"])
    assert rules[("metrics",)], "worker metrics open to everyone"
    if tls:
        assert [arg(w, f) for f in ("--tls-cert", "--tls-key", "--tls-ca")] == [
            "/etc/moesplit/tls/tls.crt", "/etc/moesplit/tls/tls.key", "/etc/moesplit/ca/ca.crt"], w["args"]
        assert mounted(wpod, w, "/etc/moesplit/tls")["secret"]["secretName"] == "rel-moesplit-expert-worker-tls"
        assert mounted(wpod, w, "/etc/moesplit/ca")["secret"]["secretName"] == "rel-moesplit-ca"
        assert arg(dense, "--tls-ca") == "/etc/moesplit/ca/ca.crt"
        assert arg(dense, "--tls-server-name") == "workers.example"
        cmd = w["readinessProbe"]["exec"]["command"]
        assert cmd[:4] == ["moesplit", "health", "--addr", "127.0.0.1:50061"] and "--tls-ca" in cmd, cmd
        assert w["resources"]["requests"]["hugepages-2Mi"] == w["resources"]["limits"]["hugepages-2Mi"] == "4Gi"
        hp = [v for v in wpod["volumes"] if v.get("emptyDir", {}).get("medium") == "HugePages-2Mi"]
        assert hp and {"name": hp[0]["name"], "mountPath": "/dev/hugepages"} in w["volumeMounts"], wpod
        tsc = wpod["topologySpreadConstraints"]
        assert tsc[0]["topologyKey"] == "kubernetes.io/hostname"
        assert selects(tsc[0]["labelSelector"]["matchLabels"], sts["spec"]["template"]["metadata"]["labels"])
        assert not selects(tsc[0]["labelSelector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
        dnp = one(docs, "NetworkPolicy", "-dense")["spec"]
        api = next(r for r in dnp["ingress"] if {"port": "http", "protocol": "TCP"} in r["ports"])
        assert any(selects(f.get("podSelector", {}).get("matchLabels", {"-": "-"}), test_pod["metadata"]["labels"])
                   for f in api["from"]), "the helm test pod cannot reach the API"
    else:
        assert w["readinessProbe"]["grpc"]["port"] == 50061
        assert not [a for a in w["args"] if a.startswith("--tls")]

# --threads from a milli-CPU request: 2500m -> 2.
cm = one(load("colocated-monitor"), "Deployment")["spec"]["template"]["spec"]["containers"]
assert [arg(c, "--threads") for c in cm[1:]] == ["2", "2"], [c["args"] for c in cm]
cs = one(load("colocated-secure"), "NetworkPolicy", "-dense")["spec"]["ingress"]
assert {"port": "metrics-w1", "protocol": "TCP"} in cs[1]["ports"], cs
assert not [d for d in load("colocated-secure")
            if d["kind"] == "NetworkPolicy" and "expert-worker" in d["metadata"]["name"]]
print("HTTP API, drain, PDBs, rollout, NetworkPolicies, Secrets, QoS and threads are what the values ask for")
