{{- define "fleet.labels" -}}
app.kubernetes.io/name: fleet-controller
app.kubernetes.io/part-of: fleet
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fleet.image" -}}
{{- $registry := .Values.global.cattle.systemDefaultRegistry | trimSuffix "/" -}}
{{- $repo := .Values.image.repository -}}
{{- if $registry }}{{ $registry }}/{{ end }}{{ $repo }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The agent image reference given to agents (without registry prefix: the
agent chart adds systemDefaultRegistry or the Cluster's privateRepoURL). */}}
{{- define "fleet.agentImage" -}}
{{- $repo := .Values.agent.image.repository | default .Values.image.repository -}}
{{- $tag := .Values.agent.image.tag | default .Values.image.tag | default .Chart.AppVersion -}}
{{ $repo }}:{{ $tag }}
{{- end -}}

{{- define "fleet.proxyLabels" -}}
app.kubernetes.io/name: fleet-proxy
app.kubernetes.io/part-of: fleet
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fleet.rendererLabels" -}}
app.kubernetes.io/name: fleet-renderer
app.kubernetes.io/part-of: fleet
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
