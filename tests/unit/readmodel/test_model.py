"""The read model over watch caches: its records, the one Sequential rule, our check on a
Workload, its followers' hooks and the gangs it summarizes."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from gangplugin.admission.writes import as_admitted
from gangplugin.core.gangs import Phase
from gangplugin.core.placement import Gang
from gangplugin.core.states import CheckState
from gangplugin.kube.client import CLUSTER_QUEUES, LOCAL_QUEUES, NODES, PODS, WORKLOADS
from gangplugin.kube.resources import RESOURCE_FLAVORS
from gangplugin.readmodel.model import Config, Follower
from gangplugin.readmodel.records import NodeRecord, PodRecord, WorkloadRecord, workload_record
from gangplugin.readmodel.summaries import GangKind, Owner, Summaries
from tests.support.caches import CREATED, Caches, cond, gpu_node, owned, pod, standard, workload

EARLIER = "2027-01-15T07:00:00Z"
LATER = "2027-01-15T09:00:00Z"


def pods_ready(wl: dict[str, Any], status: str, reason: str, at: str) -> dict[str, Any]:
    c = cond("PodsReady", status, reason)
    c["lastTransitionTime"] = at
    wl["status"]["conditions"].append(c)
    return wl


def test_a_gang_counts_as_ready_once_its_pods_were_ready_since_this_admission() -> None:
    admitted = workload("g", 2, check="Ready", admitted=True)
    assert not workload_record(admitted).ever_ready  # no PodsReady yet
    assert workload_record(
        pods_ready(workload("g", 2, check="Ready", admitted=True), "True", "R", LATER)
    ).ever_ready
    # a node failed under it: Kueue's waitForPodsReady recovery; it ran, so it counts as Ready
    for reason in ("WaitForRecovery", "Recovered"):
        wl = pods_ready(workload("g", 2, check="Ready", admitted=True), "False", reason, LATER)
        assert workload_record(wl).ever_ready, reason
    # PodsReady left from an earlier admission does not count
    stale = pods_ready(workload("g", 2, check="Ready", admitted=True), "True", "R", EARLIER)
    assert not workload_record(stale).ever_ready
    not_yet = pods_ready(workload("g", 2, check="Ready", admitted=True), "False", "WaitForStart", LATER)
    assert not workload_record(not_yet).ever_ready


def test_the_queue_orders_waiting_gangs_and_names_the_unready_admitted_ones() -> None:
    caches = Caches()
    standard(caches)
    caches.put(WORKLOADS, workload("running", 1, check="Ready", admitted=True))
    caches.put(WORKLOADS, pods_ready(workload("ran", 1, check="Ready", admitted=True), "True", "R", LATER))
    late, early = workload("late", 1), workload("early", 1)
    late["status"]["conditions"][0]["lastTransitionTime"] = LATER
    for wl in (late, early, workload("queued", 1, check=None)):
        caches.put(WORKLOADS, wl)
    order = caches.model().queue().order
    assert [q.key for q in order.candidates] == ["team-a/early", "team-a/late"]
    assert sorted(q.key for q in order.admitted) == ["team-a/ran", "team-a/running"]
    assert order.unready == {None: ("team-a/running",)}


def test_a_record_is_the_cached_one_only_for_the_caches_own_object() -> None:
    """A copy with the same resourceVersion (the Workload as an admission being written will
    make it) is read as it is, not as the cache's version."""
    caches = Caches()
    standard(caches)
    caches.put(WORKLOADS, workload("g", 2))
    model = caches.model()
    cached = model.workloads.get("team-a/g")
    assert cached is not None
    assert model.record(cached) is model.record(cached)  # parsed once
    check = model.check_of(as_admitted(cached, "gang", []))
    assert check is not None and check.entry is not None and check.entry.state is CheckState.READY
    assert model.check_of(cached).entry.state is CheckState.PENDING  # type: ignore[union-attr]


def test_our_check_is_read_from_the_status_else_from_either_list_of_the_cluster_queue() -> None:
    caches = Caches()
    standard(caches)
    caches.put(CLUSTER_QUEUES, {"metadata": {"name": "listed"}, "spec": {"admissionChecks": ["gang"]}})
    caches.put(
        LOCAL_QUEUES,
        {"metadata": {"name": "listed", "namespace": "team-a"}, "spec": {"clusterQueue": "listed"}},
    )
    queued = workload("queued", 1, queue="listed", check=None)
    caches.put(WORKLOADS, queued)
    model = caches.model()
    ours = model.our_checks()
    assert model.check_of(queued, ours) is None  # Kueue has not listed it on the Workload yet
    found = model.expected_check(queued, ours)
    assert found is not None and found.name == "gang" and found.entry is None


def test_hashed_gang_ids_find_their_workload() -> None:
    caches = Caches()
    standard(caches)
    long = workload("job-" + "x" * 70, 2)
    caches.put(WORKLOADS, long)
    model = caches.model()
    record = model.record(long)
    assert record.gang_id != record.name
    assert model.workload_of_gang("team-a", record.gang_id) == record.key


