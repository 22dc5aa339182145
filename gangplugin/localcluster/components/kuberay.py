"""The KubeRay operator (RayJob, RayCluster, RayService, `ray.io/v1`), from KubeRay's own CRDs
(`<cache>/kuberay-<version>/`). As KubeRay's default install, without its webhook (it validates
RayClusters only, and takes no port or address: it would bind 0.0.0.0:9443 on the machine)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gangplugin.kube.client import Client
from gangplugin.localcluster import manifests
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.components.operators import manifests_dir
from gangplugin.localcluster.probes import http_ok
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process


@dataclass(frozen=True)
class KubeRay(Component):
    name = "kuberay"
    optional = True
    build_group = "extras"
    kueue_frameworks = ("ray.io/rayjob", "ray.io/raycluster")

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return (spec.bin_dir / "kuberay-operator",)

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        p = spec.ports
        return {"kuberay health": p.at(891)}

    def install(self, spec: ClusterSpec, client: Client) -> None:
        directory = manifests_dir(spec, self.name, "KUBERAY_VERSION")
        manifests.apply_crds(
            client, spec, manifests.read_crds(directory, "ray.io_*.yaml", "KubeRay"), "KubeRay"
        )

    def process(self, spec: ClusterSpec) -> Process:
        ports = self.listens(spec)
        health = ports["kuberay health"]
        return Process(
            self.name,
            (
                str(self.binaries(spec)[0]),
                f"--kubeconfig={spec.kubeconfig}",
                "--enable-leader-election=false",
                # A RayJob's reconcile waits on the Ray dashboard, which kwok's pods do not run:
                # more workers keep one RayJob's wait off the others (and off their deletion).
                "--reconcile-concurrency=4",
                "--metrics-addr=0",  # off: nothing here reads it
                f"--health-probe-bind-address=127.0.0.1:{health}",
            ),
            env={"KUBECONFIG": str(spec.kubeconfig)},
            health=lambda: http_ok(f"http://127.0.0.1:{health}/readyz"),
            ports=tuple(ports.values()),
        )
