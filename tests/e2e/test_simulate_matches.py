"""`gangctl simulate` decides as the cluster does: the same gangs, replayed by the simulator and
submitted to the local cluster through Kueue and `gangplugin serve`, are admitted in the same
order into the same UltraServers, and the same ones wait; a gang of higher priority preempts the
same gangs there, and the victims wait while it runs.

Gangs arrive one after another (each decided before the next is submitted, so the order is the
trace's) and never finish (kwok keeps training pods Running); their sizes fragment the
UltraServers so that best fit, not the first empty domain, decides where each one goes. The test
takes the GB200 UltraServers no earlier test left a pod on, labels their nodes, and the gangs
select that label, so both sides start from the same empty domains.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from typing import Any

from gangplugin.core.policy import GangPolicy
from gangplugin.core.preemption import QueuePreemption
from gangplugin.core.simulate import Job, Settings, replay
from gangplugin.kube import records
from gangplugin.kube.client import JOBS, NODES, PODS, ApiError
from tests.support.cluster import E2ECluster
from tests.support.gangs import US, check_of, clear, domain_of, running_gang
from tests.support.kube import unique, wait_for, workload_of
from tests.support.objects import GB200, gpu_job
from tests.support.preemption import LOWER, Governance, preempted

SIZES = (8, 4, 12, 6, 16, 2, 10, 5, 3, 14)  # cycled until they over-subscribe the UltraServers used
USED = 3  # UltraServers of 18 nodes the test takes (more than one, so where matters)
LABEL = "e2e.gangplugin.io/simulate"


def idle_ultraservers(client: Any) -> dict[str, list[dict[str, Any]]]:
    """The GB200 UltraServers without any pod bound to their nodes, by id."""
    nodes = [
        n
        for n in client.list(NODES)["items"]
        if n["metadata"]["labels"].get("node.kubernetes.io/instance-type") == GB200
    ]
    busy = {(p.get("spec") or {}).get("nodeName") for p in client.list(PODS)["items"]}
    by_us: dict[str, list[dict[str, Any]]] = {}
    for n in nodes:
        by_us.setdefault(n["metadata"]["labels"][US], []).append(n)
    return {us: ns for us, ns in by_us.items() if not busy & {n["metadata"]["name"] for n in ns}}


def take_idle(client: Any, count: int, namespace: str) -> list[dict[str, Any]]:
    """`count` GB200 UltraServers no pod runs on, their nodes labelled for the test's gangs."""

    def enough() -> dict[str, list[dict[str, Any]]] | None:
        found = idle_ultraservers(client)
        return found if len(found) >= count else None

    idle = wait_for(enough, 180, f"{count} GB200 UltraServers without pods")
    chosen = sorted(idle)[:count]
    nodes = [n for us in chosen for n in idle[us]]
    for n in nodes:
        client.patch(NODES, n["metadata"]["name"], {"metadata": {"labels": {LABEL: namespace}}})
    return nodes


