{{/* Names and labels shared by every template. */}}

{{- define "moesplit.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* release-chart, or the release name when it already contains the chart's. */}}
{{- define "moesplit.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "moesplit.dense" -}}{{ include "moesplit.fullname" . }}-dense{{- end -}}
{{- define "moesplit.worker" -}}{{ include "moesplit.fullname" . }}-expert-worker{{- end -}}

{{- define "moesplit.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "moesplit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: moesplit
{{- end -}}

{{/* selectorLabels: call with (dict "ctx" $ "component" "dense") */}}
{{- define "moesplit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "moesplit.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "moesplit.denseImage" -}}
{{ .Values.image.dense.repository }}:{{ .Values.image.dense.tag | default .Chart.AppVersion }}
{{- end -}}
{{- define "moesplit.workerImage" -}}
{{ .Values.image.expertWorker.repository }}:{{ .Values.image.expertWorker.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Worker i of N serves layers [i*L/N, (i+1)*L/N): "layers=A-B". (dict "i" i "ctx" $) */}}
{{- define "moesplit.shard" -}}
{{- if .ctx.Values.expertWorker.shards -}}
{{- index .ctx.Values.expertWorker.shards .i -}}
{{- else -}}
{{- $n := int .ctx.Values.expertWorker.replicas -}}
{{- $l := int .ctx.Values.model.layers -}}
{{- $b := div (mul .i $l) $n -}}
{{- $e := sub (div (mul (add1 .i) $l) $n) 1 -}}
layers={{ $b }}-{{ $e }}
{{- end -}}
{{- end -}}

{{/* The --experts list of the dense service. */}}
{{- define "moesplit.experts" -}}
{{- $ctx := . -}}
{{- $out := list -}}
{{- range $i := until (int .Values.expertWorker.replicas) -}}
{{- if $ctx.Values.coLocation.enabled -}}
{{- $out = append $out (printf "shm://moesplit-w%d" $i) -}}
{{- else if le (int $ctx.Values.expertWorker.replicasPerShard) 1 -}}
{{- $out = append $out (printf "grpc://%s-%d.%s.%s.svc:%d" (include "moesplit.worker" $ctx) $i (include "moesplit.worker" $ctx) $ctx.Release.Namespace (int $ctx.Values.expertWorker.grpcPort)) -}}
{{- else -}}
{{- /* Shard i's replicas, named as such: A|B (StatefulSet <worker>-s<i>). */ -}}
{{- $replicas := list -}}
{{- range $r := until (int $ctx.Values.expertWorker.replicasPerShard) -}}
{{- $replicas = append $replicas (printf "grpc://%s-s%d-%d.%s.%s.svc:%d" (include "moesplit.worker" $ctx) $i $r (include "moesplit.worker" $ctx) $ctx.Release.Namespace (int $ctx.Values.expertWorker.grpcPort)) -}}
{{- end -}}
{{- $out = append $out (join "|" $replicas) -}}
{{- end -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* Probe timing shared by every probe: (dict "ctx" $ "kind" "startup|readiness|liveness") */}}
{{- define "moesplit.probeTiming" -}}
periodSeconds: {{ .ctx.Values.probes.periodSeconds }}
timeoutSeconds: 5
{{- if eq .kind "startup" }}
failureThreshold: {{ .ctx.Values.probes.startupFailureThreshold }}
{{- else if eq .kind "readiness" }}
failureThreshold: 2
{{- else }}
failureThreshold: 6
{{- end }}
{{- end -}}

{{/* The dense service's probes on its HTTP API (HTTPS with TLS): readiness
     GET /health (503 while a worker is missing or the service drains),
     liveness and startup GET /health/live. (dict "ctx" $) */}}
{{- define "moesplit.denseProbes" -}}
{{- $scheme := ternary "HTTPS" "HTTP" .ctx.Values.tls.enabled -}}
{{- range $kind, $path := dict "startup" "/health/live" "readiness" "/health" "liveness" "/health/live" }}
{{ $kind }}Probe:
  httpGet:
    path: {{ $path }}
    port: http
    scheme: {{ $scheme }}
  {{- include "moesplit.probeTiming" (dict "ctx" $.ctx "kind" $kind) | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An expert-worker's probes: gRPC health (Kubernetes native); with TLS,
     which the kubelet's gRPC probe cannot speak, `moesplit health` with the
     worker's own certificate. (dict "port" P "ctx" $) */}}
{{- define "moesplit.workerProbes" -}}
{{- range $kind := list "startup" "readiness" "liveness" }}
{{ $kind }}Probe:
  {{- if $.ctx.Values.tls.enabled }}
  exec:
    command: ["moesplit", "health", "--addr", "127.0.0.1:{{ $.port }}", "--tls-ca", "/etc/moesplit/ca/ca.crt",
              "--tls-cert", "/etc/moesplit/tls/tls.crt", "--tls-key", "/etc/moesplit/tls/tls.key"]
  {{- else }}
  grpc:
    port: {{ $.port }}
  {{- end }}
  {{- include "moesplit.probeTiming" (dict "ctx" $.ctx "kind" $kind) | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Whole CPUs of a CPU quantity ("8", 8, "2.5", "8000m"), rounded down, at least 1. */}}
{{- define "moesplit.wholeCpus" -}}
{{- $c := toString . -}}
{{- $n := 0 -}}
{{- if hasSuffix "m" $c -}}
{{- $n = div (atoi (trimSuffix "m" $c)) 1000 -}}
{{- else -}}
{{- $n = int (floor (float64 $c)) -}}
{{- end -}}
{{- max 1 $n -}}
{{- end -}}

{{/* --threads: the value, or with 0 the CPU request's whole CPUs. (the component's values) */}}
{{- define "moesplit.threads" -}}
{{- if gt (int .threads) 0 -}}
{{- .threads -}}
{{- else -}}
{{- include "moesplit.wholeCpus" (.resources.requests.cpu | default 1) -}}
{{- end -}}
{{- end -}}

{{/* A container's resources: (dict "v" component-values "gpus" N) —
     Guaranteed QoS (limits = requests for CPU, memory = the limit or the
     request) when v.guaranteedQoS, hugepages-2Mi when v.hugepages2Mi, the GPUs. */}}
{{- define "moesplit.resources" -}}
{{- $res := deepCopy (.v.resources | default dict) -}}
{{- $req := get $res "requests" | default dict -}}
{{- $lim := get $res "limits" | default dict -}}
{{- if .v.guaranteedQoS -}}
{{- $_ := set $lim "cpu" (get $req "cpu") -}}
{{- $mem := get $lim "memory" | default (get $req "memory") -}}
{{- $_ := set $lim "memory" $mem -}}
{{- $_ := set $req "memory" $mem -}}
{{- end -}}
{{- if .v.hugepages2Mi -}}
{{- $_ := set $req "hugepages-2Mi" .v.hugepages2Mi -}}
{{- $_ := set $lim "hugepages-2Mi" .v.hugepages2Mi -}}
{{- end -}}
{{- if gt (int .gpus) 0 -}}
{{- $_ := set $lim "nvidia.com/gpu" (int .gpus) -}}
{{- end -}}
{{- if $req }}{{ $_ := set $res "requests" $req }}{{ end -}}
{{- if $lim }}{{ $_ := set $res "limits" $lim }}{{ end -}}
{{- toYaml $res -}}
{{- end -}}

{{/* topologySpreadConstraints, each with the component's pod labels unless it has a selector. (dict "list" L "ctx" $ "component" C) */}}
{{- define "moesplit.topologySpread" -}}
{{- $out := list -}}
{{- range .list -}}
{{- $c := deepCopy . -}}
{{- if not (hasKey $c "labelSelector") -}}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "moesplit.selectorLabels" (dict "ctx" $.ctx "component" $.component) | fromYaml)) -}}
{{- end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Secret names. */}}
{{- define "moesplit.apiKeysSecret" -}}{{ .Values.apiKeys.existingSecret | default (printf "%s-api-keys" (include "moesplit.fullname" .)) }}{{- end -}}
{{- define "moesplit.denseTlsSecret" -}}{{ .Values.tls.denseSecret | default (printf "%s-dense-tls" (include "moesplit.fullname" .)) }}{{- end -}}
{{- define "moesplit.workerTlsSecret" -}}{{ .Values.tls.expertWorkerSecret | default (printf "%s-expert-worker-tls" (include "moesplit.fullname" .)) }}{{- end -}}
{{- define "moesplit.caSecret" -}}{{ .Values.tls.caSecret | default (printf "%s-ca" (include "moesplit.fullname" .)) }}{{- end -}}

{{/* Read-only Secret volumes: (dict "ctx" $ "tlsSecret" NAME) */}}
{{- define "moesplit.secretVolumes" -}}
{{- if .ctx.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .tlsSecret }}
    defaultMode: 288  # 0440: root and the pod's fsGroup (10001)
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
- name: tls-ca
  secret:
    secretName: {{ include "moesplit.caSecret" .ctx }}
    defaultMode: 288
    items:
      - {key: ca.crt, path: ca.crt}
{{- end }}
{{- end -}}

{{- define "moesplit.tlsMounts" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/moesplit/tls
  readOnly: true
- name: tls-ca
  mountPath: /etc/moesplit/ca
  readOnly: true
{{- end }}
{{- end -}}

{{- define "moesplit.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* (dict "ipcLock" bool) */}}
{{- define "moesplit.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
  {{- if .ipcLock }}
  # mlock of the experts (or --pin-experts) regardless of RLIMIT_MEMLOCK.
  add: ["IPC_LOCK"]
  {{- end }}
{{- end -}}

{{/* The expert-worker's arguments after --shard. (dict "i" i "ctx" $ "shm" bool) */}}
{{- define "moesplit.workerArgs" -}}
{{- $v := .ctx.Values.expertWorker -}}
- --model=/models/{{ .ctx.Values.model.file }}
- --threads={{ include "moesplit.threads" $v }}
- --numa={{ $v.numa }}
{{- if .ctx.Values.tls.enabled }}
- --tls-cert=/etc/moesplit/tls/tls.crt
- --tls-key=/etc/moesplit/tls/tls.key
- --tls-ca=/etc/moesplit/ca/ca.crt
{{- end }}
{{- if .shm }}
- --shard={{ include "moesplit.shard" (dict "i" .i "ctx" .ctx) }}
- --listen-shm=moesplit-w{{ .i }}
- --listen-grpc=0.0.0.0:{{ add (int $v.grpcPort) .i }}
- --metrics=0.0.0.0:{{ add (int $v.metricsPort) .i }}
- --worker-id=shm-worker-{{ .i }}
{{- else }}
- --listen-grpc=0.0.0.0:{{ $v.grpcPort }}
- --metrics=0.0.0.0:{{ $v.metricsPort }}
{{- end }}
{{- range $v.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
