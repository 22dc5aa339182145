"""The MultiKueue dispatcher's adapter over a faked manager and faked workers (their objects and
watches; Kueue's and the gang check's logic are the e2e tests'): what it reads, what it writes
on the manager's Workload, and in which order."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from gangplugin.core.dispatch import DispatchRecord
from gangplugin.core.names import DISPATCH_ANNOTATION, REQUIRED_TOPOLOGY_ANNOTATION
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, identity, wait_all_synced
from gangplugin.multikueue.connections import WorkerConnection
from gangplugin.multikueue.controller import DispatchSettings, MultiKueueDispatcher
from tests.support import objects
from tests.support.fakeapi import wait_until
from tests.support.fakecluster import FakeCluster

KUEUE = "kueue.x-k8s.io/v1beta2"
US = "topology.k8s.aws/ultraserver-id"
CREATED = "2027-01-15T08:00:00Z"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def cond(kind: str, status: str = "True", reason: str = "R", message: str = "") -> dict[str, Any]:
    return objects.condition(kind, status, reason=reason, message=message, lastTransitionTime=CREATED)


def node(name: str, us: str) -> dict[str, Any]:
    return objects.node(name, us, labels={"topology.kubernetes.io/zone": "z1"}, conditions=[cond("Ready")])


def workload(name: str, count: int, **status: Any) -> dict[str, Any]:
    main = objects.podset(
        count, requests={"nvidia.com/gpu": "4", "cpu": "1"}, annotations={REQUIRED_TOPOLOGY_ANNOTATION: US}
    )
    wl = objects.workload(
        name,
        "team-a",
        main,
        queue="training",
        conditions=[cond("QuotaReserved")],
        checks=[objects.check_state("multikueue", "Pending", lastTransitionTime=CREATED)],
        creationTimestamp=CREATED,
    )
    wl["status"].update(status)
    return wl


def worker_cluster(ultraservers: dict[str, int], gpu_quota: str = "1000") -> FakeCluster:
    c = FakeCluster()
    for us, size in ultraservers.items():
        for i in range(size):
            c.put("v1", "nodes", node(f"{us}-n{i}", us))
    c.put(
        KUEUE,
        "admissionchecks",
        {"metadata": {"name": "gang"}, "spec": {"controllerName": "gangplugin.io/gang"}},
    )
    c.put(KUEUE, "resourceflavors", {"metadata": {"name": "gb200"}, "spec": {}})
    resources = [
        {"name": "cpu", "nominalQuota": "1000"},
        {"name": "nvidia.com/gpu", "nominalQuota": gpu_quota},
    ]
    c.put(
        KUEUE,
        "clusterqueues",
        {
            "metadata": {"name": "training"},
            "spec": {
                "admissionChecksStrategy": {"admissionChecks": [{"name": "gang"}]},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [{"name": "gb200", "resources": resources}],
                    }
                ],
            },
        },
    )
    c.put(
        KUEUE,
        "localqueues",
        {"metadata": {"name": "training", "namespace": "team-a"}, "spec": {"clusterQueue": "training"}},
    )
    return c


class Setup:
    """A manager with the MultiKueue check over workers a and b, and the dispatcher over it."""

    def __init__(self, workers: dict[str, FakeCluster], active: tuple[str, ...] | None = None) -> None:
        self.manager = m = FakeCluster()
        self.workers = workers
        m.put(KUEUE, "multikueueconfigs", {"metadata": {"name": "mk"}, "spec": {"clusters": sorted(workers)}})
        params = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "mk"}
        m.put(
            KUEUE,
            "admissionchecks",
            {
                "metadata": {"name": "multikueue"},
                "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": params},
            },
        )
        for name in workers:
            self.set_active(name, active is None or name in active)
            data = base64.b64encode(name.encode()).decode()
            secret = {
                "metadata": {"name": f"{name}-secret", "namespace": "kueue-system"},
                "data": {"kubeconfig": data},
            }
            m.put("v1", "secrets", secret)
        self.now = NOW
        self.dispatch_events = Dispatcher("test-manager")
        self.dispatch_events.start()
        self.informers: list[Informer[Any]] = []
        self.connections: list[WorkerConnection] = []
        self.client = m.client()

        def informer(
            res: Any, transform: Callable[[Any], Any] = identity, namespace: str | None = None
        ) -> Informer[Any]:
            inf: Informer[Any] = Informer(self.client, res, transform, namespace=namespace)
            self.informers.append(inf)
            return inf

        def connect(name: str, kubeconfig: bytes, on_change: Callable[[], None]) -> WorkerConnection:
            assert kubeconfig == name.encode()  # the Secret's kubeconfig, decoded
            conn = WorkerConnection(name, self.workers[name].client(), on_change)
            conn.start()
            self.connections.append(conn)
            return conn

        self.ctl = MultiKueueDispatcher(
            self.client,
            informer,
            self.dispatch_events,
            DispatchSettings(answer_timeout=60, refusal_ttl=300),
            clock=lambda: self.now,
            connector=connect,
        )
        for inf in self.informers:
            inf.start()
        assert wait_all_synced(self.informers, 10)

    def set_active(self, name: str, active: bool) -> None:
        cluster = {
            "metadata": {"name": name},
            "spec": {
                "clusterSource": {"kubeConfig": {"location": f"{name}-secret", "locationType": "Secret"}}
            },
            "status": {
                "conditions": [cond("Active", "True" if active else "False", "R", "" if active else "gone")]
            },
        }
        self.manager.put(KUEUE, "multikueueclusters", cluster)

    def settle(self) -> None:
        """Caches caught up with every fake's writes (each change was watched)."""
        wait_until(lambda: all(c.synced() for c in self.ctl.connections.values()), 10)
        for inf in self.informers:
            wait_until(lambda inf=inf: _caught_up(inf, self.manager), 10)
        for c in self.ctl.connections.values():
            for inf in c.informers:
                wait_until(lambda inf=inf, f=self.workers[c.name]: _caught_up(inf, f), 10)
            assert c.dispatcher.caught_up(10)  # the worker's read model holds it all
        assert self.dispatch_events.caught_up(10)

    def submit(self, wl: dict[str, Any]) -> None:
        self.manager.put(KUEUE, "workloads", wl)

    def run(self) -> float | None:
        self.ctl.sync_workers()
        self.settle()
        return self.ctl.run()

    def wl(self, name: str) -> dict[str, Any]:
        found = self.manager.get(KUEUE, "workloads", name, "team-a")
        assert found is not None
        return found

    def nominated(self, name: str) -> list[str] | None:
        return (self.wl(name).get("status") or {}).get("nominatedClusterNames")

    def record(self, name: str) -> DispatchRecord:
        raw = (self.wl(name)["metadata"].get("annotations") or {}).get(DISPATCH_ANNOTATION)
        return DispatchRecord.from_dict(orjson.loads(raw) if raw else None)

    def close(self) -> None:
        self.ctl.stop()
        for inf in self.informers:
            inf.stop()
        for fake in (self.manager, *self.workers.values()):
            fake.close()


