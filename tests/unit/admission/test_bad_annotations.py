"""Bad annotations on a gang's pod template reject it, naming the annotation (both found by the
soak's bad input, silently accepted before): a `gangplugin.io/max-runtime` that is not a
duration, also on a ClusterQueue no TrainingPlan feeds (it was read only to decide a drain),
and a `gangplugin.io/` key gangplugin does not know (a misspelt `required-topology` placed the
gang anywhere), with the closest known one."""

from __future__ import annotations

from gangplugin.admission.controller import GangAdmission
from gangplugin.core.names import BLOCK_END_ANNOTATION, GANG_SIZE_ANNOTATION, MAX_RUNTIME_ANNOTATION
from tests.unit.api.cluster import NOW, WORKLOADS, Caches, standard, workload


def verdict(max_runtime: str | None = None, **annotations: str) -> tuple[bool, str]:
    caches = Caches()
    standard(caches)
    wl = workload("wl", 2)
    template = wl["spec"]["podSets"][0]["template"]["metadata"]["annotations"]
    template.update(annotations)
    if max_runtime is not None:
        template[MAX_RUNTIME_ANNOTATION] = max_runtime
    caches.put(WORKLOADS, wl)
    controller = GangAdmission(caches.client, caches.informer, caches.dispatcher, clock=lambda: NOW)
    caches.replay()
    found = controller.admission.explain(wl, "gang", NOW)
    assert found is not None
    return found.rejected, found.message


def test_an_unusable_max_runtime_rejects_the_gang_without_a_plan() -> None:
    rejected, message = verdict("soon")
    assert rejected, message
    assert MAX_RUNTIME_ANNOTATION in message and "'soon'" in message


def test_a_usable_max_runtime_without_a_plan_changes_nothing() -> None:
    rejected, message = verdict("6h")
    assert not rejected and "all 2 pods fit" in message, message


def test_a_misspelt_gangplugin_annotation_rejects_the_gang_naming_the_right_one() -> None:
    rejected, message = verdict(**{"gangplugin.io/requried-topology": "topology.k8s.aws/ultraserver-id"})
    assert rejected, message
    assert "gangplugin.io/requried-topology" in message
    assert "did you mean gangplugin.io/required-topology?" in message


def test_the_annotations_the_check_stamps_on_pods_are_known() -> None:
    """A Job written from a running one carries what the check put on its pods."""
    stamped = {GANG_SIZE_ANNOTATION: "2", BLOCK_END_ANNOTATION: "2027-01-16T11:30:00Z"}
    rejected, message = verdict(**stamped)
    assert not rejected, message
