"""The JobSet controller, from JobSet's own CRD and webhook manifests (`<cache>/jobset-<version>/`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from gangplugin.kube.client import Client
from gangplugin.localcluster import manifests
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.probes import http_ok
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process
from gangplugin.localcluster.upstream import versions

# Its pod webhooks see only JobSet pods, as JobSet's kustomize patches set them.
JOBSET_PODS = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}


def manifests_dir(spec: ClusterSpec) -> Path:
    return spec.cache / f"jobset-{versions()['JOBSET_VERSION']}"


@dataclass(frozen=True)
class JobSet(Component):
    name = "jobset"
    kueue_frameworks = ("jobset.x-k8s.io/jobset",)

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
        config = spec.state_dir / "jobset-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "internalCertManagement": {"enable": False},
                    "webhook": {"port": p.jobset_webhook, "host": "127.0.0.1", "certDir": certs},
                    "metrics": {"bindAddress": f"127.0.0.1:{p.jobset_metrics}", "certDir": certs},
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{p.jobset_health}"},
                },
                sort_keys=False,
            )
        )
        return Process(
            self.name,
            (str(spec.bin_dir / "jobset"), f"--config={config}", f"--kubeconfig={spec.kubeconfig}"),
            env={"KUBECONFIG": str(spec.kubeconfig)},
            health=lambda: http_ok(f"http://127.0.0.1:{p.jobset_health}/readyz"),
            ports=tuple(self.listens(spec).values()),
        )
