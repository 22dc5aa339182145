"""The scheduler extender on the real local cluster: kube-scheduler calls it for GPU pods.

Plain pods (no Kueue) carry the gang label and size, as a user without Kueue writes them.
Each test keeps to its own UltraServer (or none), so tests do not compete for nodes.
"""

from __future__ import annotations

from typing import Any

from gangplugin.core.names import GANG_LABEL
from gangplugin.kube.client import EVENTS, NODES, PODS, Client
from tests.support.cluster import E2ECluster, e2e_local_cluster
from tests.support.kube import unique, wait_for, wait_until
from tests.support.objects import gpu_pod
from tests.support.scrape import barrier_waiting

US_LABEL = "topology.k8s.aws/ultraserver-id"


def create_gang(client: Client, namespace: str, gang: str, size: int, names: range, **kw: Any) -> None:
    for i in names:
        client.create(PODS, gpu_pod(namespace, f"{gang}-{i}", gang=gang, size=size, **kw))


def bound(client: Client, namespace: str, gang: str) -> dict[str, str]:
    pods = client.list(PODS, namespace, label_selector=f"{GANG_LABEL}={gang}")["items"]
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def ultraserver_of(client: Client) -> dict[str, str | None]:
    return {n["metadata"]["name"]: n["metadata"]["labels"].get(US_LABEL) for n in client.list(NODES)["items"]}


def scheduling_messages(client: Client, namespace: str) -> list[str]:
    return [
        e.get("message", "")
        for e in client.list(EVENTS, namespace)["items"]
        if e.get("reason") == "FailedScheduling"
    ]


def refused_members(client: Client, namespace: str, gang: str) -> set[str]:
    """Members of `gang` the scheduler tried and could not place (a FailedScheduling Event each)."""
    return {
        e["involvedObject"]["name"]
        for e in client.list(EVENTS, namespace)["items"]
        if e.get("reason") == "FailedScheduling" and e["involvedObject"]["name"].startswith(f"{gang}-")
    }


def wait_all_refused(client: Client, namespace: str, gang: str, size: int) -> None:
    """Until every member of `gang` has been tried and refused, and none waits at the bind
    barrier: each had its chance, so a gang still unbound now was kept whole by choice."""
    local = e2e_local_cluster()

    def settled() -> bool:
        return (
            len(refused_members(client, namespace, gang)) == size
            and barrier_waiting(local, namespace, gang) == 0
        )

    wait_until(
        settled,
        120,
        lambda: (
            f"every member of {gang} refused: {sorted(refused_members(client, namespace, gang))} "
            f"refused, {barrier_waiting(local, namespace, gang)} at the barrier, "
            f"bound {bound(client, namespace, gang)}"
        ),
    )


def test_sixteen_pod_gang_lands_whole_in_one_ultraserver(cluster: E2ECluster, namespace: str) -> None:
    client = cluster.client
    gang = unique("g16")
    create_gang(client, namespace, gang, 16, range(16), required=US_LABEL)
    nodes = wait_for(
        lambda: (b := bound(client, namespace, gang)) and len(b) == 16 and b, 120, "16 pods bound"
    )
    us = ultraserver_of(client)
    assert len({us[n] for n in nodes.values()}) == 1, nodes
    assert None not in {us[n] for n in nodes.values()}
    assert len(set(nodes.values())) == 16  # 4 GPUs a node, 4 a pod


def test_twenty_pod_gang_does_not_fit_an_ultraserver_and_says_why(
    cluster: E2ECluster, namespace: str
) -> None:
    client = cluster.client
    gang = unique("g20")
    create_gang(client, namespace, gang, 20, range(20), required=US_LABEL)
    messages = wait_for(
        lambda: [m for m in scheduling_messages(client, namespace) if "cannot be placed whole" in m],
        90,
        "FailedScheduling events from the extender",
    )
    assert US_LABEL in messages[0] and "room for 18" in messages[0], messages[0]
    wait_all_refused(client, namespace, gang, 20)
    assert bound(client, namespace, gang) == {}


