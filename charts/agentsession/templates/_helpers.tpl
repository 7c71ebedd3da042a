{{/* Labels of every object: config/'s own plus the part-of label kustomize adds, plus Helm's. */}}
{{- define "agentsession.labels" -}}
app.kubernetes.io/name: agentsession-operator
app.kubernetes.io/part-of: agentsession
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{/* The operator's namespace: the release's (helm install -n), unless namespace.name names another. */}}
{{- define "agentsession.namespace" -}}{{ .Values.namespace.name | default .Release.Namespace }}{{- end -}}
{{/* The operator's ServiceAccount, the one RBAC and the admission pins name: the chart's or one you made. */}}
{{- define "agentsession.serviceAccountName" -}}{{ .Values.serviceAccount.name | default "agentsession-operator" }}{{- end -}}
{{/* Labels of the node agent's objects (config/components/nodeagent's own, plus Helm's). */}}
{{- define "agentsession.nodeAgentLabels" -}}
app.kubernetes.io/name: agentsession-nodeagent
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "agentsession.routerLabels" -}}
app.kubernetes.io/name: agentsession-sandbox-router
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
