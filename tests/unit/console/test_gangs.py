"""Gang rows and a gang's timeline: the phase, domain and sentences are those of `gangctl
explain` (core.gangs), the waiting gang's row carries the check's own message, and the timeline
tells each milestone once, Events first."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gangplugin.console.gangs import timeline
from gangplugin.console.model import GangDetail, Milestone
from gangplugin.core.gangs import Phase, Pods, explain
from gangplugin.kube.client import PODS, WORKLOADS
from gangplugin.kube.resources import ADMISSION_CHECKS
from tests.support.caches import cond, owned, pod, workload
from tests.support.console_world import World, standard
from tests.support.dispatched import RECORD, dispatched

US = "topology.k8s.aws/ultraserver-id"
WAIT = "gang does not fit now: 6 pods need 6 nodes of one UltraServer; best is us-1 with room for 3"


def test_rows_of_running_and_waiting_gangs() -> None:
    world = World()
    standard(world)
    world.put(
        WORKLOADS,
        owned(workload("job-a", 2, check="Ready", admitted=True, pinned={US: "us-1"}), name="a"),
        owned(workload("job-w", 6, check="Pending", message=WAIT), kind="PyTorchJob", name="w"),
    )
    world.put(
        PODS, pod("a-0", "job-a", node="us1-0", ready=True), pod("a-1", "job-a", node="us1-1", ready=True)
    )
    world.put(PODS, pod("plain-0", "loose", node="us2-0", size=2))  # a pod gang, no Workload
    rows = {g.name: g for g in world.source.gangs()}
    assert sorted(rows) == ["job-a", "job-w", "loose"]
    a, w, loose = rows["job-a"], rows["job-w"], rows["loose"]
    assert (a.job, a.cluster_queue, a.local_queue, a.phase, a.domain) == (
        "Job/a",
        "training",
        "training",
        Phase.RUNNING,
        (US, "us-1"),
    )
    assert a.pods == Pods(2, 2, 2)
    assert (w.job, w.phase, w.message, w.check_state) == ("PyTorchJob/w", Phase.PENDING, WAIT, "Pending")
    # the same sentences gangctl explain prints
    expected = explain(Phase.PENDING, Pods(6, 0, 0), queue="training", check_message=WAIT)
    assert "\n".join(w.explanation) == expected
    assert w.explanation[0] == "Quota is reserved; the gang check holds it until the whole gang fits."
    assert f"Gang check: {WAIT}" in w.explanation
    assert (loose.job, loose.phase, loose.pods) == ("", Phase.PENDING, Pods(2, 1, 0))


def test_a_workload_that_does_not_pass_our_check_is_no_gang() -> None:
    world = World()
    standard(world)
    plain = workload("plain", 1, check=None, queue="other")
    world.put(WORKLOADS, plain)
    assert world.source.gangs() == ()
    assert world.source.gang("team-a", "plain") is None


def test_a_gang_not_yet_seen_by_the_check_is_found_through_its_queue() -> None:
    world = World()
    standard(world)
    world.put(WORKLOADS, workload("fresh", 2, check=None))  # LocalQueue training -> ClusterQueue training
    (row,) = world.source.gangs()
    assert (row.name, row.phase, row.cluster_queue) == ("fresh", Phase.QUEUED, "training")


def test_a_dispatched_gang_says_what_gangctl_explain_says_its_worker_and_the_dispatcher() -> None:
    """On a MultiKueue manager: the row and the gang page name the worker and the dispatcher's
    verdict, the sentences the gRPC API's explain prints (one function makes both)."""
    world = World()  # a manager: no gang check, no nodes
    world.put(
        ADMISSION_CHECKS,
        {"metadata": {"name": "multikueue"}, "spec": {"controllerName": "kueue.x-k8s.io/multikueue"}},
    )
    world.put(WORKLOADS, dispatched("g", record=RECORD, nominatedClusterNames=["b"]))
    (row,) = world.source.gangs()
    expected = explain(row.phase, row.pods, worker="b", dispatch=RECORD.summary)
    assert "\n".join(row.explanation) == expected
    assert row.explanation[0] == "Nominated to worker cluster b: its Kueue and gang check decide now."
    detail = world.source.gang("team-a", "g")
    assert detail is not None and detail.summary.explanation == row.explanation