def _caught_up(inf: Informer[Any], fake: FakeCluster) -> bool:
    """The cache holds what the fake holds for its resource (its keys and versions)."""
    res = inf._resource
    coll = fake._collection(res.api_version, res.plural)
    want = {
        k.lstrip("/") if not v["metadata"].get("namespace") else k: v["metadata"]["resourceVersion"]
        for k, v in fake.objects.get(coll, {}).items()
        if inf._namespace is None or v["metadata"].get("namespace") == inf._namespace
    }
    with inf._lock:
        have = dict(inf._store)
    return set(have) == set(want) and all(
        not isinstance(o, dict) or o["metadata"]["resourceVersion"] == want[k] for k, o in have.items()
    )


@pytest.fixture
def two() -> Iterator[Setup]:
    s = Setup({"a": worker_cluster({"a-us1": 4, "a-us2": 4}), "b": worker_cluster({"b-us1": 6, "b-us2": 6})})
    yield s
    s.close()


def status_writes(fake: FakeCluster) -> list[list[str]]:
    return [b["status"]["nominatedClusterNames"] for m, p, b in fake.writes if p.endswith("/status")]


def test_a_gang_that_fits_only_in_b_is_nominated_to_b_and_a_says_why(two: Setup) -> None:
    two.submit(workload("g6", 6))
    two.run()
    assert two.nominated("g6") == ["b"]
    rec = two.record("g6")
    assert rec.nominated == "b" and rec.nominated_at == NOW
    by = {v.worker: v for v in rec.verdicts}
    assert by["b"].chosen and by["b"].level == US and by["b"].domains == ("b-us1",)
    assert not by["a"].fits and by["a"].reason.startswith("can never start whole: it needs 6 pods")
    # the annotation went first, then the status, on the version the annotation made
    annotation, status = two.manager.writes
    assert "annotations" in annotation[2]["metadata"] and status[1].endswith("/status")
    assert status[2]["metadata"]["resourceVersion"] != annotation[2]["metadata"]["resourceVersion"]


