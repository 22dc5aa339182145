"""kwok: the fake nodes' heartbeats and their pods' lifecycle (deploy/kwok/stages.yaml); the
nodes themselves are made from the cluster's shape once kwok runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gangplugin.kube.client import Client
from gangplugin.localcluster import nodes
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.probes import http_ok
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process
from gangplugin.localcluster.upstream import REPO


@dataclass(frozen=True)
class Kwok(Component):
    name = "kwok"

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        return {"kwok": spec.ports.kwok}

    def process(self, spec: ClusterSpec) -> Process:
        port = spec.ports.kwok
        return Process(
            self.name,
            (
                str(spec.bin_dir / "kwok"),
                f"--kubeconfig={spec.kubeconfig}",
                f"--config={REPO / 'deploy' / 'kwok' / 'stages.yaml'}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.0.0.1/16",
                "--node-ip=10.0.0.1",
                f"--node-lease-duration-seconds={nodes.lease_seconds(spec.shape)}",
                f"--server-address=127.0.0.1:{port}",
            ),
            health=lambda: http_ok(f"http://127.0.0.1:{port}/healthz"),
            ports=(port,),
        )

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        if spec.shape:
            nodes.create(client, spec.shape, log)
