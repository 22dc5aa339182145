"""One cluster state, read two ways: through this cluster's informers, as the admission pass reads
it (the `admission` component's read model), and through a MultiKueue worker connection, as the
dispatcher on a manager reads that cluster as a worker. Both must see the same admitted gangs not
Ready yet (the Sequential gate), the same capacity promised to admitted gangs (in the same
admission order) and refuse the same gangs that could never start whole. Before the read model,
the two paths were separate code and disagreed on each of these cases.

The state is served by a faked API (`FakeCluster`: its store and watches, nothing of Kueue's
logic), listed and watched by real informers on both paths.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gangplugin import readmodel
from gangplugin.admission.controller import GangAdmission
from gangplugin.core.admission import promised_pods
from gangplugin.core.errors import InputError
from gangplugin.core.gate import gate
from gangplugin.core.names import REQUIRED_TOPOLOGY_ANNOTATION
from gangplugin.core.topology import DEFAULT_LEVELS, ULTRASERVER_LABEL, Snapshot
from gangplugin.kube.informer import wait_all_synced
from gangplugin.kube.kueue_records import PODSET_LABEL
from gangplugin.multikueue import controller as dispatcher
from gangplugin.multikueue.connections import WorkerConnection
from gangplugin.readmodel.decisions import gang_facts
from gangplugin.runtime.components import Runtime
from tests.support import objects
from tests.support.fakeapi import wait_until
from tests.support.fakecluster import FakeCluster
from tests.support.objects import GPU, KUEUE

US = ULTRASERVER_LABEL
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
T0, T1, T2 = "2027-01-15T07:00:00Z", "2027-01-15T07:10:00Z", "2027-01-15T07:20:00Z"
SEQUENTIAL = "one-at-a-time"  # the GangPolicy of check gang-seq


def cond(kind: str, at: str, status: str = "True", reason: str = "R") -> dict[str, Any]:
    return objects.condition(kind, status, reason=reason, message="", lastTransitionTime=at)


def node(name: str, us: str) -> dict[str, Any]:
    return objects.node(
        name, us, labels={"topology.kubernetes.io/zone": "z1"}, conditions=[cond("Ready", T0)]
    )


def pod(name: str, namespace: str, node_name: str, gang: str | None = None) -> dict[str, Any]:
    return objects.pod(
        name,
        namespace,
        gang=gang,
        node=node_name,
        requests={GPU: "4", "cpu": "1"},
        conditions=[cond("Ready", T1)],
        labels={PODSET_LABEL: "main"} if gang else None,
        uid=f"uid-{name}",
    )


def workload(
    namespace: str,
    name: str,
    count: int,
    *,
    check: str,
    queue: str,
    admitted: str | None = None,
    domain: str | None = None,
    pods_ready: dict[str, Any] | None = None,
    owner: str | None = None,
    podsets: tuple[str, ...] = ("main",),
) -> dict[str, Any]:
    """A Workload with quota reserved in ClusterQueue `queue` and `check` on it: admitted (check
    Ready, in `domain`) at `admitted`, else Pending."""
    sets = [
        objects.podset(
            count, ps, requests={GPU: "4", "cpu": "1"}, annotations={REQUIRED_TOPOLOGY_ANNOTATION: US}
        )
        for ps in podsets
    ]
    entry = objects.check_state(
        check,
        "Pending" if admitted is None else "Ready",
        pinned=None if admitted is None else {US: str(domain)},
        podsets=podsets,
        lastTransitionTime=T0,
    )
    conditions = [cond("QuotaReserved", T0)]
    if admitted is not None:
        conditions.append(cond("Admitted", admitted))
    if pods_ready is not None:
        conditions.append(pods_ready)
    owners = (
        []
        if owner is None
        else [{"apiVersion": "ray.io/v1", "kind": owner, "name": name, "controller": True}]
    )
    return objects.workload(
        name,
        namespace,
        *sets,
        queue=queue,
        reserved_by=queue,
        conditions=conditions,
        checks=[entry],
        creationTimestamp=T0,
        **({"ownerReferences": owners} if owners else {}),
    )


def configuration(c: FakeCluster) -> None:
    """Two UltraServers of 4 nodes; ClusterQueues `seq` (check gang-seq, Sequential) and
    `training` (check gang, the defaults: Parallel), with LocalQueues of their names."""
    for us in ("us-1", "us-2"):
        for i in range(4):
            c.put("v1", "nodes", node(f"{us}-n{i}", us))
    c.put("gangplugin.io/v1alpha1", "gangpolicies", objects.gang_policy(SEQUENTIAL, admission="Sequential"))
    c.put(KUEUE, "admissionchecks", objects.admission_check("gang-seq", policy=SEQUENTIAL))
    c.put(KUEUE, "admissionchecks", objects.admission_check("gang"))
    c.put(KUEUE, "resourceflavors", {"metadata": {"name": "gb200"}, "spec": {}})  # every node
    for cq, check in (("seq", "gang-seq"), ("training", "gang")):
        c.put(
            KUEUE,
            "clusterqueues",
            objects.cluster_queue(cq, "gb200", 1000, cpu="1000", memory=None, checks=[check]),
        )
        for ns in ("team-a", "team-b"):
            c.put(KUEUE, "localqueues", objects.local_queue(cq, ns))


@dataclass(frozen=True)
class Reading:
    """What one path read: the admitted gangs of the Sequential policy not Ready yet, each
    promised pod's node (in admission order: who got the room first), the free GPUs per node,
    and the gangs refused as ones that could never start whole (key -> why)."""

    unready: tuple[str, ...]
    promised: dict[str, str | None]
    free: dict[str, int]
    refused: dict[str, str]


def _capacity(
    snap: Snapshot, gangs: dict[str, tuple[str, int]]
) -> tuple[dict[str, str | None], dict[str, int]]:
    """Where each admitted gang's promised pods sit, and the free GPUs of every node."""
    from gangplugin.core.placement import Gang, PodSet

    promised: dict[str, str | None] = {}
    for gang, (namespace, count) in gangs.items():
        for name in promised_pods(Gang((PodSet("main", count, {GPU: 4}),), gang)):
            i = snap.node_of(namespace, name)
            promised[name] = None if i is None else snap.nodes[i].name  # type: ignore[union-attr]
    free = {
        n.name: snap.free[i].get(GPU, 0) for i in snap.live_node_ids() if (n := snap.nodes[i]) is not None
    }
    return promised, free