def test_a_burst_spreads_without_over_promising_a_worker(two: Setup) -> None:
    for i in range(6):
        two.submit(workload(f"g{i}", 4))
    two.run()
    got = {f"g{i}": two.nominated(f"g{i}") for i in range(6)}
    # a: two UltraServers of 4 take one gang each; b: two of 6 take one each (the rest waits).
    assert sorted(n[0] for n in got.values() if n) == ["a", "a", "b", "b"]
    waiting = [k for k, n in got.items() if not n]
    assert len(waiting) == 2
    for k in waiting:
        assert two.record(k).summary.startswith("fits in no worker now:")


def test_nominations_in_flight_are_charged_in_the_next_pass(two: Setup) -> None:
    two.submit(workload("first", 4))
    two.run()
    assert two.nominated("first") == ["a"]  # the tightest: an UltraServer of 4
    two.submit(workload("second", 4))
    two.submit(workload("third", 4))
    two.submit(workload("fourth", 4))
    two.run()
    # `first` holds one of a's UltraServers: one more gang goes to a, two to b.
    assert two.nominated("first") == ["a"]
    later = sorted((two.nominated(n) or ["-"])[0] for n in ("second", "third", "fourth"))
    assert later == ["a", "b", "b"]


def test_a_refusing_worker_is_given_up_and_the_next_is_tried_once_its_copy_is_gone(two: Setup) -> None:
    two.submit(workload("g", 4))
    two.run()
    assert two.nominated("g") == ["a"]
    copy = workload("g", 4)
    copy["status"] = {
        "conditions": [cond("QuotaReserved")],
        "admissionChecks": [{"name": "gang", "state": "Pending", "message": "gang does not fit now: x"}],
    }
    two.workers["a"].put(KUEUE, "workloads", copy)
    two.run()
    assert two.nominated("g") == []
    rec = two.record("g")
    assert [(r.worker, r.reason) for r in rec.refusals] == [("a", "its gang check: gang does not fit now: x")]
    assert rec.summary == "gave a up: its gang check: gang does not fit now: x"
    two.run()  # Kueue has not deleted a's copy yet: nothing is nominated
    assert status_writes(two.manager) == [["a"], []]
    two.workers["a"].delete(KUEUE, "workloads", "g", "team-a")
    two.run()
    assert two.nominated("g") == ["b"]
    by = {v.worker: v for v in two.record("g").verdicts}
    assert by["a"].reason == (
        "refused it at 2027-01-15T08:00:00Z (its gang check: gang does not fit now: x); "
        "asked again from 2027-01-15T08:05:00Z"
    )


def test_a_silent_worker_is_given_up_after_the_answer_timeout(two: Setup) -> None:
    two.submit(workload("g", 4))
    two.run()
    two.now += 30
    wake = two.run()
    assert two.nominated("g") == ["a"] and wake == pytest.approx(30)
    two.now += 30
    two.run()
    assert two.nominated("g") == []
    assert two.record("g").refusals[0].reason == "no answer within 60s"


def test_a_copy_admitted_in_a_worker_not_nominated_is_adopted(two: Setup) -> None:
    two.submit(workload("g", 4, nominatedClusterNames=["b"]))
    copy = workload("g", 4)
    copy["status"] = {"conditions": [cond("QuotaReserved"), cond("Admitted")]}
    two.workers["a"].put(KUEUE, "workloads", copy)
    two.run()
    assert two.nominated("g") == ["a"]
    assert two.record("g").summary == "adopted a: admitted there"


def test_a_disconnected_worker_is_skipped_with_its_reason() -> None:
    s = Setup({"a": worker_cluster({"a-us1": 4}), "b": worker_cluster({"b-us1": 6})}, active=("b",))
    try:
        s.submit(workload("g", 4))
        s.run()
        assert s.nominated("g") == ["b"]
        by = {v.worker: v for v in s.record("g").verdicts}
        assert by["a"].reason == "Kueue is not connected to it (gone)"
    finally:
        s.close()


def test_quota_in_the_worker_is_counted() -> None:
    s = Setup({"a": worker_cluster({"a-us1": 4}, gpu_quota="8"), "b": worker_cluster({"b-us1": 6})})
    try:
        s.submit(workload("g", 4))
        s.run()
        assert s.nominated("g") == ["b"]
        by = {v.worker: v for v in s.record("g").verdicts}
        assert (
            by["a"].reason
            == "no quota in ClusterQueue training: flavor gb200 has 8 nvidia.com/gpu free of 16"
        )
    finally:
        s.close()


def test_a_restarted_dispatcher_resumes_from_the_record(two: Setup) -> None:
    two.submit(workload("g", 4))
    two.run()
    record = two.record("g")
    two.close()
    again = Setup(two.workers)  # the same workers, a new manager with the Workload as it was
    try:
        wl = two.wl("g")
        again.submit(wl)
        again.now = NOW + 59
        again.run()
        assert again.nominated("g") == ["a"] and again.record("g") == record
        again.now = NOW + 60  # the timeout counts from the recorded nomination, not the restart
        again.run()
        assert again.nominated("g") == []
    finally:
        again.close()


