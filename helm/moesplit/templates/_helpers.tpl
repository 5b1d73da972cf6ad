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
{{- $n := int .ctx.Values.expertWorker.replicas -}}
{{- $l := int .ctx.Values.model.layers -}}
{{- $b := div (mul .i $l) $n -}}
{{- $e := sub (div (mul (add1 .i) $l) $n) 1 -}}
layers={{ $b }}-{{ $e }}
{{- end -}}

{{/* The --experts list of the dense service. */}}
{{- define "moesplit.experts" -}}
{{- $ctx := . -}}
{{- $out := list -}}
{{- range $i := until (int .Values.expertWorker.replicas) -}}
{{- if $ctx.Values.coLocation.enabled -}}
{{- $out = append $out (printf "shm://moesplit-w%d" $i) -}}
{{- else -}}
{{- $out = append $out (printf "grpc://%s-%d.%s.%s.svc:%d" (include "moesplit.worker" $ctx) $i (include "moesplit.worker" $ctx) $ctx.Release.Namespace (int $ctx.Values.expertWorker.grpcPort)) -}}
{{- end -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* gRPC health probes (Kubernetes native). (dict "port" P "ctx" $) */}}
{{- define "moesplit.probes" -}}
startupProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: {{ .ctx.Values.probes.periodSeconds }}
  failureThreshold: {{ .ctx.Values.probes.startupFailureThreshold }}
readinessProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: {{ .ctx.Values.probes.periodSeconds }}
  failureThreshold: 2
livenessProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: {{ .ctx.Values.probes.periodSeconds }}
  timeoutSeconds: 5
  failureThreshold: 6
{{- end -}}

{{- define "moesplit.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "moesplit.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The expert-worker's arguments after --shard. (dict "i" i "ctx" $ "shm" bool) */}}
{{- define "moesplit.workerArgs" -}}
{{- $v := .ctx.Values.expertWorker -}}
- --model=/models/{{ .ctx.Values.model.file }}
- --threads={{ $v.threads }}
- --numa={{ $v.numa }}
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
