"""`gangctl simulate` decides as the cluster does: the same gangs, replayed by the simulator and
submitted to the local cluster through Kueue and `gangplugin serve`, are admitted in the same
order into the same UltraServers, and the same ones wait.

Gangs arrive one after another (each decided before the next is submitted, so the order is the
trace's) and never finish (kwok keeps training pods Running); their sizes fragment the GB200
UltraServers so that best fit, not the first empty domain, decides where each one goes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gangplugin.core.policy import GangPolicy
from gangplugin.core.simulate import Job, Settings, replay
from gangplugin.kube import records
from gangplugin.kube.client import JOBS, NODES, PODS
from tests.e2e.conftest import E2ECluster
from tests.e2e.kube import GB200, gpu_job, unique, wait_for, workload_of
from tests.e2e.test_admission import (
    US,
    check_of,
    gang_queue,  # noqa: F401 (a fixture the tests here use)
)

SIZES = (8, 4, 12, 6, 16, 2, 10, 5, 3, 14)  # 80 pods of 4 GPUs for 72 GB200 nodes: some wait


def test_simulator_admits_like_the_cluster(
    cluster: E2ECluster,
    namespace: str,
    gang_queue: Any,  # noqa: F811
) -> None:
    client = cluster.client
    gb200 = [
        n
        for n in client.list(NODES)["items"]
        if n["metadata"]["labels"].get("node.kubernetes.io/instance-type") == GB200
    ]
    names = {n["metadata"]["name"] for n in gb200}

    def idle() -> bool | None:
        busy = [p for p in client.list(PODS)["items"] if (p.get("spec") or {}).get("nodeName") in names]
        return not busy or None

    wait_for(idle, 120, "no pod left on the GB200 nodes by earlier tests")
    nodes = [
        dataclasses.replace(n, ready=True) for n in records.nodes_from_k8s({"kind": "List", "items": gb200})
    ]
    jobs = [Job(f"g{i}", float(i), size, 4, 1e9, required_topology=US) for i, size in enumerate(SIZES)]
    simulated = replay(nodes, jobs, "gangplugin", Settings(policy=GangPolicy()))
    # admitted on arrival, and where; a gang that waits (for capacity that never frees here): None
    expected = {o.key: (o.domains[0] if o.wait == 0 else None) for o in simulated.outcomes}
    assert None in expected.values() and len({d for d in expected.values() if d}) > 1  # a real test

    queue = gang_queue(gpu_quota=4 * sum(SIZES))
    seen: dict[str, str | None] = {}
    for job in jobs:
        name = unique(job.key)
        manifest = gpu_job(
            name,
            namespace,
            queue,
            job.pods,
            4,
            metadata={"annotations": {"gangplugin.io/required-topology": US}},
        )
        client.create(JOBS, manifest)

        def decided(name: str = name) -> dict[str, Any] | None:
            check = check_of(workload_of(client, namespace, name) or {})
            if check.get("state") == "Ready" or "does not fit" in str(check.get("message", "")):
                return check
            return None

        check = wait_for(decided, 90, f"the check's decision on {job.key} ({job.pods} pods)")
        seen[job.key] = check["podSetUpdates"][0]["nodeSelector"][US] if check["state"] == "Ready" else None
    assert seen == expected
