{{/* The agent's image, with the private repository or system registry prefix. */}}
{{- define "fleet-agent.image" -}}
{{- $prefix := .Values.privateRepoURL | default .Values.global.cattle.systemDefaultRegistry | trimSuffix "/" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if $prefix -}}
{{ $prefix }}/{{ .Values.image.repository }}:{{ $tag }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* Labels on every object of the chart. No chart version or release
revision: the controller and the agent apply the same objects, and a label that
changed with every render would make them rewrite each other's work. */}}
{{- define "fleet-agent.labels" -}}
app.kubernetes.io/name: fleet-agent
app.kubernetes.io/part-of: fleet
{{- end -}}

{{/* The labels that select the agent's pods: the Deployment's selector (which
cannot change once the Deployment exists), the PodDisruptionBudget and the
NetworkPolicy. */}}
{{- define "fleet-agent.selectorLabels" -}}
app: fleet-agent
{{- end -}}

{{/* An int-or-percent value: numbers unquoted, percentages quoted. */}}
{{- define "fleet-agent.intOrPercent" -}}
{{- $s := toString . -}}
{{- if hasSuffix "%" $s -}}{{ $s | quote }}{{- else -}}{{ $s }}{{- end -}}
{{- end -}}