def _at(seconds: int) -> str:
    return datetime.fromtimestamp(1_800_000_000 + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(reason: str, message: str, seconds: int, kind: str = "Normal", count: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": f"e-{reason}-{seconds}"},
        "reason": reason,
        "message": message,
        "type": kind,
        "lastTimestamp": _at(seconds),
        "count": count,
    }


def running_detail(world: World) -> GangDetail:
    wl = owned(
        workload("job-a", 2, check="Ready", admitted=True, pinned={US: "us-1"}, message="gang admitted"),
        name="a",
    )
    wl["status"]["conditions"].append(cond("PodsReady"))
    world.put(WORKLOADS, wl)
    pods = [pod(f"a-{i}", "job-a", node=f"us1-{i}", ready=True) for i in range(2)]
    for p in pods:
        p["status"]["conditions"].append(cond("PodScheduled"))
    world.put(PODS, *pods)
    detail = world.source.gang("team-a", "job-a")
    assert detail is not None
    return detail


def test_milestones_of_the_current_admission() -> None:
    world = World()
    standard(world)
    detail = running_detail(world)
    kinds = [m.milestone for m in detail.milestones]
    assert kinds == [
        Milestone.SUBMITTED,
        Milestone.QUOTA_RESERVED,
        Milestone.PINNED,
        Milestone.ADMITTED,
        Milestone.BOUND,
        Milestone.READY,
    ]
    assert [(p.name, p.node, p.ready) for p in detail.pods] == [
        ("a-0", "us1-0", True),
        ("a-1", "us1-1", True),
    ]
    assert detail.workload == "job-a"


def test_timeline_tells_requeues_and_replacements_from_events_each_milestone_once() -> None:
    world = World()
    standard(world)
    detail = running_detail(world)
    events = [
        event("GangAdmitted", "gang admitted: all 2 pods fit in us-2", -600),
        event("GangRequeued", "not all pods Ready within 5m; requeued, backoff 60s", -300, "Warning"),
        event("GangAdmitted", "gang admitted: all 2 pods fit in us-1", 1),  # the current one
        event("NodeReplaced", "node us1-1 NotReady: pod a-1 moved to spare us1-3", 120, count=2),
    ]
    entries = timeline(detail, events)
    assert [e.at for e in entries] == sorted(e.at for e in entries)
    kinds = [e.milestone for e in entries]
    # two GangAdmitted Events; the check's own Ready at the moment of the second is told once
    assert kinds.count(Milestone.PINNED) == 2
    assert kinds.count(Milestone.REQUEUED) == 1 and kinds.count(Milestone.NODE_REPLACED) == 1
    requeue = next(e for e in entries if e.milestone is Milestone.REQUEUED)
    assert requeue.warning and "backoff 60s" in requeue.text
    replaced = next(e for e in entries if e.milestone is Milestone.NODE_REPLACED)
    assert replaced.text.endswith("(x2)")


def test_a_milestone_whose_event_came_seconds_later_is_told_once() -> None:
    world = World()
    standard(world)
    detail = running_detail(world)
    # on a busy machine Kueue's recorder sends its Events seconds after the conditions they follow
    events = [
        event("QuotaReserved", "Quota reserved in ClusterQueue training", 4),
        event("Admitted", "Admitted by ClusterQueue training", 5),
    ]
    kinds = [e.milestone for e in timeline(detail, events)]
    assert kinds.count(Milestone.QUOTA_RESERVED) == 1 and kinds.count(Milestone.ADMITTED) == 1
    # an Event from before the current admission tells an earlier one: both are shown
    earlier = [event("Admitted", "Admitted by ClusterQueue training", -600)]
    assert [e.milestone for e in timeline(detail, earlier)].count(Milestone.ADMITTED) == 2


def test_an_evicted_gang_shows_when_it_comes_back() -> None:
    world = World()
    standard(world)
    wl = workload("job-e", 2, check="Retry", message="requeued")
    wl["status"]["conditions"].append({**cond("Evicted"), "message": "pods not Ready in time"})
    wl["status"]["requeueState"] = {"count": 1, "requeueAt": "2027-01-15T08:05:00Z"}
    world.put(WORKLOADS, wl)
    detail = world.source.gang("team-a", "job-e")
    assert detail is not None and detail.summary.phase is Phase.EVICTED
    (requeued,) = [m for m in detail.milestones if m.milestone is Milestone.REQUEUED]
    assert "pods not Ready in time" in requeued.text and "2027-01-15T08:05:00Z" in requeued.text
