{{/* Labels of every object: config/'s own plus the part-of label kustomize adds, plus Helm's. */}}
{{- define "agentsession.labels" -}}
app.kubernetes.io/name: agentsession-operator
app.kubernetes.io/part-of: agentsession
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "agentsession.namespace" -}}{{ .Values.namespace.name }}{{- end -}}
