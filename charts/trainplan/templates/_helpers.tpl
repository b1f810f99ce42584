{{/* The chart name, overridable. */}}
{{- define "trainplan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The object name prefix: the release name, with the chart name unless it has it. */}}
{{- define "trainplan.fullname" -}}
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

{{/* Labels of every object. */}}
{{- define "trainplan.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "trainplan.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: trainplan
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the operator pod. The training pods carry
app.kubernetes.io/component: training, so they never match. */}}
{{- define "trainplan.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainplan.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's ServiceAccount. */}}
{{- define "trainplan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trainplan.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image with its tag (the appVersion by default). */}}
{{- define "trainplan.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The webhook Service, and the host name the API server calls. */}}
{{- define "trainplan.webhookService" -}}
{{- printf "%s-webhook" (include "trainplan.fullname" .) }}
{{- end }}
{{- define "trainplan.webhookHost" -}}
{{- printf "%s.%s.svc" (include "trainplan.webhookService" .) .Release.Namespace }}
{{- end }}

{{/* The ValidatingWebhookConfiguration (cluster-scoped, so it carries a domain); its
webhook is named budget.<this>, as Kopf names it in selfSigned mode. */}}
{{- define "trainplan.webhookConfiguration" -}}
{{- printf "%s.trainplan.dev" (include "trainplan.fullname" .) }}
{{- end }}

{{/* cert-manager objects and the Secret they fill. */}}
{{- define "trainplan.webhookCertificate" -}}
{{- printf "%s-webhook" (include "trainplan.fullname" .) }}
{{- end }}
{{- define "trainplan.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "trainplan.fullname" .) }}
{{- end }}
{{- define "trainplan.webhookIssuer" -}}
{{- printf "%s-selfsigned" (include "trainplan.fullname" .) }}
{{- end }}

{{/* "certManager" or "selfSigned", or a failure for anything else. */}}
{{- define "trainplan.webhookMode" -}}
{{- $mode := .Values.webhook.certificate.mode }}
{{- if not (has $mode (list "certManager" "selfSigned")) }}
{{- fail (printf "webhook.certificate.mode must be certManager or selfSigned, not %q" $mode) }}
{{- end }}
{{- $mode }}
{{- end }}

{{/* Whether the operator manages the ValidatingWebhookConfiguration itself. */}}
{{- define "trainplan.webhookManaged" -}}
{{- if and .Values.webhook.enabled (eq (include "trainplan.webhookMode" .) "selfSigned") }}true{{ end }}
{{- end }}

{{/* Whether cert-manager issues the webhook's certificate. */}}
{{- define "trainplan.webhookCertManager" -}}
{{- if and .Values.webhook.enabled (eq (include "trainplan.webhookMode" .) "certManager") }}true{{ end }}
{{- end }}

{{/* The rules on namespaced resources: in the ClusterRole when the operator watches
every namespace, else in a Role of each watched namespace. */}}
{{- define "trainplan.namespacedRules" -}}
# Kopf lists and watches the plans and budgets, patches them (its annotations and the
# finalizer) and their status; the operator reads them and writes budget status.
- apiGroups: ["trainplan.dev"]
  resources: ["trainingplans", "gpubudgets"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["trainplan.dev"]
  resources: ["trainingplans/status", "gpubudgets/status"]
  verbs: ["patch"]
# The plan owns its Job, Service and ConfigMap with blockOwnerDeletion: the API server's
# OwnerReferencesPermissionEnforcement plugin (OpenShift and others) then asks for this.
- apiGroups: ["trainplan.dev"]
  resources: ["trainingplans/finalizers"]
  verbs: ["update"]
# The training Job or JobSet: created, watched for status, patched for job.suspend.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["create", "get", "list", "watch", "patch"]
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["create", "get", "list", "watch", "patch"]
# The headless Service and the DeepSpeed ConfigMap: created, or adopted when found.
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["create", "get"]
# Kueue: a queued job's Workload is watched for its admission (the plan's Admitted
# condition), and paused and resumed through its spec.active.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list", "watch", "patch"]
# Training pods: failures and metrics endpoints.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}

{{/* Refuse replica settings that would run two operators on the same plans. */}}
{{- define "trainplan.checkReplicas" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.peering.enabled) }}
{{- fail "replicaCount above 1 needs peering.enabled: standalone operators would each handle every plan" }}
{{- end }}
{{- if and .Values.peering.enabled (include "trainplan.webhookManaged" .) }}
{{- fail "webhook.certificate.mode selfSigned makes each replica write its own CA into the webhook configuration: use certManager, or peering.enabled=false with replicaCount=1" }}
{{- end }}
{{- end }}
