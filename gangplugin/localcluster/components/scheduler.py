"""kube-scheduler with deploy/scheduler/local.yaml: gangplugin's extender over mutual TLS when
gangplugin runs in the cluster."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from gangplugin.localcluster.components.base import Component, kube_serving_flags
from gangplugin.localcluster.probes import https_ok
from gangplugin.localcluster.spec import GENERIC_WORKLOAD_GATE, ClusterSpec
from gangplugin.localcluster.supervisor import Process
from gangplugin.localcluster.upstream import REPO


def extender_tls_config(spec: ClusterSpec) -> dict[str, str]:
    """kube-scheduler's extender tlsConfig: the CA of the extender's serving certificate, and
    the client certificate the extender asks for (mutual TLS)."""
    client = spec.extender_clients_dir
    return {
        "caFile": str(spec.pki_dir / "ca.crt"),
        "certFile": str(client / "kube-scheduler.crt"),
        "keyFile": str(client / "kube-scheduler.key"),
    }


@dataclass(frozen=True)
class KubeScheduler(Component):
    name = "kube-scheduler"
    # False: no extender (a benchmark's baseline, or a scheduler that binds pinned pods alone).
    extender: bool = True

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        return {"kube-scheduler": spec.ports.scheduler}

    def process(self, spec: ClusterSpec) -> Process:
        port, config = spec.ports.scheduler, spec.state_dir / "scheduler-config.yaml"
        cfg = yaml.safe_load((REPO / "deploy" / "scheduler" / "local.yaml").read_text())
        cfg["clientConnection"]["kubeconfig"] = str(spec.kubeconfig)
        for ext in cfg["extenders"]:
            ext["urlPrefix"] = f"https://127.0.0.1:{spec.ports.gangplugin_extender}"
            ext["tlsConfig"] = extender_tls_config(spec)
        if not self.extender or "gangplugin" not in spec.components:
            del cfg["extenders"]
        config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return Process(
            self.name,
            (
                str(spec.bin_dir / "kube-scheduler"),
                f"--config={config}",
                *kube_serving_flags(spec, port, "scheduler-certs"),
                *spec.generic_workload_flags(GENERIC_WORKLOAD_GATE),
            ),
            health=lambda: https_ok(f"https://127.0.0.1:{port}/healthz", None),  # self-signed
            ports=(port,),
        )
