"""The JobSet controller at the version the cluster's Kueue is built against: `<cache>/bin/jobset-<version>`
with JobSet's own CRD and webhook manifests (`<cache>/jobset-<version>/`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gangplugin.kube.client import Client
from gangplugin.localcluster import manifests
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.components.operators import configured_manager
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process

# Its pod webhooks see only JobSet pods, as JobSet's kustomize patches set them.
JOBSET_PODS = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}


def manifests_dir(spec: ClusterSpec) -> Path:
    return spec.cache / f"jobset-{spec.jobset_version}"


@dataclass(frozen=True)
class JobSet(Component):
    name = "jobset"
    kueue_frameworks = ("jobset.x-k8s.io/jobset",)

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return (spec.bin_dir / f"jobset-{spec.jobset_version}",)

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        p = spec.ports
        return {
            "jobset webhook": p.jobset_webhook,
            "jobset metrics": p.jobset_metrics,
            "jobset health": p.jobset_health,
        }

    def install(self, spec: ClusterSpec, client: Client) -> None:
        manifests.install_upstream(
            client,
            spec,
            manifests_dir(spec),
            "jobset.x-k8s.io_*.yaml",
            "JobSet",
            spec.ports.jobset_webhook,
            keep=lambda _path: True,
            pod_selector={"objectSelector": JOBSET_PODS},
        )

    def process(self, spec: ClusterSpec) -> Process:
        p, certs = spec.ports, str(spec.serving_cert_dir)
        return configured_manager(
            spec,
            self.name,
            self.binaries(spec)[0],
            api_version="config.jobset.x-k8s.io/v1alpha1",
            cert_management="internalCertManagement",
            webhook={"port": p.jobset_webhook, "host": "127.0.0.1", "certDir": certs},
            metrics={"bindAddress": f"127.0.0.1:{p.jobset_metrics}", "certDir": certs},
            health=p.jobset_health,
            ports=tuple(self.listens(spec).values()),
        )
