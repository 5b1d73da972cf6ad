#!/usr/bin/env python3
"""What deploy/docker-compose.yml promises, checked on its resolved form.

  compose_check.py REPO RESOLVED.yml [TLS_RESOLVED.yml]

RESOLVED.yml is `docker-compose -f deploy/docker-compose.yml config` (with
whatever variables the caller set); TLS_RESOLVED.yml the same with
deploy/docker-compose.tls.yml on top. Prints one line per promise and exits 1
when one is broken. Checks: the shm transport's IPC sharing and memlock, the
GPU reservation, the dense service's OpenAI HTTP API (--http on a published
container port) and gRPC, every published port bound to MOESPLIT_BIND's
address (default 127.0.0.1), the API keys read from a compose secret, the
health checks, disjoint cpusets for the dense service and every worker, no
untagged or :latest image, a stop grace period longer than --drain-timeout,
Grafana without anonymous access and with its admin password from a secret,
Prometheus scraping every service, and the TLS file adding only TLS flags.
"""
import os
import re
import sys

import yaml

REPO, RESOLVED = sys.argv[1], sys.argv[2]
TLS = sys.argv[3] if len(sys.argv) > 3 else None
BIND = os.environ.get("MOESPLIT_BIND", "127.0.0.1")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def flag(service, name):
    vals = [a.split("=", 1)[1] for a in service.get("command", []) if a.startswith(name + "=")]
    return vals[0] if len(vals) == 1 else None


def cpus(spec):
    """'0-2,5' -> {0, 1, 2, 5}."""
    out = set()
    for part in str(spec).split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def seconds(duration):
    """Compose durations: '45s', '1m30s', '500ms', '2h'."""
    total, rest = 0.0, str(duration)
    for value, unit in re.findall(r"([0-9.]+)(ms|us|h|m|s)", rest):
        total += float(value) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}[unit]
    if not re.fullmatch(r"([0-9.]+(ms|us|h|m|s))+", rest):
        raise ValueError(f"not a duration: {duration!r}")
    return total


def published(service):
    """(host_ip, published, target) of each port; compose 1.29 writes them as
    'IP:PUBLISHED:TARGET/tcp' strings or long-form mappings."""
    out = []
    for p in service.get("ports", []):
        if isinstance(p, dict):
            out.append((p.get("host_ip", ""), str(p.get("published", "")), int(p["target"])))
            continue
        parts = str(p).split("/")[0].split(":")
        if len(parts) == 3:
            out.append((parts[0], parts[1], int(parts[2])))
        elif len(parts) == 2:
            out.append(("", parts[0], int(parts[1])))
        else:
            out.append(("", parts[0], int(parts[0])))
    return out


c = yaml.safe_load(open(RESOLVED))
s = c["services"]
workers = sorted(k for k in s if k.startswith("expert-worker"))
dense = s["dense"]
check(len(workers) >= 1, f"{len(workers)} expert-worker(s)")

# Shared-memory transport: one IPC namespace, shm size, unlimited memlock.
owner = [w for w in workers if s[w].get("ipc") == "shareable"]
check(len(owner) == 1 and bool(s[owner[0]].get("shm_size")),
      f"one worker owns a shareable IPC namespace with shm_size: {owner}")
owner = owner[0] if owner else None
for name in workers + ["dense"]:
    if name != owner:
        check(s[name].get("ipc") == f"service:{owner}", f"{name} shares {owner}'s IPC namespace")
for w in workers:
    check(s[w].get("ulimits", {}).get("memlock") == {"soft": -1, "hard": -1}, f"{w}: memlock unlimited")
    check(s[w]["healthcheck"]["test"][1:5] == ["moesplit", "health", "--addr", "127.0.0.1:50061"]
          and flag(s[w], "--listen-grpc") == "0.0.0.0:50061", f"{w}: health check on its gRPC port")
names = [flag(s[w], "--listen-shm") for w in workers]
check(flag(dense, "--experts") == ",".join("shm://" + n for n in names),
      f"dense --experts {flag(dense, '--experts')} names the workers' segments {names}")
dev = dense["deploy"]["resources"]["reservations"]["devices"][0]
check(dev["driver"] == "nvidia" and "gpu" in dev["capabilities"], "dense reserves an NVIDIA GPU")
for w in workers:
    check(dense["depends_on"][w]["condition"] == "service_healthy", f"dense waits for {w} to be healthy")

# The OpenAI HTTP API and gRPC are served and published, on BIND only.
http = flag(dense, "--http")
http_port = int(http.rsplit(":", 1)[1]) if http else None
grpc = flag(dense, "--grpc")
grpc_port = int(grpc.rsplit(":", 1)[1]) if grpc else None
ports = published(dense)
check(http is not None and http.startswith("0.0.0.0:") and http_port in [t for _, _, t in ports],
      f"dense serves the OpenAI HTTP API (--http={http}) on a published port {ports}")