class Cluster:
    """The state on a faked API server, and its two readers."""

    def __init__(self) -> None:
        self.api = FakeCluster()
        configuration(self.api)
        self.runtime: Runtime | None = None
        self.connection: WorkerConnection | None = None

    def put(self, plural: str, obj: dict[str, Any], api_version: str = KUEUE) -> None:
        self.api.put(api_version, plural, obj)

    def through_informers(self, gangs: dict[str, tuple[str, int]]) -> Reading:
        """As the admission component reads its cluster: the process's read model and the pass."""
        self.runtime = runtime = Runtime(self.api.client())
        model = readmodel.of(runtime)
        GangAdmission(runtime.client, model, clock=lambda: NOW)
        runtime.start_informers()
        assert wait_all_synced(runtime.informers(), 10)
        assert model.dispatcher.caught_up(10)
        queue = model.queue()
        with model.capacity.locked():
            snap = model.capacity.snapshot(DEFAULT_LEVELS, model.promises(queue.admitted()))
            promised, free = _capacity(snap, gangs)

            def snapshot(levels: tuple[str, ...]) -> Snapshot:
                return model.capacity.snapshot(levels, model.promises(queue.admitted()))

            refused = {}
            for q in queue.order.candidates:
                entry = queue.entries[q.key]
                facts = gang_facts(model, entry.wl, q.policy, snapshot, queue.order.unready, NOW)
                verdict = gate(facts)
                if verdict.rejected:
                    refused[q.key] = verdict.message
        return Reading(tuple(queue.order.unready.get(SEQUENTIAL, ())), promised, free, refused)

    def through_worker_connection(self, gangs: dict[str, tuple[str, int]], waiting: list[str]) -> Reading:
        """As the MultiKueue dispatcher on a manager reads this cluster as one of its workers."""
        self.connection = conn = WorkerConnection("worker", self.api.client(), lambda: None)
        conn.start()
        wait_until(conn.synced, 10)
        assert conn.dispatcher.caught_up(10)
        target = conn.view.target("team-a", "seq", {GPU: 4})
        assert not isinstance(target, str), target
        promised, free = _capacity(conn.view.snapshot(DEFAULT_LEVELS), gangs)
        refused = {}
        for key in waiting:  # the dispatcher reads a waiting gang before choosing its worker
            wl = self.api.get(KUEUE, "workloads", key.split("/")[1], key.split("/")[0])
            assert wl is not None
            try:
                dispatcher.gang_of(wl)
            except InputError as err:
                refused[key] = f"the Workload cannot be used: {err}"
        return Reading(target.unready, promised, free, refused)

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.stop.set()
            for inf in self.runtime.informers():
                inf.stop()
        if self.connection is not None:
            self.connection.stop()
        self.api.close()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.close()


