"""The gangs holding capacity, as preemption and reservations read them: a gang whose pods are
still on nodes after it finished or was evicted is leaving, not there for good."""

from __future__ import annotations

from gangplugin.kube.client import JOBS, PODS, WORKLOADS
from gangplugin.readmodel.decisions import running_gangs
from tests.support.big_gangs import job
from tests.support.caches import Caches, cond, owned, pod, standard, workload


def test_finished_and_evicted_gangs_with_pods_on_nodes_are_leaving() -> None:
    caches = Caches()
    standard(caches)
    caches.put(WORKLOADS, workload("running", 1, check="Ready", admitted=True))
    finished = workload("done", 1, check="Ready", admitted=True)
    finished["status"]["conditions"].append(cond("Finished"))
    caches.put(WORKLOADS, finished)
    gone = workload("gone", 1, check="Ready", admitted=True)
    gone["status"]["conditions"].append(cond("Finished"))
    caches.put(WORKLOADS, gone)
    caches.put(PODS, pod("running-0", "running", node="us1-0"))
    caches.put(PODS, pod("done-0", "done", node="us1-1"))  # terminating, still holding its node
    over = pod("gone-0", "gone", node="us1-2")
    over["status"]["phase"] = "Succeeded"  # holds nothing any more
    caches.put(PODS, over)
    found = {g.key: g for g in running_gangs(caches.model())}
    assert sorted(found) == ["team-a/done", "team-a/running"]
    assert found["team-a/done"].evicting and not found["team-a/running"].evicting
    assert ("team-a", "done-0") in found["team-a/done"].pods


def test_a_deleted_workload_s_terminating_pods_are_leaving_and_a_pod_gang_s_stay() -> None:
    caches = Caches()
    standard(caches)
    terminating = pod("gone-0", "gone", node="us1-0")  # its Job and Workload deleted meanwhile
    terminating["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    caches.put(PODS, terminating)
    caches.put(PODS, pod("solo-0", "solo", node="us1-1", size=2))  # a pod gang: no Workload
    (leaving,) = running_gangs(caches.model())
    assert leaving.evicting and leaving.pods == (("team-a", "gone-0"),) and leaving.gpus == 4


def test_a_gang_whose_job_was_deleted_is_leaving_before_the_garbage_collector_marks_it() -> None:
    """Between its Job's deletion and the garbage collector's, a gang's Workload and pods look
    as they did: read as running, the gang "declared no end" and its domain seemed never to
    free (the starvation bench saw the big gang's reservation move at each such deletion)."""
    caches = Caches()
    standard(caches)
    caches.put(JOBS, job("kept", 600))
    caches.put(WORKLOADS, owned(workload("kept", 1, check="Ready", admitted=True), name="kept"))
    caches.put(WORKLOADS, owned(workload("deleted", 1, check="Ready", admitted=True), name="deleted"))
    caches.put(PODS, pod("kept-0", "kept", node="us1-0"))
    caches.put(PODS, pod("deleted-0", "deleted", node="us1-1"))
    orphan = pod("orphan-0", "orphan", node="us1-2")  # its Workload already collected, it not yet
    orphan["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "orphan", "uid": "u"}
    ]
    caches.put(PODS, orphan)
    found = {g.key: g for g in running_gangs(caches.model())}
    assert sorted(found) == ["team-a/deleted", "team-a/kept", "team-a/orphan"]
    assert not found["team-a/kept"].evicting
    assert found["team-a/deleted"].evicting and found["team-a/orphan"].evicting
    assert found["team-a/orphan"].pods == (("team-a", "orphan-0"),)


def test_a_workload_being_deleted_is_leaving() -> None:
    caches = Caches()
    standard(caches)
    wl = workload("going", 1, check="Ready", admitted=True)
    wl["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    caches.put(WORKLOADS, wl)
    caches.put(PODS, pod("going-0", "going", node="us1-0"))
    (going,) = running_gangs(caches.model())
    assert going.evicting


def test_a_running_gang_s_pods_pinned_but_not_bound_yet_are_its() -> None:
    """The capacity counts a pinned pod on its node before it is bound: the gang it belongs to
    must name it, or a search that takes the gang away (a preemption, a reservation's look at
    when a domain frees) left it there for good, and a big gang's reservation moved."""
    caches = Caches()
    standard(caches)
    caches.put(WORKLOADS, workload("run", 2, check="Ready", admitted=True))
    caches.put(PODS, pod("run-0", "run", node="us1-0"))
    pinned = pod("run-1", "run")
    pinned["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "us1-1"}
    caches.put(PODS, pinned)
    (found,) = running_gangs(caches.model())
    assert {("team-a", "run-0"), ("team-a", "run-1")} <= set(found.pods), found.pods
