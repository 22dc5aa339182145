"""The e2e session cluster: the one KUBECONFIG names, or the local cluster started here.

A cluster that cannot be started fails the session with the reason; e2e tests never skip.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gangplugin.kube.client import NAMESPACES, Client
from gangplugin.localcluster.cluster import KUEUE_VERSION_ENV, REPO, ClusterError, LocalCluster, Ports
from gangplugin.localcluster.manifests import CRDS
from gangplugin.localcluster.upstream import kueue_versions
from tests.e2e.kube import gang_queues


@dataclass(frozen=True)
class E2ECluster:
    client: Client
    kubeconfig: Path
    local: bool


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


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


@pytest.fixture(scope="session")
def cluster() -> Iterator[E2ECluster]:
    with started(e2e_local_cluster()) as c:
        yield c


# The job controllers the tests of each kind need (optional components of the local cluster).
JOB_CONTROLLERS = ("training-operator", "trainer", "lws", "kuberay")
JOB_CRDS = (
    "pytorchjobs.kubeflow.org",
    "trainjobs.trainer.kubeflow.org",
    "leaderworkersets.leaderworkerset.x-k8s.io",
    "rayjobs.ray.io",
)


@pytest.fixture(scope="session")
def job_controllers(cluster: E2ECluster) -> E2ECluster:
    """The session cluster with the job controllers: started on the local cluster when first
    asked for (Kueue restarted with their integrations); a given cluster must run them."""
    if cluster.local:
        try:
            e2e_local_cluster().add(*JOB_CONTROLLERS)
        except ClusterError as err:
            pytest.fail(f"the job controllers could not be started: {err}", pytrace=False)
        return cluster
    missing = [c for c in JOB_CRDS if cluster.client.get_or_none(CRDS, c) is None]
    if missing:
        pytest.fail(
            f"the cluster KUBECONFIG names serves no {', '.join(missing)}: install those controllers",
            pytrace=False,
        )
    return cluster


@pytest.fixture
def namespace(cluster: E2ECluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    cluster.client.delete(NAMESPACES, name)


@pytest.fixture
def gang_queue(cluster: E2ECluster, namespace: str) -> Iterator[Any]:
    """Make `queue(**policy_spec)` -> LocalQueue name; deletes what it made afterwards."""
    with gang_queues(cluster.client, namespace) as make:
        yield make
