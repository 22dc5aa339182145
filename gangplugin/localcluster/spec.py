"""What one local cluster is: where it lives, its ports, what runs in it and with which options.
Every component builds its command line and its objects from this alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gangplugin.localcluster.ports import Ports

# Opt-in (GANGPLUGIN_GENERIC_WORKLOAD=1): Kubernetes' GenericWorkload feature gate (beta, off by
# default in 1.37) on kube-apiserver, kube-controller-manager and kube-scheduler, and the
# scheduling.k8s.io/v1beta1 API it serves PodGroups in (a beta API is off unless asked for).
# kube-scheduler's default plugins then include GangScheduling: bindMode PodGroup needs it.
GENERIC_WORKLOAD_ENV = "GANGPLUGIN_GENERIC_WORKLOAD"
GENERIC_WORKLOAD_GATE = "--feature-gates=GenericWorkload=true"
GENERIC_WORKLOAD_API = "--runtime-config=scheduling.k8s.io/v1beta1=true"


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    state_dir: Path
    ports: Ports
    # Names of the components that run, in start order (etcd and kube-apiserver first).
    components: tuple[str, ...]
    kueue_version: str
    # The JobSet that Kueue version is built against (upstream.jobset_version).
    jobset_version: str
    # Kueue integrations for the workloads the running controllers run (Kueue's own config adds
    # the shipped patch's).
    kueue_frameworks: tuple[str, ...]
    # Kueue feature gates the running components ask for (`Name=true|false`).
    kueue_feature_gates: tuple[str, ...]
    # Kubernetes' GenericWorkload feature gate and the PodGroup API (bindMode PodGroup).
    generic_workload: bool
    # The LocalClusterShape the fake nodes are made from; None: no nodes.
    shape: Path | None
    # What `gangplugin serve --components` runs; empty: no gangplugin process.
    gangplugin_components: tuple[str, ...]
    cache: Path
    # More `gangplugin serve` flags (a MultiKueue manager's dispatcher timeouts).
    gangplugin_args: tuple[str, ...] = ()
    # Settings merged into Kueue's Configuration last (a MultiKueue manager's `multiKueue`).
    kueue_config: Mapping[str, Any] = field(default_factory=dict)
    # `gangplugin serve` processes, with leader election between them (the Helm chart's two).
    gangplugin_replicas: int = 2

    @property
    def bin_dir(self) -> Path:
        return self.cache / "bin"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def extender_clients_dir(self) -> Path:
        """The CA of the extender's only client, kube-scheduler (it signs nothing else)."""
        return self.pki_dir / "extender-clients"

    @property
    def serving_cert_dir(self) -> Path:
        """The cluster's serving certificate as tls.crt/tls.key, for controller-runtime webhooks."""
        return self.state_dir / "serving-certs"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    def generic_workload_flags(self, *flags: str) -> tuple[str, ...]:
        return flags if self.generic_workload else ()
