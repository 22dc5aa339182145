"""etcd: the cluster's store, one member, its data in `<state>/etcd` (deleted by `down`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gangplugin.localcluster.components.base import CONTROL_PLANE_NICE, Component
from gangplugin.localcluster.probes import http_ok
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process


def data_dir(spec: ClusterSpec) -> Path:
    return spec.state_dir / "etcd"


@dataclass(frozen=True)
class Etcd(Component):
    name = "etcd"

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        return {"etcd": spec.ports.etcd, "etcd peer": spec.ports.etcd_peer}

    def process(self, spec: ClusterSpec) -> Process:
        client, peer = f"http://127.0.0.1:{spec.ports.etcd}", f"http://127.0.0.1:{spec.ports.etcd_peer}"
        return Process(
            self.name,
            (
                str(spec.bin_dir / "etcd"),
                "--name=local",
                f"--data-dir={data_dir(spec)}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=local={peer}",
                "--unsafe-no-fsync=true",  # a throwaway test cluster: durability is not worth the latency
                "--quota-backend-bytes=4294967296",
            ),
            health=lambda: http_ok(f"{client}/health"),
            ports=tuple(self.listens(spec).values()),
            nice=CONTROL_PLANE_NICE,
        )
