"""The API resources gangplugin reads and writes beyond the built-in ones in `client.py`."""

from __future__ import annotations

from gangplugin.core.names import API_VERSION
from gangplugin.kube.client import Resource

ADMISSION_CHECKS = Resource("kueue.x-k8s.io/v1beta2", "admissionchecks", namespaced=False)
RESOURCE_FLAVORS = Resource("kueue.x-k8s.io/v1beta2", "resourceflavors", namespaced=False)
TOPOLOGIES = Resource("kueue.x-k8s.io/v1beta2", "topologies", namespaced=False)
GANG_POLICIES = Resource(API_VERSION, "gangpolicies", namespaced=False)
TRAINING_PLANS = Resource(API_VERSION, "trainingplans", namespaced=False)
# Kubernetes' own PodGroup (GenericWorkload feature gate): bindMode PodGroup's bind barrier.
PODGROUPS = Resource("scheduling.k8s.io/v1beta1", "podgroups")
# MultiKueue, on a manager cluster: its worker clusters and their kubeconfig Secrets.
MULTIKUEUE_CONFIGS = Resource("kueue.x-k8s.io/v1beta2", "multikueueconfigs", namespaced=False)
MULTIKUEUE_CLUSTERS = Resource("kueue.x-k8s.io/v1beta2", "multikueueclusters", namespaced=False)
SECRETS = Resource("v1", "secrets")
