"""Metric helpers: first all-Ready per admission, plan quota series, eviction labels."""

from __future__ import annotations

from prometheus_client import REGISTRY, Histogram
from prometheus_client.registry import CollectorRegistry

from gangplugin.core.states import CheckState
from gangplugin.core.watchdog import WatchPhase
from gangplugin.runtime import metrics


def _histogram() -> Histogram:
    return Histogram("t_seconds", "test", registry=CollectorRegistry())


def _count(h: Histogram) -> float:
    return next(s.value for m in h.collect() for s in m.samples if s.name.endswith("_count"))


def _sum(h: Histogram) -> float:
    return next(s.value for m in h.collect() for s in m.samples if s.name.endswith("_sum"))


def test_first_all_ready_after_admission_is_observed_once() -> None:
    h = _histogram()
    ready = metrics.FirstReady(h)
    assert ready.update("ns/a", 100.0, False, 101.0) is None
    assert ready.update("ns/a", 100.0, False, 105.0) is None
    assert ready.update("ns/a", 100.0, True, 112.5) == 12.5
    # Still ready, or degraded and recovered: the same admission is not counted again.
    assert ready.update("ns/a", 100.0, True, 113.0) is None
    assert ready.update("ns/a", 100.0, False, 200.0) is None
    assert ready.update("ns/a", 100.0, True, 210.0) is None
    assert (_count(h), _sum(h)) == (1, 12.5)


def test_a_new_admission_counts_again() -> None:
    h = _histogram()
    ready = metrics.FirstReady(h)
    ready.update("ns/a", 100.0, False, 101.0)
    ready.update("ns/a", 100.0, True, 110.0)
    ready.update("ns/a", 300.0, False, 301.0)
    assert ready.update("ns/a", 300.0, True, 304.0) == 4.0
    assert _count(h) == 2


def test_gangs_ready_before_this_process_watched_are_not_counted() -> None:
    # A new leader's first look at a gang that is already running says nothing of its start.
    h = _histogram()
    ready = metrics.FirstReady(h)
    assert ready.update("ns/a", 100.0, True, 5000.0) is None
    ready.forget("ns/a")
    assert ready.update("ns/a", 100.0, True, 5001.0) is None
    assert _count(h) == 0


def _quota_series(queue: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["flavor"], s.labels["resource"]): s.value
        for m in REGISTRY.collect()
        if m.name == "gangplugin_plan_quota"
        for s in m.samples
        if s.labels.get("cluster_queue") == queue
    }


def test_plan_quota_replaces_the_queues_series() -> None:
    metrics.plan_quota("unit-cq", {("p5", "nvidia.com/gpu"): 128, ("p5", "cpu"): 3072})
    assert _quota_series("unit-cq") == {("p5", "nvidia.com/gpu"): 128.0, ("p5", "cpu"): 3072.0}
    metrics.plan_quota("unit-cq", {("p5", "nvidia.com/gpu"): 64})
    assert _quota_series("unit-cq") == {("p5", "nvidia.com/gpu"): 64.0}
    metrics.plan_quota("unit-cq", {})
    assert _quota_series("unit-cq") == {}


def test_evictions_are_labelled_by_phase_and_outcome() -> None:
    def value(reason: str, action: str) -> float:
        v = REGISTRY.get_sample_value("gangplugin_gang_evictions_total", {"reason": reason, "action": action})
        return v or 0.0

    before = value("PodsNotReady", "Requeued"), value("RecoveryTimeout", "Deactivated")
    metrics.eviction(WatchPhase.STARTING, CheckState.RETRY)
    metrics.eviction(WatchPhase.RECOVERING, CheckState.REJECTED)
    assert value("PodsNotReady", "Requeued") == before[0] + 1
    assert value("RecoveryTimeout", "Deactivated") == before[1] + 1


def _barrier_series() -> dict[tuple[str, str], float]:
    return {
        (s.labels["namespace"], s.labels["gang"]): s.value
        for m in metrics.BARRIER_WAITING.collect()
        for s in m.samples
    }


def test_a_gang_has_a_barrier_series_only_while_it_waits() -> None:
    metrics.barrier_waiting("ns", "g", 3)
    metrics.barrier_waiting("ns", "g", 11)
    assert _barrier_series()[("ns", "g")] == 11
    metrics.barrier_waiting("ns", "g", 0)
    metrics.barrier_waiting("ns", "never-waited", 0)  # opened at its first bind: no series to remove
    assert ("ns", "g") not in _barrier_series() and ("ns", "never-waited") not in _barrier_series()


def test_newest_resource_version_reads_etcd_revisions_and_skips_others() -> None:
    objs = [
        {"metadata": {"resourceVersion": "907"}},
        {"metadata": {"resourceVersion": "1204"}},
        {"metadata": {"resourceVersion": "not-a-revision"}},
        {"metadata": {}},
        {},
    ]
    assert metrics.newest_resource_version(objs) == 1204
    assert metrics.newest_resource_version([]) == 0


def test_waiting_gangs_by_reason_every_reason_set_and_zeroed_when_none_waits() -> None:
    def value(name: str, reason: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"reason": reason})

    metrics.waiting({"NoFit": [30.0, 600.0], "Backoff": [5.0]})
    assert value("gangplugin_waiting_gangs", "NoFit") == 2
    assert value("gangplugin_waiting_gang_oldest_seconds", "NoFit") == 600.0
    assert value("gangplugin_waiting_gangs", "Backoff") == 1
    assert value("gangplugin_waiting_gangs", "Sequential") == 0
    metrics.waiting({})
    for reason in metrics.WaitingReason:
        assert value("gangplugin_waiting_gangs", reason) == 0
        assert value("gangplugin_waiting_gang_oldest_seconds", reason) == 0
