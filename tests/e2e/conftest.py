"""The e2e session cluster: the one KUBECONFIG names, or the local cluster started here.

A cluster that cannot be started fails the session with the reason; e2e tests never skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gangplugin.kube.client import NAMESPACES, Client
from gangplugin.localcluster.cluster import REPO, ClusterError, LocalCluster, Ports


@dataclass(frozen=True)
class E2ECluster:
    client: Client
    kubeconfig: Path
    local: bool


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def cluster() -> Iterator[E2ECluster]:
    given = os.environ.get("KUBECONFIG")
    if given:
        client = Client.from_kubeconfig(given)
        yield E2ECluster(client, Path(given), local=False)
        client.close()
        return
    # A cluster of its own (other ports, other state) so tests never touch the one `make up` runs.
    local = LocalCluster(state_dir=REPO / ".local" / "e2e-cluster", ports=Ports(base=23000))
    try:
        started = local.up()
    except ClusterError as err:
        pytest.fail(f"the local e2e cluster could not be started: {err}", pytrace=False)
    client = Client.from_kubeconfig(local.kubeconfig)
    try:
        yield E2ECluster(client, local.kubeconfig, local=True)
    finally:
        client.close()
        if started:
            local.down(quiet=True)


@pytest.fixture
def namespace(cluster: E2ECluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    cluster.client.delete(NAMESPACES, name)
