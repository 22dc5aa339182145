"""What the job controllers' components share: where an upstream's manifests are in the cache,
the install and ports of one whose CRDs and webhooks come from there (`UpstreamController`),
a controller-runtime manager run from a Configuration file, a controller-runtime webhook
server's certificate directory for programs that cannot be told one, and the Topology of our
level order that the peer schedulers read (KAI's and Kueue's kinds have the same schema).

controller-runtime serves webhooks from `$TMPDIR/k8s-webhook-server/serving-certs` unless told
otherwise; the training-operator and Trainer take no certificate directory, so each runs with a
TMPDIR of its own under the state directory holding the cluster's serving pair there: clusters
side by side never share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from gangplugin.core.topology import DEFAULT_LEVELS
from gangplugin.kube.client import Client
from gangplugin.localcluster import credentials, manifests
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.probes import http_ok
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process
from gangplugin.localcluster.upstream import versions

# The Topology object the peer schedulers get (KAI's, Kueue TAS's), by name.
TOPOLOGY = "hyperpod"


def level_topology(api_version: str) -> dict[str, Any]:
    """A `Topology` named TOPOLOGY of our level order (zone, the network layers, the UltraServer,
    the hostname), in the API group `api_version` of the scheduler that reads it."""
    return {
        "apiVersion": api_version,
        "kind": "Topology",
        "metadata": {"name": TOPOLOGY},
        "spec": {"levels": [{"nodeLabel": label} for label in DEFAULT_LEVELS]},
    }


def peer_version(key: str) -> str:
    """A peer scheduler's version, `key` in hack/versions.env (ClusterError when it has none)."""
    v = versions().get(key)
    if not v:
        raise ClusterError(f"hack/versions.env has no {key}; the peers' versions come with it")
    return v


def manifests_dir(spec: ClusterSpec, name: str, version_key: str) -> Path:
    """`<cache>/<name>-<version>/`, where hack/build-upstream.sh copies an upstream's CRDs and
    webhook configurations from its module."""
    return spec.cache / f"{name}-{versions()[version_key]}"


@dataclass(frozen=True)
class UpstreamController(Component):
    """An optional job controller (built by hack/build-upstream.sh extras) installed from its own
    CRD and webhook manifests (`manifests_dir` at the version `version_key` of upstream.env):
    the CRDs matching `crd_files`, its webhooks (the paths `keep` accepts, its pod webhooks
    scoped by `pod_selector`) served on port `webhook_offset`, its health probe on
    `health_offset`; `what` names it in install errors and its webhook configurations."""

    optional: ClassVar[bool] = True
    build_group: ClassVar[str] = "extras"
    version_key: ClassVar[str]
    crd_files: ClassVar[str]
    what: ClassVar[str]
    webhook_offset: ClassVar[int]
    health_offset: ClassVar[int]
    pod_selector: ClassVar[dict[str, Any]] = {}

    def keep(self, path: str) -> bool:
        return True

    def manifests(self, spec: ClusterSpec) -> Path:
        return manifests_dir(spec, self.name, self.version_key)

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        p = spec.ports
        return {
            f"{self.name} webhook": p.at(self.webhook_offset),
            f"{self.name} health": p.at(self.health_offset),
        }

    def install(self, spec: ClusterSpec, client: Client) -> None:
        manifests.install_upstream(
            client,
            spec,
            self.manifests(spec),
            self.crd_files,
            self.what,
            spec.ports.at(self.webhook_offset),
            keep=self.keep,
            pod_selector=self.pod_selector,
        )

    def manager(
        self,
        spec: ClusterSpec,
        *,
        api_version: str,
        cert_management: str,
        webhook: dict[str, Any],
        env: dict[str, str] | None = None,
    ) -> Process:
        """Its controller-runtime manager (`configured_manager`): its webhook server on 127.0.0.1
        at its webhook port (with `webhook`'s other settings), metrics off (nothing here reads
        them), ready on its health port."""
        ports = self.listens(spec)
        return configured_manager(
            spec,
            self.name,
            self.binaries(spec)[0],
            api_version=api_version,
            cert_management=cert_management,
            webhook={"port": ports[f"{self.name} webhook"], "host": "127.0.0.1", **webhook},
            metrics={"bindAddress": "0"},
            health=ports[f"{self.name} health"],
            ports=tuple(ports.values()),
            env=env,
        )


def serving_tmpdir(spec: ClusterSpec, name: str) -> Path:
    """A TMPDIR for component `name` whose controller-runtime webhook server finds the cluster's
    serving certificate at its default path."""
    tmp = spec.state_dir / f"{name}-tmp"
    credentials.copy_serving_pair(spec, tmp / "k8s-webhook-server" / "serving-certs")
    return tmp


def configured_manager(
    spec: ClusterSpec,
    name: str,
    binary: Path,
    *,
    api_version: str,
    cert_management: str,
    webhook: dict[str, Any],
    metrics: dict[str, Any],
    health: int,
    ports: tuple[int, ...],
    env: dict[str, str] | None = None,
) -> Process:
    """Component `name`'s controller-runtime manager, run with a Configuration file of its own
    (`<state>/<name>-config.yaml`): leader election and its own certificate management (the
    `cert_management` field) off, ready once `/readyz` answers on port `health`."""
    config = spec.state_dir / f"{name}-config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": api_version,
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                cert_management: {"enable": False},
                "webhook": webhook,
                "metrics": metrics,
                "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
            },
            sort_keys=False,
        )
    )
    return Process(
        name,
        (str(binary), f"--config={config}", f"--kubeconfig={spec.kubeconfig}"),
        env={"KUBECONFIG": str(spec.kubeconfig), **(env or {})},
        health=lambda: http_ok(f"http://127.0.0.1:{health}/readyz"),
        ports=ports,
    )
