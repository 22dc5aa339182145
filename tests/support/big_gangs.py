"""A small cluster where a big gang waits beside running gangs that declare their ends (their
Job's activeDeadlineSeconds), for the reservation's explain and admission-pass tests."""

from __future__ import annotations

from typing import Any

from gangplugin.kube.client import JOBS, PODS, WORKLOADS
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES
from tests.support.caches import CREATED, Caches, owned, pod, standard, workload
from tests.support.objects import admission_check, gang_policy

US = "topology.k8s.aws/ultraserver-id"


def job(name: str, deadline: int | None, started: str = CREATED) -> dict[str, Any]:
    spec = {"activeDeadlineSeconds": deadline} if deadline is not None else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"startTime": started},
    }


def running(caches: Caches, name: str, us: int, nodes: int, deadline: int | None) -> None:
    """A gang admitted into us-`us` on its first `nodes` nodes, owned by a Job with that deadline."""
    wl = owned(workload(name, nodes, check="Ready", admitted=True, pinned={US: f"us-{us}"}), name=name)
    caches.put(JOBS, job(name, deadline))
    caches.put(WORKLOADS, wl)
    for i in range(nodes):
        caches.put(PODS, pod(f"{name}-{i}", name, node=f"us{us}-{i}", ready=True))


def big_gang_cluster(b_nodes: int = 3) -> Caches:
    """us-1: "a" on 3 nodes, its Job's deadline 1h; us-2: "b" on `b_nodes` nodes, no deadline;
    "big" (4 pods, one UltraServer) waits. The check's policy reserves after 1m (explain and the
    pass read the clock 90s after the quota reservation)."""
    c = Caches()
    standard(c)
    c.put(GANG_POLICIES, gang_policy("reserving", reservation={"afterWaiting": "1m"}))
    c.put(ADMISSION_CHECKS, admission_check("gang", policy="reserving"))
    running(c, "a", 1, 3, 3600)
    running(c, "b", 2, b_nodes, None)
    c.put(WORKLOADS, workload("big", 4, message="gang does not fit now"))
    return c
