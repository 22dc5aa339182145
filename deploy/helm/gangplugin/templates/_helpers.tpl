{{/* Labels every object carries; selectors use only app.kubernetes.io/name. */}}
{{- define "gangplugin.labels" -}}
app.kubernetes.io/part-of: gangplugin
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gangplugin.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The second scheduler's image: the cluster's own version unless a tag is given (a
kube-scheduler newer than the API server is outside Kubernetes' version skew policy). */}}
{{- define "gangplugin.schedulerImage" -}}
{{- $v := semver .Capabilities.KubeVersion.Version -}}
{{ .Values.scheduler.image.repository }}:{{ .Values.scheduler.image.tag | default (printf "v%d.%d.%d" $v.Major $v.Minor $v.Patch) }}
{{- end -}}

{{/* The names the serving certificate carries: every Service of the release, and the loopback
names gangctl uses through `kubectl port-forward`. */}}
{{- define "gangplugin.dnsNames" -}}
{{- $ns := .Release.Namespace -}}
- gangplugin-extender.{{ $ns }}.svc
- gangplugin-extender.{{ $ns }}.svc.cluster.local
- gangplugin.{{ $ns }}.svc
- gangplugin.{{ $ns }}.svc.cluster.local
- gangplugin-webhook.{{ $ns }}.svc
- gangplugin-console.{{ $ns }}.svc
- gangplugin-console.{{ $ns }}.svc.cluster.local
- localhost
{{- end -}}

{{/* certificates.mode generate: the CAs and certificates, made once per rendering (every
template that includes this sees the same ones) and taken from the release's Secrets where they
exist, so an upgrade keeps them. JSON: {ca, serving, clientCA, schedulerClient}, each {cert, key}
in PEM. */}}
{{- define "gangplugin.generatedTLS" -}}
{{- if not (hasKey .Values "generatedTLS") -}}
{{- $ns := .Release.Namespace -}}
{{- $out := dict -}}
{{- $ca := dict -}}
{{- $old := lookup "v1" "Secret" $ns "gangplugin-ca" -}}
{{- if and $old $old.data (index $old.data "tls.key") -}}
{{- $ca = buildCustomCert (index $old.data "tls.crt") (index $old.data "tls.key") -}}
{{- else -}}
{{- $ca = genCA "gangplugin-ca" 3650 -}}
{{- end -}}
{{- $_ := set $out "ca" (dict "cert" $ca.Cert "key" $ca.Key) -}}
{{- $old = lookup "v1" "Secret" $ns "gangplugin-serving-tls" -}}
{{- if and $old $old.data (eq (index $old.data "ca.crt" | default "" | b64dec) $ca.Cert) -}}
{{- $_ := set $out "serving" (dict "cert" (index $old.data "tls.crt" | b64dec) "key" (index $old.data "tls.key" | b64dec)) -}}
{{- else -}}
{{- $c := genSignedCert "gangplugin" (list "127.0.0.1") (include "gangplugin.dnsNames" . | fromYamlArray) 3650 $ca -}}
{{- $_ := set $out "serving" (dict "cert" $c.Cert "key" $c.Key) -}}
{{- end -}}
{{- $client := dict -}}
{{- $old = lookup "v1" "Secret" $ns "gangplugin-extender-client-ca" -}}
{{- if and $old $old.data (index $old.data "tls.key") -}}
{{- $client = buildCustomCert (index $old.data "tls.crt") (index $old.data "tls.key") -}}
{{- else -}}
{{- $client = genCA "gangplugin-extender-client-ca" 3650 -}}
{{- end -}}
{{- $_ := set $out "clientCA" (dict "cert" $client.Cert "key" $client.Key) -}}
{{- $old = lookup "v1" "Secret" $ns "gangplugin-scheduler-client-tls" -}}
{{- if and $old $old.data (eq (index $old.data "ca.crt" | default "" | b64dec) $client.Cert) -}}
{{- $_ := set $out "schedulerClient" (dict "cert" (index $old.data "tls.crt" | b64dec) "key" (index $old.data "tls.key" | b64dec)) -}}
{{- else -}}
{{- $c := genSignedCert "gangplugin-scheduler" nil nil 3650 $client -}}
{{- $_ := set $out "schedulerClient" (dict "cert" $c.Cert "key" $c.Key) -}}
{{- end -}}
{{- $_ := set .Values "generatedTLS" $out -}}
{{- end -}}
{{- toJson .Values.generatedTLS -}}
{{- end -}}

{{/* The CA bundle the API server trusts for the webhooks (generate mode; cert-manager injects
its own). */}}
{{- define "gangplugin.caBundle" -}}
{{- (include "gangplugin.generatedTLS" . | fromJson).ca.cert | b64enc -}}
{{- end -}}

{{- define "gangplugin.checks" -}}
{{- if not (has .Values.certificates.mode (list "certManager" "generate")) -}}
{{- fail (printf "certificates.mode: %q is not certManager or generate" .Values.certificates.mode) -}}
{{- end -}}
{{- if not (has .Values.gangPolicy.bindMode (list "Ungate" "Extender" "PodGroup")) -}}
{{- fail (printf "gangPolicy.bindMode: %q is not Ungate, Extender or PodGroup" .Values.gangPolicy.bindMode) -}}
{{- end -}}
{{- if not (has .Values.podGate (list "auto" "policy" "webhook")) -}}
{{- fail (printf "podGate: %q is not auto, policy or webhook" .Values.podGate) -}}
{{- end -}}
{{- if and .Values.gangPolicy.create (eq .Values.gangPolicy.bindMode "Extender") (not .Values.scheduler.enabled) -}}
{{- fail "gangPolicy.bindMode: Extender needs the second scheduler: set scheduler.enabled=true" -}}
{{- end -}}
{{- end -}}

{{/* `serve --components`, when not its defaults: a MultiKueue manager's dispatcher set, and the
web console added to either (serve's defaults are admission, extender, ungater, plans, api,
webhook; a unit test keeps this list equal to them). Empty: serve's defaults. */}}
{{- define "gangplugin.components" -}}
{{- $c := list -}}
{{- if .Values.multikueue.manager -}}
{{- $c = list "multikueue" "api" "webhook" -}}
{{- else if .Values.console.enabled -}}
{{- $c = list "admission" "extender" "ungater" "plans" "api" "webhook" -}}
{{- end -}}
{{- if .Values.console.enabled -}}
{{- $c = append $c "console" -}}
{{- end -}}
{{- join "," $c -}}
{{- end -}}

{{/* "true" when gang pods are gated by the MutatingAdmissionPolicy (values.yaml, podGate), ""
when by the webhook. */}}
{{- define "gangplugin.podGatePolicy" -}}
{{- if or (eq .Values.podGate "policy") (and (eq .Values.podGate "auto") (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")) -}}
true
{{- end -}}
{{- end -}}
