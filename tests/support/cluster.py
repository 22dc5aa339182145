"""The e2e session's cluster: the one KUBECONFIG names, or a local cluster of the e2e port range.

A cluster that cannot be started fails the session with the reason; e2e tests never skip.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gangplugin.kube.client import Client
from gangplugin.localcluster.cluster import KUEUE_VERSION_ENV, REPO, ClusterError, LocalCluster, Ports
from gangplugin.localcluster.upstream import kueue_versions


@dataclass(frozen=True)
class E2ECluster:
    client: Client
    kubeconfig: Path
    local: bool


def e2e_port_base() -> int:
    return int(os.environ.get("GANGPLUGIN_E2E_PORT_BASE", "23000"))


def e2e_kueue_version() -> str:
    """The Kueue every local cluster of the session runs: GANGPLUGIN_KUEUE_VERSION, else the
    newest supported, which the full suite runs on (`make test` then runs the tests marked
    `compat` on the oldest, in a session of its own)."""
    return os.environ.get(KUEUE_VERSION_ENV) or kueue_versions()[-1]


def e2e_local_cluster() -> LocalCluster:
    """A cluster of its own (other ports, other state) so tests never touch the one `make up` runs;
    GANGPLUGIN_E2E_PORT_BASE moves it, e.g. to run two suites side by side."""
    base = e2e_port_base()
    return LocalCluster(
        state_dir=REPO / ".local" / f"e2e-cluster-{base}",
        ports=Ports(base=base),
        kueue_version=e2e_kueue_version(),
    )


def local_of(cluster: E2ECluster) -> LocalCluster:
    """The session's local cluster, for the tests that start and kill its processes."""
    assert cluster.local, "these tests start and kill gangplugin processes: KUBECONFIG must be unset"
    return e2e_local_cluster()


@contextlib.contextmanager
def started(local: LocalCluster) -> Iterator[E2ECluster]:
    """The cluster KUBECONFIG names, else `local`, started here (and stopped afterwards if it
    was started here); one that cannot be started fails the tests with the reason."""
    given = os.environ.get("KUBECONFIG")
    if given:
        client = Client.from_kubeconfig(given)
        yield E2ECluster(client, Path(given), local=False)
        client.close()
        return
    try:
        up = local.up()
    except ClusterError as err:
        pytest.fail(f"the local e2e cluster could not be started: {err}", pytrace=False)
    client = Client.from_kubeconfig(local.kubeconfig)
    try:
        yield E2ECluster(client, local.kubeconfig, local=True)
    finally:
        client.close()
        if up:
            local.down(quiet=True)
