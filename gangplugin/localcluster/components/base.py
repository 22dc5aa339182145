"""What a component of the local cluster is: a program, its ports, and what it needs in the API."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gangplugin.kube.client import Client
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process

# etcd and kube-apiserver run at this niceness: every controller's request, the leader Lease's
# renewals among them, crosses them, and in a real cluster they have nodes of their own; here
# they get the CPU they need before a Go build or busy loops beside the cluster do. (Without
# root, `nice` says it cannot and runs them as they are.)
CONTROL_PLANE_NICE = -10


@dataclass(frozen=True)
class Component:
    """One program of the local cluster. Once kube-apiserver serves, `up` runs the `install` of
    every chosen component at once; then, in the registry's order, for each, it waits for its
    install, starts its `process`, waits for its health and calls `started`. etcd and
    kube-apiserver come first and get no `install` or `started` (no API yet). Fields of a
    subclass are options of one start (kube-scheduler's extender, a gangplugin replica):
    `LocalCluster.restart` sets them."""

    name: ClassVar[str]
    # Components that must run too for this one to work.
    requires: ClassVar[tuple[str, ...]] = ()
    # Started only when asked for: LocalCluster(components=...) or GANGPLUGIN_WITH.
    optional: ClassVar[bool] = False
    # The group of hack/build-upstream.sh that builds its binaries.
    build_group: ClassVar[str] = "cluster"
    # Kueue integrations for the workloads this controller runs (Kueue turns them on).
    kueue_frameworks: ClassVar[tuple[str, ...]] = ()
    # Kueue feature gates this component's use of Kueue needs, as `Name=true|false`.
    kueue_feature_gates: ClassVar[tuple[str, ...]] = ()

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        """The programs it runs, checked before `up` starts anything."""
        return (spec.bin_dir / self.name,)

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        """Its ports by name, checked free before `up` starts anything."""
        return {}

    def install(self, spec: ClusterSpec, client: Client) -> None:
        """Objects it needs before it starts (CRDs, webhook configurations, namespaces), written
        while other components install and start: nothing here may need another controller."""

    def process(self, spec: ClusterSpec) -> Process | None:
        """Its command line and health check (None: nothing to run); may write its config files."""
        raise NotImplementedError(f"{type(self).__name__} runs no process")

    def processes(self, spec: ClusterSpec) -> tuple[Process, ...]:
        """Every process it runs, started in this order, each waited for until healthy: `process`'s
        one by default; a component that runs several (gangplugin: one per replica; the real
        nodes: one per node) gives each a name of its own."""
        proc = self.process(spec)
        return (proc,) if proc is not None else ()

    def process_named(self, spec: ClusterSpec, name: str) -> Process | None:
        """Its process called `name` as `processes` starts it, for a restart of that one alone
        (None: no process of its has that name)."""
        return self.process(spec) if name == self.name else None

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        """What follows once it is healthy: waiting for its webhooks, objects that need the
        components before it running (the local queues need Kueue's webhooks)."""

    def stopped(self, spec: ClusterSpec) -> None:
        """What `down` removes once every process is stopped: state it made outside them (the
        real nodes' containers, bridge and cgroups)."""


def kube_serving_flags(spec: ClusterSpec, port: int, cert_dir: str) -> tuple[str, ...]:
    """kube-controller-manager's and kube-scheduler's own HTTPS endpoint (/healthz, /metrics) on
    127.0.0.1:`port`, with a self-signed certificate in `<state>/<cert_dir>`; callers are
    authenticated and authorized through the API server."""
    return (
        f"--authentication-kubeconfig={spec.kubeconfig}",
        f"--authorization-kubeconfig={spec.kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={spec.state_dir / cert_dir}",
        "--profiling=false",
    )
