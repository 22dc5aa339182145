{{- define "gangplugin.schedulerConfig" -}}
# kube-scheduler configuration for an in-cluster install: a second scheduler (its own
# Deployment) whose only profile is `gangplugin-scheduler`, next to the cluster's default
# scheduler, which stays untouched (managed control planes such as EKS do not let users
# reconfigure it). Training pods opt in with `spec.schedulerName: gangplugin-scheduler`.
# Extenders apply to every profile of a scheduler, which is why this is a separate process
# rather than a second profile of the default one.
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceName: gangplugin-scheduler
  resourceNamespace: {{ .Release.Namespace }}
percentageOfNodesToScore: 100
profiles:
- schedulerName: gangplugin-scheduler
extenders:
- urlPrefix: https://gangplugin-extender.{{ .Release.Namespace }}.svc:8443
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 5
  enableHTTPS: true
  # Mutual TLS: the extender answers only this client certificate's CA.
  tlsConfig:
    caFile: /etc/gangplugin/extender-ca/ca.crt
    certFile: /etc/gangplugin/extender-client/tls.crt
    keyFile: /etc/gangplugin/extender-client/tls.key
  # Above the extender's bind-barrier timeout (--extender-barrier-timeout, 60s).
  httpTimeout: 90s
  nodeCacheCapable: true
  ignorable: false
  managedResources:
  - name: nvidia.com/gpu
    ignoredByScheduler: false
  - name: aws.amazon.com/neuron
    ignoredByScheduler: false
{{- end -}}
