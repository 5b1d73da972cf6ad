#!/usr/bin/env python3
"""Writes the Grafana dashboards deploy/grafana/dashboards/*.json.

  make_dashboards.py [OUT_DIR]   (default: the dashboards folder beside this file)

Edit the panels here and regenerate; tests/deploy checks that the committed
JSON is what this script writes, that every expression parses and that every
metric name is one the services export.
"""
import json
import os
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboards")
DS = {"type": "prometheus", "uid": "${datasource}"}

def target(expr, legend="", ref="A", instant=False, fmt=None):
    t = {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref}
    if instant:
        t["instant"] = True; t["range"] = False
    if fmt:
        t["format"] = fmt
    return t

class Board:
    def __init__(self, uid, title, desc):
        self.uid, self.title, self.desc = uid, title, desc
        self.panels, self.y, self.id = [], 0, 1
    def row(self, title):
        self.panels.append({"id": self.id, "type": "row", "title": title, "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.id += 1; self.y += 1
    def add(self, panels, h=8):
        w = 24 // len(panels)
        for i, p in enumerate(panels):
            p["id"] = self.id; self.id += 1
            p["gridPos"] = {"h": h, "w": w, "x": i * w, "y": self.y}
            p["datasource"] = DS
            self.panels.append(p)
        self.y += h
    def json(self, extra_vars=()):
        return {
            "uid": self.uid, "title": self.title, "description": self.desc,
            "tags": ["moesplit"], "timezone": "browser", "schemaVersion": 39,
            "version": 1, "editable": True, "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"},
            "annotations": {"list": []},
            "templating": {"list": [
                {"name": "datasource", "label": "Prometheus", "type": "datasource",
                 "query": "prometheus", "current": {}, "hide": 0},
                {"name": "instance", "label": "instance", "type": "query", "datasource": DS,
                 "query": {"query": "label_values(up{job=~\"moesplit.*\"}, instance)", "refId": "instance"},
                 "definition": "label_values(up{job=~\"moesplit.*\"}, instance)",
                 "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2,
                 "current": {"text": "All", "value": "$__all"}},
                *extra_vars]},
            "panels": self.panels}

def ts(title, targets, unit="short", stack=False, desc=""):
    return {"type": "timeseries", "title": title, "description": desc, "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit, "custom": {
                "stacking": {"mode": "normal" if stack else "none", "group": "A"},
                "fillOpacity": 30 if stack else 10}}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}

def stat(title, targets, unit="short"):
    return {"type": "stat", "title": title, "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area"}}

def q(p, metric, by="", rng="$__rate_interval"):
    grp = f"sum by (le{', ' + by if by else ''})"
    return f"histogram_quantile({p}, {grp} (rate({metric}_bucket{{instance=~\"$instance\"}}[{rng}])))"

I = '{instance=~"$instance"}'

# ------------------------------------------------------------- serving
b = Board("moesplit-serving", "moesplit / Serving",
          "Requests, tokens, latency (TTFT, inter-token) and the request queue of the dense service.")
