{{/* Names and labels shared by the templates. */}}

{{- define "gannet.operatorName" -}}
{{- printf "%s-gannet-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gannet.serviceAccountName" -}}
{{- default (include "gannet.operatorName" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "gannet.selectorLabels" -}}
app.kubernetes.io/name: gannet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "gannet.labels" -}}
{{ include "gannet.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name (.Chart.Version | replace "+" "_") }}
{{- end -}}

{{- define "gannet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "gannet.adminSecretName" -}}
{{- default (printf "%s-gannet-admin" .Release.Name | trunc 63 | trimSuffix "-") .Values.security.auth.adminSecret -}}
{{- end -}}

{{/* spec.security for the chart's GannetCluster from .Values.security (a TLS value set). */}}
{{- define "gannet.tlsSpec" -}}
{{- if .enabled -}}
{{- if .secretName -}}
{{- dict "enabled" true "secretName" .secretName | toJson -}}
{{- else -}}
{{- if not .certManager.issuerRef.name -}}
{{- fail "security.tls/peerTls: enabled needs secretName or certManager.issuerRef.name" -}}
{{- end -}}
{{- dict "enabled" true "certManager" (dict "issuerRef" .certManager.issuerRef) | toJson -}}
{{- end -}}
{{- else -}}
{{- dict "enabled" false | toJson -}}
{{- end -}}
{{- end -}}
