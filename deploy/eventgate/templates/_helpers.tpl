{{/* The chart's name. */}}
{{- define "eventgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: release name, plus the chart's unless it has it. */}}
{{- define "eventgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "eventgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "eventgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "eventgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "eventgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "eventgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "eventgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the tokens file. */}}
{{- define "eventgate.authSecret" -}}
{{- if .Values.auth.tokensSecret }}
{{- .Values.auth.tokensSecret }}
{{- else if .Values.auth.tokens }}
{{- printf "%s-auth" (include "eventgate.fullname" .) }}
{{- else }}
{{- fail "auth.tokensSecret or auth.tokens is required: without authentication the gateway serves loopback only, unreachable in a pod (see the README's \"Authentication and tenants\")" }}
{{- end }}
{{- end }}

{{/* The NATS URL: natsUrl, else the client Service of the NATS subchart
(named as that chart names it). */}}
{{- define "eventgate.natsUrl" -}}
{{- if .Values.natsUrl }}
{{- .Values.natsUrl }}
{{- else if .Values.nats.enabled }}
{{- $name := "nats" }}
{{- $full := "" }}
{{- if .Values.nats.fullnameOverride }}
{{- $full = .Values.nats.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains $name .Release.Name }}
{{- $full = .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $full = printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- printf "nats://%s.%s.svc:%d" $full .Release.Namespace (int (((.Values.nats.config).nats).port | default 4222)) }}
{{- else }}
{{- fail "natsUrl is required when nats.enabled is false" }}
{{- end }}
{{- end }}

{{- define "eventgate.embedded" -}}
{{- if eq .Values.store.mode "embedded" }}true{{ else if eq .Values.store.mode "clickhouse" }}{{ else }}{{ fail (printf "store.mode must be embedded or clickhouse, got %q" .Values.store.mode) }}{{ end }}
{{- end }}