check(grpc_port in [t for _, _, t in ports], f"dense publishes its gRPC port {grpc_port}")
every = [(name, p) for name, svc in s.items() for p in published(svc)]
check(bool(every) and all(ip == BIND for _, (ip, _, _) in every),
      f"every published port is bound to {BIND}: {[(n, ip + ':' + pub) for n, (ip, pub, _) in every]}")
check(dense["healthcheck"]["test"][1:5] == ["moesplit", "health", "--addr", f"127.0.0.1:{grpc_port}"],
      "dense health check: gRPC health (readiness) on its gRPC port")

# API keys from a compose secret (a file on the host).
keys = flag(dense, "--api-key-file")
secret = keys[len("/run/secrets/"):] if keys and keys.startswith("/run/secrets/") else None
dense_secrets = [x["source"] if isinstance(x, dict) else x for x in dense.get("secrets", [])]
check(secret in dense_secrets and bool(c.get("secrets", {}).get(secret, {}).get("file")),
      f"dense reads its API keys from the compose secret {secret} (a host file)")

# Disjoint CPU sets.
sets = {name: cpus(s[name]["cpuset"]) for name in workers + ["dense"] if s[name].get("cpuset")}
check(len(sets) == len(workers) + 1, f"dense and every worker have a cpuset: {sorted(sets)}")
overlap = [(a, b) for a in sets for b in sets if a < b and sets[a] & sets[b]]
check(not overlap, "cpusets are disjoint: " + ", ".join(f"{n}={s[n]['cpuset']}" for n in sets)
      + (f" (overlap: {overlap})" if overlap else ""))

# Images carry a version tag.
for name, svc in s.items():
    image = svc.get("image", "")
    tag = image.rsplit("/", 1)[-1].partition(":")[2] if "@" not in image else "digest"
    check(bool(tag) and tag != "latest", f"{name}: image {image} has a version tag")

# SIGTERM drains for --drain-timeout; docker waits longer before SIGKILL.
drain_ms = int(flag(dense, "--drain-timeout") or 30000)
grace = seconds(dense.get("stop_grace_period", "10s"))
check(grace * 1000 > drain_ms, f"stop_grace_period {grace:g} s > --drain-timeout {drain_ms} ms")

# Grafana: no anonymous access, admin password from a secret.
env = s["grafana"].get("environment", {})
if isinstance(env, list):
    env = dict(e.split("=", 1) for e in env)
gsecrets = [x["source"] if isinstance(x, dict) else x for x in s["grafana"].get("secrets", [])]
pw = env.get("GF_SECURITY_ADMIN_PASSWORD__FILE", "")
check(str(env.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "false"
      and "GF_SECURITY_ADMIN_PASSWORD" not in env
      and pw.startswith("/run/secrets/") and pw[len("/run/secrets/"):] in gsecrets,
      f"Grafana: anonymous access off, admin password from a secret ({pw})")
for v in s["grafana"]["volumes"]:
    src = v.split(":")[0] if isinstance(v, str) else v["source"]
    if src.startswith("/"):
        check(os.path.isdir(src), f"grafana mounts {src}")

prom = yaml.safe_load(open(os.path.join(REPO, "deploy/prometheus/prometheus.yml")))
targets = {t for j in prom["scrape_configs"] for sc in j["static_configs"] for t in sc["targets"]}
want = {"dense:9400"} | {f"{w}:9401" for w in workers}
check(targets == want, f"Prometheus scrapes {sorted(targets)}")

# TLS on top: the same command plus the TLS flags, files from secrets.
if TLS:
    t = yaml.safe_load(open(TLS))
    td = t["services"]["dense"]
    extra = [a for a in td["command"] if a not in dense["command"]]
    check(td["command"][:len(dense["command"])] == dense["command"]
          and sorted(a.split("=")[0] for a in extra) == ["--tls-cert", "--tls-key"],
          f"TLS file: the base command plus {extra}")
    tsecrets = [x["source"] if isinstance(x, dict) else x for x in td.get("secrets", [])]
    for a in extra:
        name = a.split("=", 1)[1][len("/run/secrets/"):]
        check(name in tsecrets and bool(t["secrets"][name].get("file")), f"TLS file: {a} is a secret")
    hc = td["healthcheck"]["test"]
    check(hc[1:5] == dense["healthcheck"]["test"][1:5] and "--tls-ca" in hc,
          f"TLS file: the health check verifies the server with --tls-ca: {hc}")

print(f"compose promises: {len(failures)} broken" if failures else "compose promises: all kept")
sys.exit(1 if failures else 0)
