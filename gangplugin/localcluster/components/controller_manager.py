"""kube-controller-manager: the built-in controllers (Jobs, garbage collection, node lifecycle)."""

from __future__ import annotations

from dataclasses import dataclass

from gangplugin.localcluster import nodes
from gangplugin.localcluster.components.base import Component, kube_serving_flags
from gangplugin.localcluster.probes import https_ok
from gangplugin.localcluster.spec import GENERIC_WORKLOAD_GATE, ClusterSpec
from gangplugin.localcluster.supervisor import Process


@dataclass(frozen=True)
class KubeControllerManager(Component):
    name = "kube-controller-manager"
    kueue_frameworks = ("batch/job",)  # its Job controller runs batch/v1 Jobs

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        return {"kube-controller-manager": spec.ports.controller_manager}

    def process(self, spec: ClusterSpec) -> Process:
        port = spec.ports.controller_manager
        return Process(
            self.name,
            (
                str(spec.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={spec.kubeconfig}",
                *kube_serving_flags(spec, port, "kcm-certs"),
                "--leader-elect=false",
                f"--root-ca-file={spec.pki_dir / 'ca.crt'}",
                f"--service-account-private-key-file={spec.pki_dir / 'sa.key'}",
                "--use-service-account-credentials=false",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                # kwok renews every lease at a quarter of its duration: as kubelet, 50 s of grace
                # for 40 s leases, and leases that last longer on a large shape.
                f"--node-monitor-grace-period={nodes.lease_seconds(spec.shape) * 5 // 4}s",
                *spec.generic_workload_flags(GENERIC_WORKLOAD_GATE),
            ),
            health=lambda: https_ok(f"https://127.0.0.1:{port}/healthz", None),  # self-signed
            ports=(port,),
        )
