"""A gang in backoff after a timeout holds neither nodes nor quota (DESIGN.md section 1: the
evicted job's capacity is released): another gang of the same ClusterQueue is admitted during
the first one's backoff, and the first is admitted again once its backoff is over, also when
gangplugin was restarted in the middle of it (the backoff's end is read back from the Workload).
"""

from __future__ import annotations

from typing import Any

import pytest

from gangplugin.core.names import BACKOFF_UNTIL_ANNOTATION
from gangplugin.kube.client import JOBS
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import GANG_POLICIES
from tests.support.cluster import E2ECluster, e2e_local_cluster
from tests.support.gangs import NEVER_READY, check_of, epoch, running_gang, submit, workload
from tests.support.kube import condition, job_pods, wait_until, workload_of

# The first gang's backoff. It only has to outlast the second gang's admission (a few seconds),
# which the test shows by the order of the two Workloads' own timestamps.
BACKOFF_SECONDS = 60


def _holds_node(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and pod["status"].get("phase") not in ("Succeeded", "Failed")


@pytest.mark.compat
def test_a_gang_in_backoff_holds_neither_nodes_nor_quota(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    assert cluster.local, "this test restarts gangplugin, which needs the local cluster (KUBECONFIG unset)"
    client = cluster.client
    # Quota for one gang of two 4-GPU pods: while the first holds it, no other gang is admitted.
    queue = gang_queue(
        gpu_quota=8,
        readyTimeout="3s",
        requeue={"backoffBaseSeconds": BACKOFF_SECONDS, "backoffMaxSeconds": BACKOFF_SECONDS},
    )
    first = submit(client, namespace, queue, 2, labels={NEVER_READY: "true"})

    def backing_off() -> dict[str, Any] | None:
        wl = workload_of(client, namespace, first)
        if wl is None or not (wl.get("status", {}).get("requeueState") or {}).get("requeueAt"):
            return None
        if is_true(wl, "QuotaReserved") or any(_holds_node(p) for p in job_pods(client, namespace, first)):
            return None
        return wl

    def first_state() -> str:
        wl = workload_of(client, namespace, first) or {}
        status = wl.get("status", {})
        held = [p["metadata"]["name"] for p in job_pods(client, namespace, first) if _holds_node(p)]
        conditions = [(c["type"], c["status"], c.get("reason")) for c in status.get("conditions") or []]
        return f"{first}: conditions {conditions}, requeueState {status.get('requeueState')}, on nodes {held}"

    wl = wait_until(backing_off, 120, lambda: f"waiting for the first gang's backoff: {first_state()}")
    check = check_of(wl)
    until = wl["status"]["requeueState"]["requeueAt"]
    assert check["state"] == "Pending" and check.get("retryCount") == 1, check
    assert f"after backoff {BACKOFF_SECONDS // 60}m" in check["message"], check
    assert f"backoff until {until}" in check["message"], check
    assert wl["metadata"]["annotations"][BACKOFF_UNTIL_ANNOTATION] == until
    evicted = condition(wl, "Evicted")
    assert evicted is not None and evicted["status"] == "True", wl["status"]
    # Readmitted later with a readyTimeout it meets for the rest of the test: one admission to see.
    client.patch(GANG_POLICIES, queue, {"spec": {"readyTimeout": "30m"}})

    # Submitted only now: had the first kept its quota through the backoff, this one would wait.
    second = submit(client, namespace, queue, 2)
    running_gang(client, namespace, second, 2)
    admitted = condition(workload(client, namespace, second), "Admitted")
    assert admitted is not None and admitted["status"] == "True"
    assert epoch(admitted["lastTransitionTime"]) < epoch(until), (admitted, until, first_state())
    assert not is_true(workload(client, namespace, first), "QuotaReserved"), first_state()

    # Restarted mid-backoff: the backoff's end is on the Workload, the new process carries on.
    e2e_local_cluster().restart("gangplugin")
    client.delete(JOBS, second, namespace)

    def readmitted() -> dict[str, Any] | None:
        wl = workload_of(client, namespace, first)
        c = condition(wl, "Admitted") if wl else None
        return wl if c and c["status"] == "True" else None

    again = wait_until(
        readmitted, BACKOFF_SECONDS + 120, lambda: f"waiting for the first gang again: {first_state()}"
    )
    at = condition(again, "Admitted")
    assert at is not None and epoch(at["lastTransitionTime"]) >= epoch(until), (at, until)
    assert check_of(again)["state"] == "Ready" and check_of(again).get("retryCount") == 1, check_of(again)
    assert not (again["status"].get("requeueState") or {}).get("requeueAt"), again["status"]
