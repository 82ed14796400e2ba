{{/*
Object names are fixed, not derived from the release name: the alerts select job="oomwatch"
and daemonset="oomwatch", and a cluster runs one agent per node (the state directory and
/dev/kmsg are the node's), so one release per cluster.
*/}}

{{/* Labels of every object: the kustomize base's, plus helm's own. */}}
{{- define "oomwatch.labels" -}}
app.kubernetes.io/name: oomwatch
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* repository[:tag][@digest], as kustomize's image transformer writes it. */}}
{{- define "oomwatch.image" -}}
{{- $tag := .image.tag | default .defaultTag -}}
{{ .image.repository }}{{ if $tag }}:{{ $tag }}{{ end }}{{ if .image.digest }}@{{ .image.digest }}{{ end }}
{{- end }}

{{/* The agent's service account as the API server names its user. */}}
{{- define "oomwatch.agentUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:oomwatch
{{- end }}

{{/* The subject of every binding to the agent's service account. */}}
{{- define "oomwatch.agentSubject" -}}
- kind: ServiceAccount
  name: oomwatch
  namespace: {{ .Release.Namespace }}
{{- end }}
