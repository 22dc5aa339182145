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
from gangplugin.localcluster.components.operators import (
    UpstreamController,
    serving_tmpdir,
)
from gangplugin.localcluster.probes import INSTALL_DEADLINE, wait
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process

CLUSTER_TRAINING_RUNTIMES = Resource(
    "trainer.kubeflow.org/v1alpha1", "clustertrainingruntimes", namespaced=False
)
# The runtime a TrainJob names in spec.runtimeRef (runtimes/ of Trainer's manifests).
TORCH_RUNTIME = "torch_distributed.yaml"


@dataclass(frozen=True)
class Trainer(UpstreamController):
    name = "trainer"
    requires = ("jobset",)
    kueue_frameworks = ("trainer.kubeflow.org/trainjob",)
    version_key = "TRAINER_VERSION"
    crd_files = "trainer.kubeflow.org_*.yaml"
    what = "Trainer"
    webhook_offset, health_offset = 947, 887

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return (spec.bin_dir / "trainer-controller-manager",)

    def process(self, spec: ClusterSpec) -> Process:
        return self.manager(
            spec,
            api_version="config.trainer.kubeflow.org/v1alpha1",
            cert_management="certManagement",
            webhook={},
            env={"TMPDIR": str(serving_tmpdir(spec, self.name))},
        )

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        """The torch runtime, once the trainer's webhooks (which validate it) answer."""
        path = self.manifests(spec) / "runtimes" / TORCH_RUNTIME
        runtime = yaml.safe_load(path.read_text())

        def applied() -> bool:
            client.apply(CLUSTER_TRAINING_RUNTIMES, runtime, field_manager=manifests.FIELD_MANAGER)
            return True

        wait(
            applied,
            INSTALL_DEADLINE,
            f"Trainer's webhooks to take ClusterTrainingRuntime {runtime['metadata']['name']}",
        )