def test_a_workload_that_cannot_be_read_says_so_and_is_not_nominated(two: Setup) -> None:
    bad = workload("bad", 4)
    bad["spec"]["podSets"][0]["template"]["metadata"]["annotations"]["gangplugin.io/max-runtime"] = "-1h"
    two.submit(bad)
    two.run()
    assert not two.nominated("bad")
    assert two.record("bad").summary.startswith("the Workload cannot be used:")


def test_a_worker_without_the_gang_check_is_unusable() -> None:
    plain = worker_cluster({"a-us1": 8})
    plain.put(KUEUE, "admissionchecks", {"metadata": {"name": "gang"}, "spec": {"controllerName": "other"}})
    s = Setup({"a": plain})
    try:
        s.submit(workload("g", 4))
        s.run()
        assert not s.nominated("g")
        assert s.record("g").verdicts[0].reason == (
            "ClusterQueue training has no gangplugin.io/gang check: nothing there admits a gang whole"
        )
    finally:
        s.close()


def test_nothing_is_decided_while_a_worker_s_caches_have_not_synced(two: Setup) -> None:
    two.submit(workload("g", 4, nominatedClusterNames=["a"]))
    two.ctl.connector = lambda name, _kc, on_change: WorkerConnection(
        name, two.workers[name].client(), on_change
    )
    two.ctl.sync_workers()  # connections made, their caches never started (as right after a restart)
    assert two.ctl.settling() == ["a", "b"]
    assert two.ctl.run() == 0.5
    assert two.manager.writes == [] and two.nominated("g") == ["a"]


def test_a_pass_on_a_cache_that_lags_counts_its_own_last_nominations() -> None:
    s = Setup({"a": worker_cluster({"a-us1": 4}), "b": worker_cluster({"b-us1": 4})})
    try:
        s.submit(workload("first", 4))
        s.settle()
        s.ctl.sync_workers()
        s.settle()
        # The manager's watch of Workloads lags from here: the next pass does not see its own
        # nomination of `first`, only a new gang that comes before it in queue order (by name).
        s.manager.pause(KUEUE, "workloads")
        s.ctl.run()
        assert s.nominated("first") == ["a"]
        (workloads,) = [i for i in s.informers if i._resource.plural == "workloads"]
        assert not (workloads.get("team-a/first") or {}).get("status", {}).get("nominatedClusterNames")
        s.submit(workload("early", 4))
        s.manager.release(KUEUE, "workloads", "early")
        wait_until(lambda: workloads.get("team-a/early") is not None, 10)
        s.ctl.run()
        # `first` holds a's UltraServer, as written, though the cache does not show it yet
        assert s.nominated("early") == ["b"] and s.nominated("first") == ["a"]
    finally:
        s.close()


@pytest.mark.parametrize(
    ("manager_state", "held"),
    [
        ({"clusterName": "a"}, True),  # recorded there, the manager's check still Pending
        ({"clusterName": "a", "admitted": True}, True),  # and admitted on the manager
        ({"clusterName": "a", "admitted": True, "finished": True}, False),  # ended: holds nothing
    ],
)
def test_a_gang_kueue_recorded_in_a_worker_holds_its_capacity_before_our_watch_of_it_shows_its_copy_admitted(
    manager_state: dict[str, Any], held: bool
) -> None:
    s = Setup({"a": worker_cluster({"a-us1": 4}), "b": worker_cluster({"b-us1": 6})})
    try:
        first = workload("first", 4, clusterName=manager_state["clusterName"])
        if manager_state.get("admitted"):
            first["status"]["conditions"].append(cond("Admitted"))
            first["status"]["admissionChecks"][0]["state"] = "Ready"
        if manager_state.get("finished"):
            first["status"]["conditions"].append(cond("Finished"))
        s.submit(first)
        # Kueue's watch of worker a showed `first` admitted; ours still shows its copy deciding.
        copy = workload("first", 4)
        copy["status"] = {
            "conditions": [cond("QuotaReserved")],
            "admissionChecks": [{"name": "gang", "state": "Pending"}],
        }
        s.workers["a"].put(KUEUE, "workloads", copy)
        s.submit(workload("second", 4))
        s.run()
        # a's one UltraServer of 4 is the tightest fit, unless `first` holds it
        assert s.nominated("second") == (["b"] if held else ["a"])
        assert not s.nominated("first")  # recorded in a: nothing of the dispatcher's to write
    finally:
        s.close()