def submit_on_taken(
    client: Any, namespace: str, queue: str, job: Job, priority_class: str | None = None
) -> str:
    """The trace's job as a Job of 4-GPU pods requiring one UltraServer, on the taken nodes."""
    name = unique(job.key)
    manifest = gpu_job(
        name, namespace, queue, job.pods, 4, metadata={"annotations": {"gangplugin.io/required-topology": US}}
    )
    if priority_class is not None:
        manifest["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority_class
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {LABEL: namespace}
    client.create(JOBS, manifest)
    return name


def give_back(client: Any, nodes: list[dict[str, Any]]) -> None:
    for n in nodes:
        with contextlib.suppress(ApiError):
            client.patch(NODES, n["metadata"]["name"], {"metadata": {"labels": {LABEL: None}}})


def test_simulator_admits_like_the_cluster(
    cluster: E2ECluster,
    namespace: str,
    gang_queue: Any,
) -> None:
    client = cluster.client
    gb200 = take_idle(client, USED, namespace)
    try:
        size_of = len(gb200)
        # the sizes in turn until they over-subscribe the UltraServers, and two more: some wait
        total, sizes = 0, []
        for size in itertools.cycle(SIZES):
            sizes.append(size)
            total += size
            if total > size_of + SIZES[0] + SIZES[1]:
                break
        nodes = [
            dataclasses.replace(n, ready=True)
            for n in records.nodes_from_k8s({"kind": "List", "items": gb200})
        ]
        jobs = [Job(f"g{i}", float(i), size, 4, 1e9, required_topology=US) for i, size in enumerate(sizes)]
        simulated = replay(nodes, jobs, "gangplugin", Settings(policy=GangPolicy()))
        # admitted on arrival, and where; a gang that waits (for capacity that never frees): None
        expected = {o.key: (o.domains[0] if o.wait == 0 else None) for o in simulated.outcomes}
        assert None in expected.values() and len({d for d in expected.values() if d}) > 1  # a real test

        queue = gang_queue(gpu_quota=4 * sum(sizes))
        seen: dict[str, str | None] = {}
        for job in jobs:
            name = submit_on_taken(client, namespace, queue, job)

            def decided(name: str = name) -> dict[str, Any] | None:
                check = check_of(workload_of(client, namespace, name) or {})
                if check.get("state") == "Ready" or "does not fit" in str(check.get("message", "")):
                    return check
                return None

            check = wait_for(decided, 90, f"the check's decision on {job.key} ({job.pods} pods)")
            ready = check["state"] == "Ready"
            seen[job.key] = check["podSetUpdates"][0]["nodeSelector"][US] if ready else None
        assert seen == expected
    finally:
        give_back(client, gb200)


def test_simulator_preempts_like_the_cluster(cluster: E2ECluster, namespace: str) -> None:
    """Two UltraServers of 18 nodes, four low-priority gangs of 8 pods (best fit: two in each),
    then a high-priority gang of 16 pods that requires one UltraServer, in a ClusterQueue with
    `withinClusterQueue: LowerPriority`: the simulator and the cluster evict the same two gangs
    (the UltraServer started last) whole, and the new gang runs in that UltraServer while they
    wait, requeued."""
    client = cluster.client
    gb200 = take_idle(client, 2, namespace)
    gov = Governance(client, namespace)
    try:
        nodes = [
            dataclasses.replace(n, ready=True)
            for n in records.nodes_from_k8s({"kind": "List", "items": gb200})
        ]
        sizes = [8, 8, 8, 8, 16]
        priorities = [100, 100, 100, 100, 1000]
        jobs = [
            Job(f"g{i}", float(i), size, 4, 1e9, required_topology=US, priority=p)
            for i, (size, p) in enumerate(zip(sizes, priorities, strict=True))
        ]
        settings = Settings(
            policy=GangPolicy(), preemption=QueuePreemption(within_cluster_queue="LowerPriority")
        )
        simulated = {o.key: o for o in replay(nodes, jobs, "gangplugin", settings).outcomes}
        expected_victims = {k for k, o in simulated.items() if o.preempted}
        assert len(expected_victims) == 2 and simulated["g4"].wait == 0  # a real test
        assert len({simulated[k].domains for k in expected_victims}) == 1

        classes = {p: gov.priority(p) for p in set(priorities)}
        queue = gov.queue(2000, LOWER)  # more quota than the fleet: Kueue itself preempts nothing
        names: dict[str, str] = {}
        for job in jobs:
            name = submit_on_taken(client, namespace, queue, job, classes[job.priority])
            names[job.key] = name
            running_gang(client, namespace, name, job.pods)
        seen = {k for k in names if k != "g4" and names[k] in preempted(client, namespace, [names[k]])}
        assert seen == expected_victims
        assert domain_of(client, namespace, names["g4"]) == simulated["g4"].domains[0]
        g4_end = simulated["g4"].end
        assert g4_end is not None
        for k in expected_victims:  # requeued, they wait while it runs, then run again
            assert (simulated[k].end or 0) > g4_end
            check = check_of(workload_of(client, namespace, names[k]) or {})
            assert check.get("state") != "Ready", check
    finally:
        clear(client, namespace)
        gov.close()
        give_back(client, gb200)
