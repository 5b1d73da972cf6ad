// Validates rendered Kubernetes manifests (multi-document YAML on argv[2]):
//  1. each object against its Kubernetes JSON schema (kubernetes-models,
//     generated from the Kubernetes OpenAPI; ServiceMonitor from
//     @kubernetes-models/prometheus-operator), duplicate YAML keys rejected;
//  2. cross references: Service/PDB/ServiceMonitor selectors select a workload,
//     Service targetPorts exist in the selected pods, a StatefulSet's
//     serviceName is a headless Service, every long-running container has
//     startup/readiness/liveness probes (gRPC or HTTP on one of its container
//     ports, or a command) and runs as non-root, NetworkPolicies select pods
//     of the chart and name ports those pods have;
//  3. the custom resources the Kubernetes schemas lack, by their required
//     fields and references: LeaderWorkerSet (its leader and worker pod
//     templates validated as PodTemplates and checked as workloads),
//     InferencePool (selects pods that have its target port) and HTTPRoute
//     (its InferencePool backends exist).
// Run from a folder whose node_modules holds js-yaml and those packages.
import fs from "node:fs";
import path from "node:path";
import * as yaml from "js-yaml";

const file = process.argv[2];
const docs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d != null);
const errors = [];
const err = (obj, msg) => errors.push(`${obj?.kind ?? "?"}/${obj?.metadata?.name ?? "?"}: ${msg}`);

async function modelFor(apiVersion, kind) {
  const candidates = [
    `kubernetes-models/${apiVersion}/${kind}`,
    `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`,
  ];
  for (const c of candidates) {
    const p = path.resolve("node_modules", c + ".js");
    if (fs.existsSync(p)) return (await import(p))[kind];
  }
  return null;
}

// Pod templates of LeaderWorkerSets, checked as workloads below.
const lwsPods = [];
const customChecks = {
  "leaderworkerset.x-k8s.io/v1 LeaderWorkerSet": async (d) => {
    const t = d.spec?.leaderWorkerTemplate;
    if (!Number.isInteger(d.spec?.replicas) || d.spec.replicas < 1) err(d, "spec.replicas must be >= 1");
    if (!Number.isInteger(t?.size) || t.size < 1) err(d, "leaderWorkerTemplate.size must be >= 1");
    if (!t?.workerTemplate) { err(d, "no leaderWorkerTemplate.workerTemplate"); return; }
    const PodTemplate = await modelFor("v1", "PodTemplate");
    for (const [what, tmpl] of [["leaderTemplate", t.leaderTemplate], ["workerTemplate", t.workerTemplate]]) {
      if (!tmpl) continue;
      try {
        new PodTemplate({ metadata: { name: `${d.metadata.name}-${what}` }, template: tmpl }).validate();
      } catch (e) {
        err(d, `${what}: schema: ${e.message}`);
      }
      lwsPods.push({ kind: "LeaderWorkerSet", metadata: { name: `${d.metadata.name}/${what}` },
        spec: { selector: { matchLabels: tmpl.metadata?.labels }, template: tmpl } });
    }
  },
  "inference.networking.k8s.io/v1 InferencePool": (d) => {
    if (!Object.keys(d.spec?.selector?.matchLabels ?? {}).length) err(d, "no spec.selector.matchLabels");
    if (!d.spec?.targetPorts?.length || !d.spec.targetPorts.every((p) => Number.isInteger(p.number))) {
      err(d, "spec.targetPorts needs a number each");
    }
    if (!d.spec?.endpointPickerRef?.name || !Number.isInteger(d.spec.endpointPickerRef.port?.number)) {
      err(d, "spec.endpointPickerRef needs name and port.number");
    }
  },
  "gateway.networking.k8s.io/v1 HTTPRoute": (d) => {
    if (!d.spec?.parentRefs?.length) err(d, "no spec.parentRefs");
    for (const r of d.spec?.rules ?? []) {
      for (const b of r.backendRefs ?? []) {
        if (b.kind === "InferencePool" && !docs.some((x) => x.kind === "InferencePool" && x.metadata.name === b.name)) {
          err(d, `backend InferencePool ${b.name} is not in the manifests`);
        }
      }
    }
  },
};

for (const d of docs) {
  if (!d.apiVersion || !d.kind || !d.metadata?.name) {
    err(d, "missing apiVersion, kind or metadata.name");
    continue;
  }
  if (customChecks[`${d.apiVersion} ${d.kind}`]) {
    await customChecks[`${d.apiVersion} ${d.kind}`](d);
    continue;
  }
  const Model = await modelFor(d.apiVersion, d.kind);
  if (!Model) {
    err(d, `no schema for ${d.apiVersion} ${d.kind}`);
    continue;
  }
  try {
    new Model(d).validate();
  } catch (e) {
    err(d, `schema: ${e.message}`);
  }
}

