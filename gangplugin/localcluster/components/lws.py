"""The LeaderWorkerSet controller, from LWS's own CRD and webhook manifests
(`<cache>/lws-<version>/`): its internal certificate management off, its webhooks served from
the cluster's serving certificate on 127.0.0.1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gangplugin.localcluster.components.operators import UpstreamController
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process

# Its pod webhooks see only LeaderWorkerSet pods, as LWS's kustomize patches set them.
LWS_PODS = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}


@dataclass(frozen=True)
class LeaderWorkerSet(UpstreamController):
    name = "lws"
    kueue_frameworks = ("leaderworkerset.x-k8s.io/leaderworkerset",)
    version_key = "LWS_VERSION"
    crd_files = "*.x-k8s.io_*.yaml"  # LeaderWorkerSet and (v0.9) DisaggregatedSet
    what = "LWS"
    webhook_offset, health_offset = 948, 889
    pod_selector: ClassVar[dict[str, Any]] = {"objectSelector": LWS_PODS}

    def process(self, spec: ClusterSpec) -> Process:
        return self.manager(
            spec,
            api_version="config.lws.x-k8s.io/v1alpha1",
            cert_management="internalCertManagement",
            webhook={"certDir": str(spec.serving_cert_dir)},
        )
