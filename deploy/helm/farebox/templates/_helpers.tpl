{{/* Names and labels shared by every template. */}}
{{- define "farebox.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "farebox.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "farebox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "farebox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "farebox.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "farebox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "farebox.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "farebox.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "farebox.configMapName" -}}
{{- default (printf "%s-config" (include "farebox.fullname" .)) .Values.config.existingConfigMap -}}
{{- end -}}

{{/* The pod must outlive the drain: preStop sleep, the gateway's grace, uvicorn's 5 s backstop. */}}
{{- define "farebox.checkGrace" -}}
{{- $needed := add .Values.preStopSleepSeconds .Values.shutdownGraceSeconds 5 -}}
{{- if le (int .Values.terminationGracePeriodSeconds) (int $needed) -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + shutdownGraceSeconds + 5 (%d), or in-flight streams are killed" (int .Values.terminationGracePeriodSeconds) (int $needed)) -}}
{{- end -}}
{{- end -}}