b.row("Throughput")
b.add([
    ts("Generated tokens/s", [target(f"sum by (instance) (rate(moesplit_generated_tokens_total{I}[$__rate_interval]))", "{{instance}}")], "short"),
    ts("Prompt tokens/s", [target(f"sum by (instance) (rate(moesplit_prompt_tokens_total{I}[$__rate_interval]))", "{{instance}}")], "short"),
    ts("Requests/s by outcome", [target(f"sum by (api, outcome) (rate(moesplit_requests_total{I}[$__rate_interval]))", "{{api}} {{outcome}}")], "reqps", stack=True),
])
b.row("Latency")
b.add([
    ts("Time to first token", [target(q(0.5, "moesplit_time_to_first_token_seconds"), "p50"),
                               target(q(0.99, "moesplit_time_to_first_token_seconds"), "p99", "B")], "s"),
    ts("Inter-token latency", [target(q(0.5, "moesplit_inter_token_latency_seconds"), "p50"),
                               target(q(0.99, "moesplit_inter_token_latency_seconds"), "p99", "B")], "s"),
    ts("Request duration", [target(q(0.5, "moesplit_request_duration_seconds"), "p50"),
                            target(q(0.99, "moesplit_request_duration_seconds"), "p99", "B")], "s"),
])
b.row("Queue and batch")
b.add([
    ts("Queue", [target(f"sum by (instance) (moesplit_queue_depth{I})", "waiting {{instance}}"),
                 target(f"sum by (instance) (moesplit_queue_capacity{I})", "capacity {{instance}}", "B")], "short"),
    ts("Sequences", [target(f"sum by (instance) (moesplit_running_sequences{I})", "running {{instance}}"),
                     target(f"sum by (instance) (moesplit_max_sequences{I})", "max {{instance}}", "B")], "short"),
    ts("KV cache", [target(f"sum by (instance) (moesplit_kv_cache_used_bytes{I})", "used {{instance}}"),
                    target(f"sum by (instance) (moesplit_kv_cache_capacity_bytes{I})", "capacity {{instance}}", "B")], "bytes"),
    ts("Tokens per forward step", [target(q(0.5, "moesplit_batch_tokens"), "p50"),
                                   target(q(0.99, "moesplit_batch_tokens"), "p99", "B")], "short"),
])
b.row("Prefix cache")
b.add([
    ts("Prefix cache hit ratio", [target(
        f"sum(rate(moesplit_prefix_cache_hits_total{I}[$__rate_interval])) / "
        f"(sum(rate(moesplit_prefix_cache_hits_total{I}[$__rate_interval])) + "
        f"sum(rate(moesplit_prefix_cache_misses_total{I}[$__rate_interval])))", "hits")], "percentunit",
       desc="Requests that reused at least one cached block, of all requests."),
    ts("Prompt tokens reused/s", [target(f"sum by (instance) (rate(moesplit_prefix_cache_reused_tokens_total{I}[$__rate_interval]))", "reused {{instance}}"),
                                  target(f"sum by (instance) (rate(moesplit_prompt_tokens_total{I}[$__rate_interval]))", "evaluated {{instance}}", "B")], "short"),
    ts("Prefix cache by tier", [target(f"sum by (tier) (moesplit_prefix_cache_bytes{I})", "{{tier}}"),
                                target(f"sum by (tier) (moesplit_prefix_cache_capacity_bytes{I})", "budget {{tier}}", "B")], "bytes",
       desc="Bytes held per tier (device: GPU memory, --cache-device; primary: --cache-memory; host: --cache-ram) and each tier's budget."),
    ts("Blocks moved between tiers/s", [
        target(f"sum(rate(moesplit_prefix_cache_device_demotions_total{I}[$__rate_interval]))", "device -> primary"),
        target(f"sum(rate(moesplit_prefix_cache_demotions_total{I}[$__rate_interval]))", "primary -> host", "B"),
        target(f"sum(rate(moesplit_prefix_cache_uploads_total{I}[$__rate_interval]))", "up to the device", "C"),
        target(f"sum(rate(moesplit_prefix_cache_host_hits_total{I}[$__rate_interval]))", "back from the host", "D"),
        target(f"sum(rate(moesplit_prefix_cache_evictions_total{I}[$__rate_interval]))", "dropped", "E")], "short"),
])
serving = b.json()

# ------------------------------------------------------------- gpu
b = Board("moesplit-gpu", "moesplit / GPU and expert cache",
          "GPU memory by use against the budget, and the GPU expert cache: residency per layer, hit rate, host-to-device traffic, prefetch.")