def test_two_gangs_over_capacity_one_runs_whole_the_other_waits_whole(
    cluster: E2ECluster, namespace: str
) -> None:
    client = cluster.client
    a, b = unique("ga"), unique("gb")
    only_us4 = {US_LABEL: "gb200-us-4"}  # 18 nodes; the two gangs need 20
    for i in range(10):  # interleaved, as the scheduler's queue sees them
        client.create(PODS, gpu_pod(namespace, f"{a}-{i}", gang=a, size=10, node_selector=only_us4))
        client.create(PODS, gpu_pod(namespace, f"{b}-{i}", gang=b, size=10, node_selector=only_us4))

    def one_whole() -> bool:
        counts = sorted(len(bound(client, namespace, g)) for g in (a, b))
        assert counts[0] == 0 or counts == [10, 10], f"partial gang: {counts}"
        return counts == [0, 10]

    wait_for(one_whole, 120, "one gang bound whole")
    waiting = a if not bound(client, namespace, a) else b
    wait_all_refused(client, namespace, waiting, 10)
    assert one_whole()
    assert any(waiting in m or "cannot be placed whole" in m for m in scheduling_messages(client, namespace))


def test_extender_killed_while_gang_waits_at_the_barrier(cluster: E2ECluster, namespace: str) -> None:
    assert cluster.local, "this test restarts gangplugin, which needs the local cluster (KUBECONFIG unset)"
    client = cluster.client
    gang = unique("gk")
    only_us3 = {US_LABEL: "gb200-us-3"}
    create_gang(client, namespace, gang, 12, range(11), node_selector=only_us3)
    local = e2e_local_cluster()

    def at_barrier() -> bool:
        return barrier_waiting(local, namespace, gang) == 11

    def state() -> str:
        waiting, done = barrier_waiting(local, namespace, gang), bound(client, namespace, gang)
        return f"11 of 12 members of {gang} at the barrier: {waiting} there, bound {done}"

    # 11 of 12 members reach the bind barrier and wait there; then the extender dies.
    wait_until(at_barrier, 120, state)
    assert bound(client, namespace, gang) == {}
    local.restart("gangplugin")
    # kube-scheduler retries the 11 at the new extender, whose barrier holds them again: none bound.
    wait_until(at_barrier, 120, state)
    assert bound(client, namespace, gang) == {}
    create_gang(client, namespace, gang, 12, range(11, 12), node_selector=only_us3)
    nodes = wait_for(
        lambda: (b := bound(client, namespace, gang)) and len(b) == 12 and b, 120, "the gang bound whole"
    )
    assert {ultraserver_of(client)[n] for n in nodes.values()} == {"gb200-us-3"}


def test_partially_bound_gang_is_completed_in_its_domain(cluster: E2ECluster, namespace: str) -> None:
    """A crash between Binding calls leaves a gang part bound; the rest joins it in its UltraServer."""
    client = cluster.client
    gang = unique("gp")
    # Three members bound by hand into gb200-us-2 (nobody schedules them), as a dead extender left them.
    create_gang(client, namespace, gang, 6, range(3), required=US_LABEL, scheduler="nobody")
    for i in range(3):
        client.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods/{gang}-{i}/binding",
            body={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": f"{gang}-{i}"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": f"gb200-us2-1{i + 5}"},
            },
        )
    create_gang(client, namespace, gang, 6, range(3, 6), required=US_LABEL)
    nodes = wait_for(lambda: (b := bound(client, namespace, gang)) and len(b) == 6 and b, 120, "6 pods bound")
    assert {ultraserver_of(client)[n] for n in nodes.values()} == {"gb200-us-2"}, nodes


def test_gpu_pod_without_gang_is_scheduled_normally(cluster: E2ECluster, namespace: str) -> None:
    client = cluster.client
    name = unique("solo")
    p5 = {"node.kubernetes.io/instance-type": "ml.p5.48xlarge"}
    client.create(PODS, gpu_pod(namespace, name, gpus=2, node_selector=p5))
    node = wait_for(lambda: client.get(PODS, name, namespace)["spec"].get("nodeName"), 60, "the pod bound")
    labels = client.get(NODES, node)["metadata"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == "ml.p5.48xlarge"
