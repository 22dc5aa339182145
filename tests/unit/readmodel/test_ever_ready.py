"""When is a gang "fully Ready once" since its admission (the read model's one rule), the
watchdog's switch from readyTimeout to recoveryTimeout? From Kueue's PodsReady where that counts
Ready pods (a batch Job's), and from the watchdog's own record where Kueue's PodsReady says only
that the job runs (a PyTorchJob's: Kueue reads the training-operator's Running condition, so a
rank whose readiness probe never passed was never timed out; found on real nodes,
tests/e2e/test_real_nodes.py)."""

from __future__ import annotations

from typing import Any

from gangplugin.core.names import READY_AT_ANNOTATION
from gangplugin.core.policy import GangPolicy
from gangplugin.core.watchdog import GangObservation, watch
from gangplugin.kube.client import NODES
from gangplugin.readmodel.records import pod_record, workload_record
from tests.support.caches import model_of
from tests.support.objects import node

ADMITTED = "2026-12-03T10:00:00Z"
T0 = 1_796_292_000.0  # ADMITTED in epoch seconds


def observe(wl: dict[str, Any], members: list[dict[str, Any]]) -> GangObservation:
    """What the watchdog reads of the gang, through the read model (its node n1 Ready)."""
    caches, model = model_of(workloads=[wl])
    caches.put(NODES, node("n1"))
    return model.observe(workload_record(wl), [pod_record(p) for p in members])


def workload(owner_api: str, **annotations: str) -> dict[str, Any]:
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": ADMITTED} for t in ("Admitted", "PodsReady")
    ]
    return {
        "metadata": {
            "name": "wl",
            "namespace": "ns",
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": owner_api, "kind": "X", "name": "x"}],
        },
        "spec": {"podSets": [{"name": "main", "count": 4}]},
        "status": {"conditions": conditions},
    }


def pods(ready: int, not_ready_since: str = ADMITTED) -> list[dict[str, Any]]:
    def pod(i: int) -> dict[str, Any]:
        status, since = ("True", ADMITTED) if i < ready else ("False", not_ready_since)
        cond = {"type": "Ready", "status": status, "lastTransitionTime": since}
        return {
            "metadata": {"name": f"p{i}", "namespace": "ns"},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "conditions": [cond]},
        }

    return [pod(i) for i in range(4)]


POLICY = GangPolicy(ready_timeout=30.0, recovery_timeout=300.0)


def test_a_pytorchjob_rank_never_ready_runs_out_its_ready_timeout_though_kueue_says_pods_ready() -> None:
    obs = observe(workload("kubeflow.org/v1"), pods(ready=3))
    assert not obs.ever_ready
    verdict = watch(POLICY, obs, T0 + 31)
    assert (
        verdict.expired and "only 3/4 pods Ready" in verdict.reason and "readyTimeout 30s" in verdict.reason
    )


def test_a_pytorchjob_once_whole_recovers_from_a_rank_not_ready_since_it_went() -> None:
    wl = workload("kubeflow.org/v1", **{READY_AT_ANNOTATION: "2026-12-03T10:00:20Z"})
    obs = observe(wl, pods(ready=3, not_ready_since="2026-12-03T10:05:00Z"))
    assert obs.ever_ready and obs.degraded_since == T0 + 300
    verdict = watch(POLICY, obs, T0 + 301)
    assert not verdict.expired and verdict.phase == "Recovering"
    assert watch(POLICY, obs, T0 + 601).expired


def test_a_record_from_an_earlier_admission_does_not_count() -> None:
    wl = workload("kubeflow.org/v1", **{READY_AT_ANNOTATION: "2026-12-03T09:59:00Z"})
    assert not observe(wl, pods(ready=3)).ever_ready


def test_a_batch_job_keeps_kueue_s_pods_ready() -> None:
    obs = observe(workload("batch/v1"), pods(ready=3))
    assert obs.ever_ready, "Kueue's PodsReady of a Job counts its Ready pods"
