"""Kubeflow Trainer (TrainJob, `trainer.kubeflow.org/v1alpha1`), from its own CRD and webhook
manifests (`<cache>/trainer-<version>/`), with its ClusterTrainingRuntime `torch-distributed`.

A TrainJob runs as a JobSet the trainer builds from its runtime, so it needs the JobSet
controller. Its certificate management is off; its webhook server, which takes no certificate
directory, reads the cluster's serving pair from a TMPDIR of its own (components/operators.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from gangplugin.kube.client import Client, Resource
from gangplugin.localcluster import manifests
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.components.operators import manifests_dir, serving_tmpdir
from gangplugin.localcluster.probes import INSTALL_DEADLINE, http_ok, wait
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process

CLUSTER_TRAINING_RUNTIMES = Resource(
    "trainer.kubeflow.org/v1alpha1", "clustertrainingruntimes", namespaced=False
)
# The runtime a TrainJob names in spec.runtimeRef (runtimes/ of Trainer's manifests).
TORCH_RUNTIME = "torch_distributed.yaml"


@dataclass(frozen=True)
class Trainer(Component):
    name = "trainer"
    optional = True
    build_group = "extras"
    requires = ("jobset",)
    kueue_frameworks = ("trainer.kubeflow.org/trainjob",)

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return (spec.bin_dir / "trainer-controller-manager",)

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        p = spec.ports
        return {"trainer webhook": p.at(947), "trainer health": p.at(887)}

    def install(self, spec: ClusterSpec, client: Client) -> None:
        manifests.install_upstream(
            client,
            spec,
            manifests_dir(spec, self.name, "TRAINER_VERSION"),
            "trainer.kubeflow.org_*.yaml",
            "Trainer",
            spec.ports.at(947),
            keep=lambda _path: True,
            pod_selector={},
        )

    def process(self, spec: ClusterSpec) -> Process:
        ports = self.listens(spec)
        health = ports["trainer health"]
        config = spec.state_dir / "trainer-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "certManagement": {"enable": False},
                    "webhook": {"port": ports["trainer webhook"], "host": "127.0.0.1"},
                    "metrics": {"bindAddress": "0"},  # off: nothing here reads it
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
                },
                sort_keys=False,
            )
        )
        return Process(
            self.name,
            (str(self.binaries(spec)[0]), f"--config={config}", f"--kubeconfig={spec.kubeconfig}"),
            env={"KUBECONFIG": str(spec.kubeconfig), "TMPDIR": str(serving_tmpdir(spec, self.name))},
            health=lambda: http_ok(f"http://127.0.0.1:{health}/readyz"),
            ports=tuple(ports.values()),
        )

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        """The torch runtime, once the trainer's webhooks (which validate it) answer."""
        path = manifests_dir(spec, self.name, "TRAINER_VERSION") / "runtimes" / TORCH_RUNTIME
        runtime = yaml.safe_load(path.read_text())

        def applied() -> bool:
            client.apply(CLUSTER_TRAINING_RUNTIMES, runtime, field_manager=manifests.FIELD_MANAGER)
            return True

        wait(
            applied,
            INSTALL_DEADLINE,
            f"Trainer's webhooks to take ClusterTrainingRuntime {runtime['metadata']['name']}",
        )