class Recorder(Follower):
    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def workload(self, old: WorkloadRecord | None, new: WorkloadRecord | None) -> None:
        self.seen.append(f"workload {(new or old).name}")  # type: ignore[union-attr]

    def pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        self.seen.append(f"pod {(new or old).name}")  # type: ignore[union-attr]

    def node(self, old: NodeRecord | None, new: NodeRecord | None) -> None:
        self.seen.append(f"node {(new or old).name}")  # type: ignore[union-attr]

    def config(self, kind: Config, name: str, present: bool) -> None:
        self.seen.append(f"{kind} {name}")


def test_followers_hear_of_changes_after_the_model_holds_them_and_not_of_heartbeats() -> None:
    caches = Caches()
    model = caches.model()
    seen: list[str] = []
    model.follow(Recorder(seen))

    class Reader(Follower):  # a second follower: the model already indexed the pod it hears of
        def pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
            seen.append(f"bound {len(model.index.placed('team-a', 'g')['main'])}")

    model.follow(Reader())
    caches.put(NODES, gpu_node("n1", "us-1"))
    beat = gpu_node("n1", "us-1")
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = LATER  # a heartbeat: nothing read changed
    caches.put(NODES, beat)
    caches.put(PODS, pod("p", "g", node="n1"))
    ready = pod("p", "g", node="n1")
    ready["status"]["containerStatuses"] = [{"name": "c", "restartCount": 1}]  # a field not read
    caches.put(PODS, ready)
    caches.put(CLUSTER_QUEUES, {"metadata": {"name": "q"}, "spec": {}})
    caches.put(WORKLOADS, workload("g", 1))
    assert seen == ["node n1", "pod p", "bound 1", "ClusterQueue q", "workload g"]


def test_a_gang_is_summarized_with_its_job_queue_phase_and_pods() -> None:
    caches = Caches()
    standard(caches)
    caches.put(
        WORKLOADS,
        owned(
            workload(
                "job-train",
                2,
                check="Ready",
                admitted=True,
                pinned={"topology.k8s.aws/ultraserver-id": "us-1"},
            ),
            name="train",
        ),
    )
    for i in range(2):
        caches.put(PODS, pod(f"train-{i}", "job-train", node=f"us1-{i}", ready=True))
    caches.put(PODS, pod("solo-0", "solo", node="us2-0", size=2))
    summaries = Summaries(caches.model())
    found = summaries.find("team-a", "job-train")
    assert found is not None
    gang = found[0]
    assert (gang.kind, gang.phase, gang.pods.total, gang.pods.ready) == (
        GangKind.WORKLOAD,
        Phase.RUNNING,
        2,
        2,
    )
    assert gang.owner == Owner(group="batch", kind="Job", name="train")
    assert (gang.local_queue, gang.cluster_queue, gang.check_state) == (
        "training",
        "training",
        CheckState.READY,
    )
    assert gang.domain == ("topology.k8s.aws/ultraserver-id", "us-1") and gang.created == CREATED
    solo = summaries.find("team-a", "solo")
    assert solo is not None and solo[0].kind is GangKind.POD_GANG and solo[0].pods.total == 2
    assert [g.name for g in summaries.all("team-a")] == ["job-train", "solo"]
    assert summaries.find("team-a", "job-train-0") is None


def test_a_gang_is_parsed_once_per_cached_workload_and_again_for_a_copy_or_a_new_flavor() -> None:
    """Every pass reads every admitted gang: the cache's own Workload is parsed once; a copy with
    the same resourceVersion (other flavors assigned in its status) and a changed ResourceFlavor
    are parsed again, never answered from what was kept."""
    caches = Caches()
    standard(caches)
    flavor = {"metadata": {"name": "gb200", "resourceVersion": "1"}, "spec": {"nodeLabels": {"pool": "a"}}}
    caches.put(RESOURCE_FLAVORS, flavor)
    wl = workload("g", 2, check="Ready", admitted=True)
    wl["status"]["admission"]["podSetAssignments"][0]["flavors"] = {"nvidia.com/gpu": "gb200"}
    caches.put(WORKLOADS, wl)
    model = caches.model()
    cached = model.workloads.get("team-a/g")
    assert cached is not None

    def pool(gang: Gang) -> str | None:
        return dict(gang.podsets[0].constraints.node_selector).get("pool")

    first = model.gangs.gang(cached)
    assert pool(first) == "a"
    assert model.gangs.gang(cached) is first  # kept
    copy = deepcopy(cached)
    copy["status"]["admission"]["podSetAssignments"][0]["flavors"] = {"nvidia.com/gpu": "other"}
    assert pool(model.gangs.gang(copy)) is None  # same resourceVersion, another status: parsed
    assert pool(model.gangs.gang(cached)) == "a"
    caches.put(RESOURCE_FLAVORS, {**flavor, "spec": {"nodeLabels": {"pool": "b"}}})
    assert pool(model.gangs.gang(cached)) == "b"  # the flavor changed: parsed again