b.row("GPU memory")
b.add([
    ts("GPU memory plan by use", [target(f"sum by (use) (moesplit_gpu_memory_plan_bytes{I})", "{{use}}")], "bytes", stack=True),
    ts("GPU memory used vs budget", [target(f"sum by (instance) (moesplit_gpu_memory_used_bytes{I})", "used {{instance}}"),
                                     target(f"sum by (instance) (moesplit_gpu_memory_budget_bytes{I})", "budget {{instance}}", "B")], "bytes"),
    stat("Used / budget", [target(f"sum(moesplit_gpu_memory_used_bytes{I}) / sum(moesplit_gpu_memory_budget_bytes{I})", "")], "percentunit"),
])
b.row("Expert cache")
b.add([
    ts("Resident experts per layer", [target(f"sum by (layer) (moesplit_expert_cache_resident_experts{I})", "layer {{layer}}")], "short", stack=True),
    {"type": "bargauge", "title": "Resident experts per layer (now)",
     "targets": [target(f"sum by (layer) (moesplit_expert_cache_resident_experts{I})", "{{layer}}", instant=True)],
     "fieldConfig": {"defaults": {"unit": "short"}, "overrides": []},
     "options": {"orientation": "vertical", "displayMode": "gradient",
                 "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}},
])
b.add([
    ts("Hit rate", [target(f"sum(rate(moesplit_expert_cache_hits_total{I}[$__rate_interval])) / (sum(rate(moesplit_expert_cache_hits_total{I}[$__rate_interval])) + sum(rate(moesplit_expert_cache_misses_total{I}[$__rate_interval])))", "hit rate")], "percentunit"),
    ts("Host-to-device copies", [target(f"sum by (instance) (rate(moesplit_expert_cache_h2d_bytes_total{I}[$__rate_interval]))", "{{instance}}")], "Bps"),
    ts("Prefetch by outcome", [target(f"sum by (outcome) (rate(moesplit_expert_prefetch_total{I}[$__rate_interval]))", "{{outcome}}")], "ops", stack=True),
    stat("Streamed-prefill threshold (tokens per expert; 0 = off)", [target(f"max(moesplit_prefill_stream_min_tokens{I})", "")], "short"),
])
gpu = b.json()

# ------------------------------------------------------------- experts
layer_var = {"name": "layer", "label": "layer", "type": "query", "datasource": DS,
             "query": {"query": "label_values(moesplit_expert_activations_total, layer)", "refId": "layer"},
             "definition": "label_values(moesplit_expert_activations_total, layer)",
             "includeAll": False, "multi": False, "refresh": 2, "sort": 3, "current": {}}
b = Board("moesplit-experts", "moesplit / Expert workers",
          "Routed experts: activation heat map (layer x expert), expert-call latency, transfer bytes by transport, worker memory per NUMA node.")
b.row("Expert activations")
b.add([
    {"type": "table", "title": "Expert activation heat map: layer x expert (share of the layer's routed pairs, selected range)",
     "description": "One row per layer, one column per expert id; the cell colour is the expert's share of its layer's routed (token, expert) pairs over the dashboard's time range.",
     "targets": [target('sum by (layer, expert) (increase(moesplit_expert_activations_total{instance=~"$instance"}[$__range])) / ignoring(expert) group_left sum by (layer) (increase(moesplit_expert_activations_total{instance=~"$instance"}[$__range]))',
                        "", instant=True, fmt="table")],
     "transformations": [
         {"id": "groupingToMatrix", "options": {"columnField": "expert", "rowField": "layer", "valueField": "Value", "emptyValue": "zero"}},
         {"id": "convertFieldType", "options": {"conversions": [{"targetField": "layer\\expert", "destinationType": "number"}]}},
         {"id": "sortBy", "options": {"sort": [{"field": "layer\\expert"}]}},
     ],
     "fieldConfig": {"defaults": {"unit": "percentunit", "decimals": 1,
                                  "color": {"mode": "continuous-YlRd"},
                                  "custom": {"align": "center", "cellOptions": {"type": "color-background", "mode": "gradient"}}},
                     "overrides": [{"matcher": {"id": "byName", "options": "layer\\expert"},
                                    "properties": [{"id": "custom.cellOptions", "value": {"type": "auto"}},
                                                   {"id": "unit", "value": "none"}, {"id": "decimals", "value": 0}]}]},
     "options": {"showHeader": True, "cellHeight": "sm"}},
], h=14)
b.add([
    {"type": "heatmap", "title": "Layer $layer: activations per expert over time",
     "targets": [target('sum by (expert) (rate(moesplit_expert_activations_total{instance=~"$instance", layer="$layer"}[$__rate_interval]))',
                        "{{expert}}", fmt="heatmap")],
     "options": {"calculate": False, "yAxis": {"axisLabel": "expert"},
                 "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64}, "cellGap": 1}},
], h=10)
b.row("Calls and transport")
b.add([
    ts("Expert-call latency by transport (worker)", [
        target(f"histogram_quantile(0.5, sum by (le, transport) (rate(moesplit_expert_call_duration_seconds_bucket{I}[$__rate_interval])))", "p50 {{transport}}"),
        target(f"histogram_quantile(0.99, sum by (le, transport) (rate(moesplit_expert_call_duration_seconds_bucket{I}[$__rate_interval])))", "p99 {{transport}}", "B")], "s"),
    ts("MoE layer round trip (dense)", [
        target(q(0.5, "moesplit_expert_roundtrip_seconds"), "p50"),
        target(q(0.99, "moesplit_expert_roundtrip_seconds"), "p99", "B"),
        target(q(0.5, "moesplit_expert_worker_seconds"), "p50 workers' own time", "C")], "s",
       desc="The dense service's wait for one MoE layer's routed experts, and the part of it the workers spent computing."),
    ts("Expert calls by transport and code", [
        target(f"sum by (transport, code) (rate(moesplit_expert_calls_total{I}[$__rate_interval]))", "{{transport}} {{code}}")], "ops", stack=True),
])
b.add([
    ts("Transfer bytes/s by transport", [
        target(f'sum by (transport) (rate(moesplit_transport_sent_bytes_total{{instance=~"$instance", job=~".*worker.*"}}[$__rate_interval]))', "results sent {{transport}}"),
        target(f'sum by (transport) (rate(moesplit_transport_received_bytes_total{{instance=~"$instance", job=~".*worker.*"}}[$__rate_interval]))', "calls received {{transport}}", "B")], "Bps"),
    ts("Tokens per expert call", [target(q(0.5, "moesplit_expert_call_tokens"), "p50"),
                                  target(q(0.99, "moesplit_expert_call_tokens"), "p99", "B")], "short"),
    ts("Hand-off share of the expert round trips (dense)", [
        target(f"1 - sum(rate(moesplit_expert_worker_seconds_sum{I}[$__rate_interval])) / sum(rate(moesplit_expert_roundtrip_seconds_sum{I}[$__rate_interval]))", "hand-off")],
       "percentunit", desc="Round-trip time not spent in the workers: transport, wake-ups, queueing."),
    ts("Calls and failures per worker (dense)", [
        target(f"sum by (worker) (rate(moesplit_expert_client_calls_total{I}[$__rate_interval]))", "calls {{worker}}"),
        target(f"sum by (worker) (rate(moesplit_expert_client_failures_total{I}[$__rate_interval]))", "failures {{worker}}", "B")], "ops"),
])
b.row("Workers")
b.add([
    ts("Worker memory per NUMA node", [target(f"sum by (instance, node) (moesplit_worker_resident_bytes{I})", "{{instance}} node {{node}}")], "bytes", stack=True),
    ts("Worker up (dense's view)", [target(f"max by (worker) (moesplit_worker_up{I})", "{{worker}}")], "short"),
    stat("Compute threads", [target(f"sum by (instance) (moesplit_worker_threads{I})", "{{instance}}")], "short"),
])
b.row("Workers: RAM tier (experts beyond RAM)")
b.add([
    ts("RAM hit rate", [
        target(f"sum by (instance) (rate(moesplit_worker_tier_hits_total{I}[$__rate_interval])) / (sum by (instance) (rate(moesplit_worker_tier_hits_total{I}[$__rate_interval])) + sum by (instance) (rate(moesplit_worker_tier_misses_total{I}[$__rate_interval])))", "{{instance}}")],
       "percentunit", desc="Expert uses served from RAM slots; the rest were read from the model file. Empty for workers whose shard fits in --expert-ram."),
    ts("Disk read rate", [
        target(f"sum by (instance) (rate(moesplit_worker_tier_read_bytes_total{I}[$__rate_interval]))", "{{instance}}"),
        target(f"sum by (instance) (rate(moesplit_worker_tier_read_errors_total{I}[$__rate_interval]))", "errors {{instance}}", "B")], "Bps"),
    ts("Expert read latency", [
        target(q(0.5, "moesplit_worker_tier_read_duration_seconds"), "p50"),
        target(q(0.99, "moesplit_worker_tier_read_duration_seconds"), "p99", "B")], "s"),
    ts("Resident experts / slots", [
        target(f"sum by (instance) (moesplit_worker_tier_resident_experts{I})", "resident {{instance}}"),
        target(f"sum by (instance) (moesplit_worker_tier_slots{I})", "slots {{instance}}", "B")], "short"),
])
b.add([
    ts("Lookahead: prefetch accuracy", [
        target(f"sum by (instance) (rate(moesplit_worker_tier_prefetch_used_total{I}[$__rate_interval])) / sum by (instance) (rate(moesplit_worker_tier_prefetches_total{I}[$__rate_interval]))", "used {{instance}}"),
        target(f"sum by (instance) (rate(moesplit_worker_tier_prefetch_unused_total{I}[$__rate_interval])) / sum by (instance) (rate(moesplit_worker_tier_prefetches_total{I}[$__rate_interval]))", "evicted unused {{instance}}", "B")],
       "percentunit", desc="Experts read ahead on the dense side's next-layer hints that a call then used."),
    ts("Lookahead: experts read ahead", [
        target(f"sum by (instance) (rate(moesplit_worker_tier_prefetches_total{I}[$__rate_interval]))", "{{instance}}")], "ops"),
])
experts = b.json([layer_var])

for name, d in [("moesplit-serving", serving), ("moesplit-gpu", gpu), ("moesplit-experts", experts)]:
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(d, f, indent=2)
        f.write("\n")
