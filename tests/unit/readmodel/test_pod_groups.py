"""What the gang check reads of Workloads whose podset templates do not say it all: a
LeaderWorkerSet group's (Kueue v0.17 builds them without the templates' annotations), read from
its pods once each podset has one; and the gangs whose controller makes some pods only after
others ran (a RayJob in K8sJobMode, a TrainJob with initializers), refused with the fix."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gangplugin.core.errors import InputError
from gangplugin.core.names import REQUIRED_TOPOLOGY_ANNOTATION
from gangplugin.core.topology import ULTRASERVER_LABEL
from gangplugin.kube.dispatcher import Dispatcher
from gangplugin.kube.informer import Informer, identity
from gangplugin.readmodel.gangs import Gangs
from gangplugin.readmodel.model import ReadModel
from tests.support import objects
from tests.support.fakeapi import FakeApi

GPU = {"nvidia.com/gpu": "4"}


def lws_pod(name: str, role: str, rv: int, **annotations: str) -> dict[str, Any]:
    """A pod of group `wl` as Kueue v0.17's LeaderWorkerSet integration labels it."""
    return objects.pod(
        name,
        requests=GPU,
        labels={"kueue.x-k8s.io/pod-group-name": "wl"},
        annotations={"kueue.x-k8s.io/role-hash": role, **annotations},
        resourceVersion=str(rv),
    )


def workload(owner: str, *podsets: tuple[str, int]) -> dict[str, Any]:
    """A Workload as Kueue v0.17 makes it for a LeaderWorkerSet: templates without metadata."""
    sets = [objects.podset(count, name, requests=GPU) for name, count in podsets]
    return objects.workload("wl", "ns", *sets, ownerReferences=[{"kind": owner, "name": "x"}])


@pytest.fixture
def view_with() -> Iterator[Any]:
    """`view_with(*pods)`: the gangs of a read model whose pod cache and index hold `pods`."""
    fakes: list[FakeApi] = []
    parts: list[Any] = []

    def make(*pods: dict[str, Any]) -> Gangs:
        fake = FakeApi()
        fake.set(*pods)
        fakes.append(fake)
        client = fake.client()
        dispatcher = Dispatcher("read-model")
        model = ReadModel(lambda res, transform=identity: Informer(client, res, transform), dispatcher)
        dispatcher.start()
        model.pods.start()
        parts.extend((model.pods, dispatcher))
        assert model.pods.wait_synced(5)
        return model.gangs

    yield make
    for part in parts:
        part.stop()
    for fake in fakes:
        fake.closed.set()


def test_a_leader_worker_set_group_is_decided_once_each_podset_has_a_pod(view_with: Any) -> None:
    wl = workload("LeaderWorkerSet", ("leader", 1), ("worker", 3))
    leader = lws_pod("x-0", "leader", 2, **{REQUIRED_TOPOLOGY_ANNOTATION: ULTRASERVER_LABEL})
    assert view_with().podsets_without_pods(wl) == ["leader", "worker"]
    assert view_with(leader).podsets_without_pods(wl) == ["worker"]
    worker = lws_pod("x-0-1", "worker", 3, **{REQUIRED_TOPOLOGY_ANNOTATION: ULTRASERVER_LABEL})
    view = view_with(leader, worker)
    assert view.podsets_without_pods(wl) == []
    gang = view.gang(wl)
    assert [(ps.name, ps.count, ps.required_topology) for ps in gang.podsets] == [
        ("leader", 1, ULTRASERVER_LABEL),
        ("worker", 3, ULTRASERVER_LABEL),
    ]


def test_each_podset_of_a_group_reads_its_own_pods_and_other_workloads_are_left_alone(view_with: Any) -> None:
    leader = lws_pod("x-0", "leader", 2)  # the leader asked for nothing
    worker = lws_pod("x-0-1", "worker", 3, **{REQUIRED_TOPOLOGY_ANNOTATION: ULTRASERVER_LABEL})
    view = view_with(leader, worker)
    gang = view.gang(workload("LeaderWorkerSet", ("leader", 1), ("worker", 3)))
    assert [ps.required_topology for ps in gang.podsets] == [None, ULTRASERVER_LABEL]
    # A Job's Workload carries its template's annotations itself: no pod is read or awaited.
    job = workload("Job", ("main", 4))
    assert view.podsets_without_pods(job) == []
    assert view.with_pod_group_annotations(job) is job


def test_a_rayjob_in_k8sjobmode_is_refused_naming_the_field_and_the_fix(view_with: Any) -> None:
    view = view_with()
    with pytest.raises(InputError) as err:
        view.gang(workload("RayJob", ("head", 1), ("gpu", 7), ("submitter", 1)))
    assert err.value.field == "RayJob spec.submissionMode"
    assert "HTTPMode" in err.value.problem and "submitter pod only once" in err.value.problem
    # HTTPMode (no submitter podset) is a gang like any other.
    assert [ps.name for ps in view.gang(workload("RayJob", ("head", 1), ("gpu", 7))).podsets] == [
        "head",
        "gpu",
    ]


def test_a_trainjob_whose_runtime_initializes_first_is_refused_naming_its_runtime(view_with: Any) -> None:
    view = view_with()
    with pytest.raises(InputError) as err:
        view.gang(workload("TrainJob", ("dataset-initializer", 1), ("node", 8)))
    assert err.value.field == "TrainJob spec.runtimeRef" and "dataset-initializer" in err.value.problem
    assert [ps.count for ps in view.gang(workload("TrainJob", ("node", 8))).podsets] == [8]


def test_a_misspelt_key_on_a_group_s_pods_is_seen_as_on_a_template(view_with: Any) -> None:
    """Kueue v0.17 leaves the templates' annotations out, so a typo lives on the pods only: it
    reaches the gang (and the gate's keys step), not only the known keys."""
    typo = "gangplugin.io/required-toplogy"
    view = view_with(lws_pod("x-0", "main", 2, **{typo: ULTRASERVER_LABEL}))
    (ps,) = view.gang(workload("LeaderWorkerSet", ("main", 4))).podsets
    assert [k.key for k in ps.unknown_keys] == [typo] and ps.required_topology is None


def test_a_group_s_pods_marked_as_kueue_v0_19_marks_them_are_found(view_with: Any) -> None:
    """Kueue v0.19 names a LeaderWorkerSet pod's group in an annotation, not a label."""
    pod = lws_pod("x-0", "main", 2, **{REQUIRED_TOPOLOGY_ANNOTATION: ULTRASERVER_LABEL})
    pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-name"] = pod["metadata"].pop("labels")[
        "kueue.x-k8s.io/pod-group-name"
    ]
    view = view_with(pod)
    wl = workload("LeaderWorkerSet", ("main", 4))
    assert view.podsets_without_pods(wl) == []
    (ps,) = view.gang(wl).podsets
    assert ps.required_topology == ULTRASERVER_LABEL
