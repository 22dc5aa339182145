"""A `gangplugin.io/max-runtime` that is not a duration rejects the gang, naming the annotation,
also on a ClusterQueue no TrainingPlan feeds (the soak's bad input found it silently accepted
there: the annotation was read only to decide a drain)."""

from __future__ import annotations

from gangplugin.core.names import MAX_RUNTIME_ANNOTATION
from gangplugin.kube.client import WORKLOADS
from gangplugin.readmodel.decisions import explain
from tests.support.caches import NOW, standard, workload


def verdict(max_runtime: str | None = None, **annotations: str) -> tuple[bool, str]:
    caches = standard()
    wl = workload("wl", 2)
    template = wl["spec"]["podSets"][0]["template"]["metadata"]["annotations"]
    template.update(annotations)
    if max_runtime is not None:
        template[MAX_RUNTIME_ANNOTATION] = max_runtime
    caches.put(WORKLOADS, wl)
    found = explain(caches.model(), wl, "gang", NOW)
    assert found is not None
    return found.rejected, found.message


def test_an_unusable_max_runtime_rejects_the_gang_without_a_plan() -> None:
    rejected, message = verdict("soon")
    assert rejected, message
    assert MAX_RUNTIME_ANNOTATION in message and "'soon'" in message


def test_a_usable_max_runtime_without_a_plan_changes_nothing() -> None:
    rejected, message = verdict("6h")
    assert not rejected and "all 2 pods fit" in message, message
