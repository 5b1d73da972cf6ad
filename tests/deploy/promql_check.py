#!/usr/bin/env python3
"""Checks the PromQL of the Prometheus rules and the Grafana dashboards.

  promql_check.py parse REPO WORK
      every expression (rules, dashboard targets, dashboard variables) parses:
      each is written as a recording rule into WORK/generated-rules.yml and
      `promtool check rules` reads it.
  promql_check.py names REPO URL...
      every metric name those expressions use is exported by one of the
      /metrics URLs (running services), or made by Prometheus itself (`up`).
      Prints the missing names; exits 1 when there is one.
"""
import glob
import json
import os
import re
import subprocess
import sys
import urllib.request

import yaml

# Grafana's variables, replaced by values that keep the expression valid PromQL.
GRAFANA_VARS = [("$__rate_interval", "5m"), ("$__interval", "1m"), ("$__range", "1h"),
                ("${datasource}", "x"), ("$instance", ".*"), ("$layer", "0")]
# Series Prometheus makes itself for every target.
PROMETHEUS_MADE = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                   "scrape_series_added", "scrape_samples_post_metric_relabeling"}
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "offset", "inf", "nan", "atan2",
            # aggregations (may be followed by `by (...)` before their parenthesis)
            "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
            "count_values", "bottomk", "topk", "quantile"}
LABEL_LIST_BEFORE = {"by", "without", "on", "ignoring", "group_left", "group_right"}


def expressions(repo):
    """(where, expr) for every PromQL expression the deployment ships."""
    out = []
    for path in sorted(glob.glob(os.path.join(repo, "deploy/prometheus/rules/*.yml"))):
        doc = yaml.safe_load(open(path))
        for g in doc["groups"]:
            for r in g["rules"]:
                name = r.get("alert") or r.get("record")
                out.append((f"{os.path.relpath(path, repo)}:{name}", r["expr"]))
    for path in sorted(glob.glob(os.path.join(repo, "deploy/grafana/dashboards/*.json"))):
        doc = json.load(open(path))
        rel = os.path.relpath(path, repo)

        def walk(panels):
            for p in panels:
                for t in p.get("targets", []):
                    if "expr" in t:
                        out.append((f"{rel}:{p.get('title')}:{t.get('refId')}", t["expr"]))
                walk(p.get("panels", []))
        walk(doc.get("panels", []))
        for v in doc.get("templating", {}).get("list", []):
            if v.get("type") != "query":
                continue
            query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"\s*label_values\((.*),\s*[a-zA-Z_]\w*\s*\)\s*", query)
            if not m:
                sys.exit(f"{rel}: variable {v['name']}: only label_values(SELECTOR, label) is checked, got {query!r}")
            out.append((f"{rel}:variable {v['name']}", m.group(1)))
    if not out:
        sys.exit("no expressions found: wrong REPO?")
    return out


def substitute(expr):
    for var, value in GRAFANA_VARS:
        expr = expr.replace(var, value)
    if "$" in expr:
        raise ValueError(f"unknown Grafana variable in {expr!r}")
    return expr


def metric_names(expr):
    """Metric names a PromQL expression selects (a small tokenizer, not a full parser)."""
    names, i, depth_brace, n = set(), 0, 0, len(expr)
    skip_label_list = False
    while i < n:
        c = expr[i]
        if c in "\"'`":
            j = i + 1
            while j < n and expr[j] != c:
                j += 2 if expr[j] == "\\" else 1
            i = j + 1
            continue
        if c == "{":
            depth_brace += 1
        elif c == "}":
            depth_brace -= 1
        elif c == "[":
            i = expr.index("]", i) + 1
            continue
        elif c == "#":  # comment to end of line
            j = expr.find("\n", i)
            i = n if j < 0 else j
            continue
        if c.isdigit() or (c == "." and i + 1 < n and expr[i + 1].isdigit()):
            m = re.match(r"[0-9.eE+\-xXa-fA-F]*[smhdwy]*", expr[i:])
            i += max(1, len(m.group(0)))
            continue
        m = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr[i:])
        if not m:
            i += 1
            continue
        word = m.group(0)
        i += len(word)
        if depth_brace > 0:
            continue
        rest = expr[i:].lstrip()
        if word in LABEL_LIST_BEFORE:
            skip_label_list = rest.startswith("(")
            if skip_label_list:
                i = expr.index(")", i) + 1
            continue
        if word.lower() in KEYWORDS or rest.startswith("("):
            continue  # keyword, function or aggregation
        names.add(word)
    return names


def parse(repo, work):
    exprs = expressions(repo)
    rules = {"groups": [{"name": "generated", "rules": [
        {"record": f"check:expr_{k}", "expr": substitute(e)} for k, (_, e) in enumerate(exprs)]}]}
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "generated-rules.yml")
    with open(path, "w") as f:
        yaml.safe_dump(rules, f, sort_keys=False)
    r = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        for k, (where, _) in enumerate(exprs):
            if f"expr_{k}" in r.stdout + r.stderr or f"rule {k + 1}" in r.stdout + r.stderr:
                print(f"  rule {k + 1} is {where}")
        print(f"FAIL: promtool rejects the generated rules ({path})")
        return 1
    print(f"ok: {len(exprs)} expressions parse (promtool check rules)")
    return 0


