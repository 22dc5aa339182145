"""The e2e fixtures: the session cluster (tests/support/cluster.py), the job controllers, a
namespace and gang queues per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gangplugin.kube.client import NAMESPACES, PODS, ApiError, Client
from gangplugin.localcluster.cluster import ClusterError
from gangplugin.localcluster.manifests import CRDS
from tests.support.cluster import E2ECluster, e2e_local_cluster, started
from tests.support.kube import gang_queues, wait_for


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


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
    wait_for(lambda: _takes_pods(cluster.client, name), 60, f"namespace {name} to take pods")
    yield name
    cluster.client.delete(NAMESPACES, name)


def _takes_pods(client: Client, namespace: str) -> bool:
    """Whether a pod created there now would pass admission: its default ServiceAccount made, and
    Kueue's pod webhook, which reads namespaces from its own cache, aware of it (on a loaded machine
    it answered "Namespace not found" to the test's first pods)."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "namespace-probe", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "probe"}]},
    }
    try:
        client.request("POST", PODS.path(namespace), body=probe, params={"dryRun": "All"})
    except ApiError:
        return False
    return True


@pytest.fixture
def gang_queue(cluster: E2ECluster, namespace: str) -> Iterator[Any]:
    """Make `queue(**policy_spec)` -> LocalQueue name; deletes what it made afterwards."""
    with gang_queues(cluster.client, namespace) as make:
        yield make
