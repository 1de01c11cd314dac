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

{{/* fleet.durationSeconds: a Go duration (checked by the values schema) in
seconds, for the minimums of templates/validate.yaml. */}}
{{- define "fleet.durationSeconds" -}}
{{- $units := dict "ns" 1e-9 "us" 1e-6 "µs" 1e-6 "μs" 1e-6 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)" (toString .) -1 -}}
{{- $n := regexFind "^([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" . -}}
{{- $total = addf $total (mulf (float64 $n) (get $units (trimPrefix $n .))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* fleet.quantityBytes: a Kubernetes quantity (checked by the values
schema) in bytes. */}}
{{- define "fleet.quantityBytes" -}}
{{- $q := toString . -}}
{{- $n := regexFind "^[-+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" $q -}}
{{- $suffix := trimPrefix $n $q -}}
{{- $units := dict "" 1.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 "n" 1e-9 "u" 1e-6 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 -}}
{{- $scale := 1.0 -}}
{{- if hasKey $units $suffix -}}
{{- $scale = get $units $suffix -}}
{{- else -}}
{{- $exp := int (regexReplaceAll "^([-+]?)0*" (substr 1 -1 $suffix) "${1}") -}}
{{- range until (int (max $exp (sub 0 $exp))) -}}
{{- $scale = ternary (mulf $scale 10) (divf $scale 10) (gt $exp 0) -}}
{{- end -}}
{{- end -}}
{{- mulf (float64 $n) $scale -}}
{{- end -}}

{{- define "fleet.gitopsLabels" -}}
app.kubernetes.io/name: fleet-gitops
app.kubernetes.io/part-of: fleet
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