const matches = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);
const workloads = docs.filter((d) => ["Deployment", "StatefulSet"].includes(d.kind)).concat(lwsPods);
const podsOf = (selector) => {
  const pods = workloads.filter((w) => matches(selector, w.spec.template.metadata?.labels))
    .map((w) => w.spec.template);
  const bare = docs.filter((d) => d.kind === "Pod" && matches(selector, d.metadata.labels));
  return pods.concat(bare.map((p) => ({ metadata: p.metadata, spec: p.spec })));
};

for (const w of workloads) {
  if (!matches(w.spec.selector?.matchLabels, w.spec.template.metadata?.labels)) {
    err(w, "selector does not match its pod template's labels");
  }
  const spec = w.spec.template.spec;
  if (spec.securityContext?.runAsNonRoot !== true) err(w, "pod does not set runAsNonRoot: true");
  for (const c of spec.containers) {
    for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
      const p = c[probe];
      const port = p?.grpc?.port ?? p?.httpGet?.port;
      if (p?.exec) {
        if (!p.exec.command?.length) err(w, `container ${c.name}: ${probe} runs no command`);
      } else if (port === undefined) {
        err(w, `container ${c.name}: no ${probe}`);
      } else if (!c.ports?.some((cp) => cp.containerPort === port || cp.name === port)) {
        err(w, `container ${c.name}: ${probe} port ${port} is not a container port`);
      } else if (p.httpGet && !String(p.httpGet.path ?? "").startsWith("/")) {
        err(w, `container ${c.name}: ${probe} has no path`);
      }
    }
    for (const m of c.volumeMounts ?? []) {
      if (!spec.volumes?.some((v) => v.name === m.name)) err(w, `container ${c.name}: no volume ${m.name}`);
    }
  }
  if (w.kind === "StatefulSet") {
    const svc = docs.find((d) => d.kind === "Service" && d.metadata.name === w.spec.serviceName);
    if (!svc) err(w, `serviceName ${w.spec.serviceName} is not a Service of the chart`);
    else if (svc.spec.clusterIP !== "None") err(w, `Service ${svc.metadata.name} is not headless`);
  }
}

for (const s of docs.filter((d) => d.kind === "Service")) {
  const pods = podsOf(s.spec.selector);
  if (pods.length === 0) { err(s, "selects no pod of the chart"); continue; }
  for (const p of s.spec.ports) {
    if (typeof p.targetPort !== "string") continue;
    const found = pods.some((pod) => pod.spec.containers.some((c) =>
      (c.ports ?? []).some((cp) => cp.name === p.targetPort)));
    if (!found) err(s, `targetPort ${p.targetPort} is no container port of the selected pods`);
  }
}

for (const b of docs.filter((d) => d.kind === "PodDisruptionBudget")) {
  if (podsOf(b.spec.selector?.matchLabels).length === 0) err(b, "selects no pod of the chart");
}

for (const n of docs.filter((d) => d.kind === "NetworkPolicy")) {
  const pods = podsOf(n.spec.podSelector?.matchLabels);
  if (pods.length === 0) { err(n, "selects no pod of the chart"); continue; }
  for (const rule of n.spec.ingress ?? []) {
    for (const p of rule.ports ?? []) {
      const ok = pods.every((pod) => pod.spec.containers.some((c) => (c.ports ?? []).some((cp) =>
        cp.name === p.port || cp.containerPort === p.port)));
      if (!ok) err(n, `port ${p.port} is not a container port of every selected pod`);
    }
    for (const from of rule.from ?? []) {
      const sel = from.podSelector?.matchLabels;
      if (sel && sel["app.kubernetes.io/instance"] && !from.namespaceSelector && podsOf(sel).length === 0) {
        err(n, `ingress from ${JSON.stringify(sel)}: selects no pod of the chart`);
      }
    }
  }
}

for (const p of docs.filter((d) => d.kind === "InferencePool")) {
  const pods = podsOf(p.spec?.selector?.matchLabels);
  if (pods.length === 0) { err(p, "selects no pod of the manifests"); continue; }
  for (const t of p.spec.targetPorts ?? []) {
    if (!pods.every((pod) => pod.spec.containers.some((c) => (c.ports ?? []).some((cp) => cp.containerPort === t.number)))) {
      err(p, `target port ${t.number} is not a container port of every selected pod`);
    }
  }
}

for (const m of docs.filter((d) => d.kind === "ServiceMonitor")) {
  const svcs = docs.filter((d) => d.kind === "Service" && matches(m.spec.selector?.matchLabels, d.metadata.labels));
  if (svcs.length === 0) err(m, "selects no Service of the chart");
  for (const e of m.spec.endpoints) {
    if (!svcs.some((s) => s.spec.ports.some((p) => p.name === e.port))) {
      err(m, `endpoint port ${e.port} is on no selected Service`);
    }
  }
}

const kinds = docs.map((d) => d.kind).sort().join(", ");
if (errors.length) {
  console.log(`FAIL ${file}: ${errors.length} problem(s)`);
  for (const e of errors) console.log("  " + e);
  process.exit(1);
}
console.log(`${path.basename(file)}: ${docs.length} objects valid (${kinds})`);