def exported(urls):
    names = set()
    for url in urls:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()[:4]
                names.add(name)
                if kind in ("histogram", "summary"):
                    names.update({name + "_bucket", name + "_sum", name + "_count"})
            elif line and not line.startswith("#"):
                names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    return names


def gpu_only(repo):
    """The dense service's GPU metrics (common/telemetry/gpu_metrics.cc): it
    exports them only when its dense part runs on a GPU, so a scrape of a
    CPU-only service lacks them by design."""
    src = open(os.path.join(repo, "common/telemetry/gpu_metrics.cc")).read()
    return set(re.findall(r'"(moesplit_[a-z0-9_]+)"', src))


def names(repo, urls):
    gpu = gpu_only(repo)
    have = exported(urls) | PROMETHEUS_MADE
    if not have & gpu:
        print(f"the scrape has no GPU metrics (CPU backend): {len(gpu)} GPU-only names "
              "taken from common/telemetry/gpu_metrics.cc")
        have |= gpu
    missing = {}
    used = set()
    for where, e in expressions(repo):
        for name in metric_names(substitute(e)):
            used.add(name)
            if name not in have:
                missing.setdefault(name, []).append(where)
    print(f"{len(used)} metric names used, {len(have - PROMETHEUS_MADE)} exported by the services")
    if missing:
        print(f"FAIL: {len(missing)} metric name(s) used by rules/dashboards but not exported:")
        for name in sorted(missing):
            print(f"  {name}    (in {', '.join(sorted(set(missing[name]))[:3])}"
                  f"{' ...' if len(set(missing[name])) > 3 else ''})")
        return 1
    print("ok: every metric name is exported")
    return 0


def selftest():
    """The name extractor on expressions whose answer is known."""
    cases = [
        ('sum by (le, transport) (rate(foo_bucket{instance=~"$instance", le="0.1"}[5m]))'
         ' / ignoring(expert) group_left sum by (layer) (bar_total offset 1h) > 0.5 and on (x) baz',
         {"foo_bucket", "bar_total", "baz"}),
        ('up{job=~"moesplit.*"} == 0', {"up"}),
        ('histogram_quantile(0.99, sum without (pod) (rate(a_bucket[1m]))) > 1e-3', {"a_bucket"}),
        ('max_over_time(x:y_z[5m:30s]) unless count(q{a="sum(b)"}) * 2', {"x:y_z", "q"}),
    ]
    bad = 0
    for expr, want in cases:
        got = metric_names(substitute(expr))
        if got != want:
            print(f"FAIL: {expr!r}: got {sorted(got)}, want {sorted(want)}")
            bad += 1
    print(f"{len(cases) - bad} passed, {bad} failed")
    return 1 if bad else 0


def dashboards(repo):
    """Grafana JSON that provisioning accepts and that renders as a grid."""
    bad, uids = [], {}
    paths = sorted(glob.glob(os.path.join(repo, "deploy/grafana/dashboards/*.json")))
    for path in paths:
        rel = os.path.relpath(path, repo)
        d = json.load(open(path))
        for key in ("uid", "title", "panels", "schemaVersion"):
            if key not in d:
                bad.append(f"{rel}: no {key}")
        if d.get("uid") in uids:
            bad.append(f"{rel}: uid {d['uid']} also in {uids[d['uid']]}")
        uids[d.get("uid")] = rel
        ids = [p.get("id") for p in d.get("panels", [])]
        if len(ids) != len(set(ids)) or None in ids:
            bad.append(f"{rel}: panel ids not unique: {ids}")
        for p in d.get("panels", []):
            g = p.get("gridPos", {})
            if not all(k in g for k in "hwxy") or g["x"] + g["w"] > 24:
                bad.append(f"{rel}: panel {p.get('title')}: bad gridPos {g}")
            for t in p.get("targets", []):
                if t.get("datasource", {}).get("uid") != "${datasource}":
                    bad.append(f"{rel}: panel {p.get('title')}: target not on the $datasource variable")
    for b in bad:
        print("FAIL", b)
    print(f"{len(paths)} dashboards: {'ok' if not bad else f'{len(bad)} problem(s)'}")
    return 1 if bad or not paths else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "dashboards":
        return dashboards(sys.argv[2])
    if len(sys.argv) >= 4 and sys.argv[1] == "parse":
        return parse(sys.argv[2], sys.argv[3])
    if len(sys.argv) >= 4 and sys.argv[1] == "names":
        return names(sys.argv[2], sys.argv[3:])
    if len(sys.argv) == 2 and sys.argv[1] == "selftest":
        return selftest()
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
