"""Topology-aware preemption of whole gangs on the real local cluster (Kueue, kube-scheduler,
kwok): 4 GB200 UltraServers of 18 nodes with 4 GPUs each.

Each test makes its own WorkloadPriorityClasses, GangPolicy, AdmissionCheck, ResourceFlavor and
ClusterQueues (with Kueue `spec.preemption`, in a cohort where the test needs one). The quota of
the single-team tests is larger than the fleet, so Kueue itself never preempts: every eviction
seen here is the gang check's, for topology.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gangplugin.core.names import PREEMPTION_ANNOTATION
from gangplugin.kube.client import JOBS, WORKLOADS, Client
from gangplugin.kube.kueue_records import is_true
from tests.support.cluster import E2ECluster, e2e_local_cluster
from tests.support.gangs import US, check_of, clear, domain_of, events_of, running_gang, workload
from tests.support.kube import job_pods, unique, wait_for, workload_of
from tests.support.objects import gpu_job
from tests.support.preemption import LOWER, Governance, preempted
from tests.support.scrape import wait_decided


@pytest.fixture
def gov(cluster: E2ECluster, namespace: str) -> Iterator[Governance]:
    g = Governance(cluster.client, namespace)
    yield g
    clear(cluster.client, namespace)
    g.close()


def submit(client: Client, namespace: str, queue: str, pods: int, priority: str) -> str:
    name = unique("job")
    job = gpu_job(
        name, namespace, queue, pods, 4, metadata={"annotations": {"gangplugin.io/required-topology": US}}
    )
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority
    client.create(JOBS, job)
    return name


def fill(client: Client, namespace: str, queue: str, priority: str, gangs: int) -> dict[str, str]:
    """`gangs` gangs of 8 pods, one after the other (best fit packs two per UltraServer, two
    nodes left free in each); job -> UltraServer."""
    out = {}
    for _ in range(gangs):
        job = submit(client, namespace, queue, 8, priority)
        running_gang(client, namespace, job, 8)
        out[job] = domain_of(client, namespace, job)
    return out


def assert_requeued_without_charge(client: Client, namespace: str, job: str) -> None:
    wl = workload(client, namespace, job)
    assert not (check_of(wl).get("retryCount") or 0), check_of(wl)  # no Retry: nothing charged
    assert not ((wl.get("status") or {}).get("requeueState") or {}).get("count"), wl["status"]


@pytest.mark.compat
def test_high_priority_gang_evicts_the_gangs_of_one_ultraserver_only(
    cluster: E2ECluster, namespace: str, gov: Governance
) -> None:
    client = cluster.client
    low, high = gov.priority(100), gov.priority(1000)
    queue = gov.queue(2000, LOWER)
    lows = fill(client, namespace, queue, low, 8)
    assert sorted(list(lows.values()).count(us) for us in set(lows.values())) == [2, 2, 2, 2], lows

    started = time.monotonic()
    big = submit(client, namespace, queue, 16, high)
    running_gang(client, namespace, big, 16)
    took = time.monotonic() - started
    print(f"high-priority gang of 16 pods Running {took:.1f}s after submission")

    victims = preempted(client, namespace, list(lows))
    assert len(victims) == 2, victims
    assert {lows[v] for v in victims} == {domain_of(client, namespace, big)}  # one UltraServer
    for job in set(lows) - victims:
        assert len([p for p in job_pods(client, namespace, job) if is_true(p, "Ready")]) == 8, job
    big_wl = workload(client, namespace, big)["metadata"]["name"]
    preempting = [e["message"] for e in events_of(client, namespace, big_wl) if e["reason"] == "Preempting"]
    for v in victims:
        victim_wl = workload(client, namespace, v)["metadata"]["name"]
        assert any(victim_wl in m for m in preempting), preempting
        (ev,) = [e for e in events_of(client, namespace, victim_wl) if e["reason"] == "Preempted"]
        assert big_wl in ev["message"], ev
        assert_requeued_without_charge(client, namespace, v)

    # The victims wait while the big gang runs, then run again when it leaves.
    client.request("DELETE", JOBS.path(namespace, big), body={"propagationPolicy": "Background"})
    for v in victims:
        running_gang(client, namespace, v, 8)


def test_gang_that_needs_equal_priority_preempted_waits_and_says_so(
    cluster: E2ECluster, namespace: str, gov: Governance
) -> None:
    client = cluster.client
    same = gov.priority(500)
    queue = gov.queue(2000, LOWER)
    lows = fill(client, namespace, queue, same, 8)
    big = submit(client, namespace, queue, 16, same)

    def waiting() -> str | None:
        msg = str(check_of(workload(client, namespace, big)).get("message", ""))
        return msg if "protected by withinClusterQueue: LowerPriority" in msg else None

    msg = wait_for(waiting, 60, "the equal-priority gang's check message")
    # the rule in the message (beside any other queue's gangs' reasons: the cluster is shared),
    # the count (which changes as gangs come and go) in its Event
    assert "protected by withinClusterQueue: LowerPriority, priority 500 >= 500)" in msg, msg
    name = workload(client, namespace, big)["metadata"]["name"]

    def counted() -> list[str]:
        # the Event of the pass that first told it so: the count as it was then (an Event is
        # recorded when the kind of reason changes, not at every recount)
        said = [e["message"] for e in events_of(client, namespace, name) if e["reason"] == "GangWaiting"]
        rule = re.compile(r"\d+ protected by withinClusterQueue: LowerPriority, priority 500 >= 500")
        return [m for m in said if rule.search(m)]

    wait_for(counted, 60, "the GangWaiting Event with the protected gangs counted")
    # A pass decided on the gang as it is now (and would have written any preemption by then).
    wait_decided(e2e_local_cluster(), workload(client, namespace, big))
    assert not preempted(client, namespace, list(lows))
    assert check_of(workload(client, namespace, big))["state"] == "Pending"


def test_team_borrowing_is_reclaimed_by_topology(
    cluster: E2ECluster, namespace: str, gov: Governance
) -> None:
    """Team B (nominal 144 GPUs) borrows 80 of team A's; 7 gangs of B leave 2, 2, 2 and 10
    nodes free. Team A's gang of 16 pods gets quota (64 GPUs are free in the cohort) but no
    UltraServer: the one gang of B alone in its UltraServer is reclaimed, nothing else."""
    client = cluster.client
    exp, train = gov.priority(100), gov.priority(500)
    cohort = unique("teams")
    team_a = gov.queue(144, {"reclaimWithinCohort": "Any", **LOWER}, cohort)
    team_b = gov.queue(144, LOWER, cohort, borrowingLimit=144)
    b_gangs = fill(client, namespace, team_b, exp, 7)
    alone = [j for j, us in b_gangs.items() if list(b_gangs.values()).count(us) == 1]
    assert len(alone) == 1, b_gangs

    a_gang = submit(client, namespace, team_a, 16, train)
    running_gang(client, namespace, a_gang, 16)
    assert preempted(client, namespace, list(b_gangs)) == set(alone)
    assert domain_of(client, namespace, a_gang) == b_gangs[alone[0]]
    msg = " ".join(
        e["message"]
        for e in events_of(client, namespace, workload(client, namespace, a_gang)["metadata"]["name"])
        if e["reason"] == "Preempting"
    )
    assert "reclaimWithinCohort: Any" in msg, msg


def test_restart_in_the_middle_of_a_preemption_finishes_it_and_holds_nothing_forever(
    cluster: E2ECluster, namespace: str, gov: Governance
) -> None:
    """The state gangplugin leaves when killed between its writes: the hold recorded on the
    preemptor, one victim evicted, the other not. The restarted controller evicts the other
    (no gang half way, no preemption half done), the big gang runs, and the domain is free
    for the victims once it leaves."""
    assert cluster.local, "this test stops gangplugin, which needs the local cluster (KUBECONFIG unset)"
    client = cluster.client
    low, high = gov.priority(100), gov.priority(1000)
    queue = gov.queue(2000, LOWER)
    lows = fill(client, namespace, queue, low, 8)
    local = e2e_local_cluster()
    for replica in local.gangplugin_replicas():  # none left to take over
        local.stop_process(replica)
    try:
        big = submit(client, namespace, queue, 16, high)
        wl = wait_for(
            lambda: (
                ((w := workload_of(client, namespace, big)) and is_true(w, "QuotaReserved") and w) or None
            ),
            60,
            "quota reserved for the big gang",
        )
        domain = sorted(set(lows.values()))[0]
        victims = sorted(j for j, us in lows.items() if us == domain)
        victim_wls = [workload(client, namespace, v) for v in victims]
        reserved = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
        hold = {
            "level": US,
            "domain": domain,
            "nodes": [],
            "victims": [f"{namespace}/{w['metadata']['name']}" for w in victim_wls],
            "quotaReservedAt": datetime.fromisoformat(
                reserved["lastTransitionTime"].replace("Z", "+00:00")
            ).timestamp(),
            "at": time.time(),
        }
        client.request(
            "PATCH",
            WORKLOADS.path(namespace, wl["metadata"]["name"]),
            body={"metadata": {"annotations": {PREEMPTION_ANNOTATION: json.dumps(hold)}}},
            content_type="application/merge-patch+json",
        )
        first = victim_wls[0]["metadata"]
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        message = "Preempted by gangplugin (a crash came before the second victim)"
        client.request(  # the first eviction, written as gangplugin writes it (admission/preempt.py)
            "PATCH",
            WORKLOADS.path(namespace, first["name"]) + "/status",
            body={
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": first["name"], "namespace": namespace},
                "status": {
                    "conditions": [
                        {
                            "type": "Evicted",
                            "status": "True",
                            "reason": "Preempted",
                            "message": message,
                            "lastTransitionTime": at,
                        }
                    ],
                    "admissionChecks": [
                        {"name": gov.check, "state": "Pending", "message": message, "lastTransitionTime": at}
                    ],
                },
            },
            content_type="application/apply-patch+yaml",
            params={"fieldManager": "gangplugin-preemption", "force": "true"},
        )
    finally:
        local.restart("gangplugin")
    running_gang(client, namespace, big, 16)
    assert domain_of(client, namespace, big) == domain
    second = victim_wls[1]["metadata"]["name"]
    assert any(e["reason"] == "Preempted" for e in events_of(client, namespace, second)), "second victim"
    for job in set(lows) - set(victims):
        assert len([p for p in job_pods(client, namespace, job) if is_true(p, "Ready")]) == 8, job
    client.request("DELETE", JOBS.path(namespace, big), body={"propagationPolicy": "Background"})
    for v in victims:
        running_gang(client, namespace, v, 8)
