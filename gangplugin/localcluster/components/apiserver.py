"""kube-apiserver: TLS with the cluster CA, RBAC, service-account tokens signed by the cluster."""

from __future__ import annotations

from dataclasses import dataclass

from gangplugin.localcluster.components.base import CONTROL_PLANE_NICE, Component
from gangplugin.localcluster.probes import https_ok
from gangplugin.localcluster.realnodes.pool import SERVICE_CIDR, Network
from gangplugin.localcluster.spec import GENERIC_WORKLOAD_API, GENERIC_WORKLOAD_GATE, ClusterSpec
from gangplugin.localcluster.supervisor import Process


@dataclass(frozen=True)
class KubeApiserver(Component):
    name = "kube-apiserver"

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        return {"kube-apiserver": spec.ports.apiserver}

    def process(self, spec: ClusterSpec) -> Process:
        pki, port = spec.pki_dir, spec.ports.apiserver
        # Real nodes' pods reach it through the `kubernetes` Service, whose endpoint is the
        # advertised address: the host's on the pool's bridge (a loopback one is refused).
        address = (
            ("--bind-address=0.0.0.0", f"--advertise-address={Network(spec.ports.base).gateway}")
            if "real-nodes" in spec.components
            else ("--bind-address=127.0.0.1",)
        )
        return Process(
            self.name,
            (
                str(spec.bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{spec.ports.etcd}",
                *address,
                f"--secure-port={port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                # A real node's name resolves nowhere: its kubelet by its address.
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                f"--cert-dir={spec.state_dir / 'apiserver-certs'}",
                *spec.generic_workload_flags(GENERIC_WORKLOAD_GATE, GENERIC_WORKLOAD_API),
            ),
            health=lambda: https_ok(
                f"https://127.0.0.1:{port}/readyz",
                pki / "ca.crt",
                client_cert=(pki / "admin.crt", pki / "admin.key"),
            ),
            startup_timeout=120.0,
            ports=(port,),
            nice=CONTROL_PLANE_NICE,
        )
