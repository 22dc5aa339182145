"""bindMode PodGroup: Ungate's pins, and a native Kubernetes PodGroup as kube-scheduler's own
bind barrier (GangScheduling, feature gate GenericWorkload).

The session's cluster keeps the gate off, as Kubernetes 1.37 does by default; these tests start
a local cluster of their own with it on (own state directory, ports 50 above the session's), or
use the cluster KUBECONFIG names, which must serve PodGroups.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gangplugin.core.names import GANG_LABEL
from gangplugin.kube.client import Client
from gangplugin.kube.discovery import serves
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import PODGROUPS
from gangplugin.localcluster.cluster import REPO, LocalCluster, Ports
from tests.support.cluster import E2ECluster, e2e_kueue_version, e2e_port_base, started
from tests.support.gangs import assert_whole_in_domain, running_gang, submit, submit_one_per_zone, workload
from tests.support.kube import condition, job_pods, wait_for, wait_until

# Clear of every port of a cluster at the session's base (Ports: offsets 247..945).
PORT_OFFSET = 50


@pytest.fixture(scope="module")
def cluster() -> Iterator[E2ECluster]:
    """Overrides the session's cluster for this module (and so `namespace`, `gang_queue`)."""
    base = e2e_port_base() + PORT_OFFSET
    local = LocalCluster(
        state_dir=REPO / ".local" / f"e2e-generic-workload-{base}",
        ports=Ports(base),
        generic_workload=True,
        kueue_version=e2e_kueue_version(),
    )
    with started(local) as c:
        if not serves(c.client, PODGROUPS):
            pytest.fail(
                "the cluster serves no scheduling.k8s.io/v1beta1 podgroups: start it with the "
                "GenericWorkload feature gate on (GANGPLUGIN_GENERIC_WORKLOAD=1 for the local cluster)",
                pytrace=False,
            )
        yield c


def _scheduled_at(pod: dict[str, Any]) -> float:
    cond = condition(pod, "PodScheduled")
    assert cond is not None and cond["status"] == "True", pod["status"]
    return time.mktime(time.strptime(cond["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ"))


@pytest.mark.compat
def test_a_podgroup_gang_runs_whole_in_its_ultraserver_behind_its_podgroup(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    client = cluster.client
    job = submit(client, namespace, gang_queue(bindMode="PodGroup"), 8)
    pods = running_gang(client, namespace, job, 8)
    assert_whole_in_domain(client, namespace, job, "PodGroup", pods)  # pinned, in one UltraServer
    wl = workload(client, namespace, job)
    gang = wl["metadata"]["name"]
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {gang}
    pg = client.get(PODGROUPS, gang, namespace)
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 8}}
    (owner,) = pg["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Workload", wl["metadata"]["uid"])
    assert pg["metadata"]["labels"] == {GANG_LABEL: gang}
    assert is_true(pg, "PodGroupInitiallyScheduled"), pg.get("status")
    # GangScheduling held every pod at Permit until all 8 had a node: they were bound together.
    times = [_scheduled_at(p) for p in pods]
    assert max(times) - min(times) <= 2, times


def _bound(client: Client, namespace: str, job: str) -> int:
    return sum(1 for p in job_pods(client, namespace, job) if p["spec"].get("nodeName"))


def test_a_podgroup_gang_that_cannot_all_be_bound_binds_none(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    """Where Ungate binds one of these two pods (test_bind_modes: 1/2 bound until the gang is
    requeued), kube-scheduler's own barrier binds neither."""
    client = cluster.client
    job = submit_one_per_zone(client, namespace, gang_queue(bindMode="PodGroup"), 2)
    gang = workload(client, namespace, job)["metadata"]["name"]
    wait_for(lambda: client.get_or_none(PODGROUPS, gang, namespace), 60, f"PodGroup {gang}")

    # Released from the gate, the gang is tried whole by kube-scheduler, which says why not: on
    # one member that the group's minCount cannot be met, on the other that no node is left for
    # it. Both were tried (PodScheduled False), and neither was bound.
    def messages() -> dict[str, str]:
        return {
            p["metadata"]["name"]: (condition(p, "PodScheduled") or {}).get("message", "")
            for p in job_pods(client, namespace, job)
        }

    def refused() -> bool:
        found = messages()
        return (
            len(found) == 2
            and all(found.values())
            and any("minCount (2) cannot be satisfied" in m for m in found.values())
        )

    wait_until(refused, 60, lambda: f"kube-scheduler refusing both pods of {job}: {messages()}")
    assert _bound(client, namespace, job) == 0