def readings(
    c: Cluster, gangs: dict[str, tuple[str, int]], waiting: list[str] = ()
) -> tuple[Reading, Reading]:  # type: ignore[assignment]
    return c.through_informers(gangs), c.through_worker_connection(gangs, list(waiting))


def test_a_recovering_gang_is_ready_and_a_stale_podsready_is_not_on_both_paths(cluster: Cluster) -> None:
    """Under the Sequential policy: "recovering" ran whole and lost a node since (PodsReady False,
    WaitForRecovery, after its admission) and counts as Ready; "readmitted" carries a PodsReady
    True left from an earlier admission and does not. The worker connection once read PodsReady
    alone: a recovering gang held a Sequential queue there that the worker's own check let go."""
    recovering = workload(
        "team-a",
        "recovering",
        2,
        check="gang-seq",
        queue="seq",
        admitted=T1,
        domain="us-2",
        pods_ready=cond("PodsReady", T2, "False", "WaitForRecovery"),
    )
    readmitted = workload(
        "team-a",
        "readmitted",
        1,
        check="gang-seq",
        queue="seq",
        admitted=T1,
        domain="us-2",
        pods_ready=cond("PodsReady", T0),
    )
    for wl in (recovering, readmitted):
        cluster.put("workloads", wl)
    for i in range(2):
        cluster.put("pods", pod(f"recovering-{i}", "team-a", f"us-2-n{i}", "recovering"), "v1")
    here, there = readings(cluster, {"recovering": ("team-a", 2), "readmitted": ("team-a", 1)})
    assert here.unready == ("team-a/readmitted",)
    assert there == here


def test_the_same_capacity_is_promised_in_the_same_admission_order(cluster: Cluster) -> None:
    """Two gangs of 3 admitted into us-1 (4 nodes) at the same instant: the one first in
    admission order (Admitted, then namespace/name) is promised 3 nodes, the other the node left
    (what still fits of a promise that no longer does is kept from the next gang)."""
    first = workload("team-a", "zz-first", 3, check="gang", queue="training", admitted=T1, domain="us-1")
    second = workload("team-b", "aa-second", 3, check="gang", queue="training", admitted=T1, domain="us-1")
    for wl in (first, second):
        cluster.put("workloads", wl)
    gangs = {"zz-first": ("team-a", 3), "aa-second": ("team-b", 3)}
    here, there = readings(cluster, gangs)
    assert sum(1 for n in here.promised.values() if n is not None and n.startswith("us-1")) == 4
    assert all(here.promised[f"~promised/zz-first/main/{i}"] for i in range(3))
    assert sum(1 for i in range(3) if here.promised[f"~promised/aa-second/main/{i}"]) == 1
    assert there == here


def test_a_gang_that_could_never_start_whole_is_refused_on_both_paths(cluster: Cluster) -> None:
    """A RayJob in K8sJobMode: KubeRay makes its submitter pod only once the Ray cluster runs."""
    ray = workload(
        "team-a", "ray", 1, check="gang", queue="training", owner="RayJob", podsets=("head", "submitter")
    )
    plain = workload("team-a", "plain", 1, check="gang", queue="training")
    for wl in (ray, plain):
        cluster.put("workloads", wl)
    here, there = readings(cluster, {}, ["team-a/ray", "team-a/plain"])
    assert list(here.refused) == ["team-a/ray"] and "RayJob spec.submissionMode" in here.refused["team-a/ray"]
    assert there == here
