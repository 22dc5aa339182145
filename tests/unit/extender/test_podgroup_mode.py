"""bindMode PodGroup in the ungater: the gang's native PodGroup exists, with gang minCount = its
size and owned by its Workload, before any pod leaves the gate; where the API server serves no
PodGroups the gang is released as Ungate with a warning, never left gated. The API server is
scripted behind httpx.MockTransport (the e2e test runs the real one)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gangplugin.core.admission import gang_id
from gangplugin.core.names import BIND_MODE_LABEL
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.ungater import RETRY_SECONDS, Ungater, pod_group_object, pod_group_wanted
from gangplugin.kube.client import Client
from tests.support.extender import WORKLOAD, Api, add, cache_of, ungate_pod


def podgroup_pod(name: str, size: int = 2, group: str | None = "g", **kw: Any) -> dict[str, Any]:
    """A pod of PodGroup gang `g`, as the webhook creates it (group None: the API server dropped
    its schedulingGroup)."""
    obj = ungate_pod(name, "g", size, **kw)
    obj["metadata"]["labels"][BIND_MODE_LABEL] = "PodGroup"
    if group is not None:
        obj["spec"]["schedulingGroup"] = {"podGroupName": group}
    return obj


def test_podgroup_pods_are_gated_and_pinned_as_ungate_ones_and_name_their_group() -> None:
    gated = gang_pod_from_k8s(podgroup_pod("a"))
    assert gated.gated and gated.bind_mode == "PodGroup" and gated.pod_group == "g"
    pinned = gang_pod_from_k8s(podgroup_pod("b", pinned="n1"))
    assert not pinned.gated and pinned.pinned == "n1"
    assert gang_pod_from_k8s(ungate_pod("c", "g", 2)).pod_group is None


def test_which_podgroup_a_gang_needs() -> None:
    def wanted(*objs: dict[str, Any]) -> tuple[str | None, bool]:
        return pod_group_wanted([gang_pod_from_k8s(o) for o in objs])

    assert wanted(ungate_pod("a", "g", 2), ungate_pod("b", "g", 2)) == (None, False)
    assert wanted(podgroup_pod("a"), podgroup_pod("b")) == ("g", False)
    assert wanted(podgroup_pod("a", group=None), podgroup_pod("b", group=None)) == (None, True)
    # A group the pod named itself (not the gang's) is not ours to create.
    assert wanted(podgroup_pod("a", group="theirs")) == (None, True)


def test_the_podgroup_is_all_or_nothing_and_owned_by_the_workload() -> None:
    assert pod_group_object("ns", "g", 8, WORKLOAD) == {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "g",
            "namespace": "ns",
            "labels": {"gangplugin.io/gang": "g"},
            "ownerReferences": [
                {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "g", "uid": "wl-uid"}
            ],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": 8}}},
    }


def run(api: Api, gang: str = "g") -> float | None:
    cache = cache_of({"us-1": 2})
    add(cache, *api.pods.values())
    client = Client("https://api.test", False, transport=httpx.MockTransport(api.handle))
    ungater = Ungater(client, cache, clock=lambda: 0.0, workers=1)
    try:
        return ungater.reconcile(f"ns/{gang}")
    finally:
        ungater.patcher.shutdown()
        client.close()


def test_the_podgroup_is_created_before_any_pod_leaves_the_gate() -> None:
    api = Api([podgroup_pod("p0"), podgroup_pod("p1")])
    assert run(api) is None
    kinds = [("podgroups" if "podgroups" in p else "pods" if "/pods/" in p else p) for m, p, _ in api.calls]
    assert kinds.index("podgroups") < kinds.index("pods")
    (created,) = api.made("POST", "/podgroups")
    assert created["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    assert len(api.made("PATCH", "/pods/")) == 2


def test_a_podgroup_from_before_is_kept_and_its_min_count_follows_the_gang() -> None:
    existing = pod_group_object("ns", "g", 3, WORKLOAD)
    api = Api([podgroup_pod("p0"), podgroup_pod("p1")], create_status=409, existing=existing)
    assert run(api) is None
    assert api.made("PATCH", "/podgroups/g") == [{"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}]
    assert len(api.made("PATCH", "/pods/")) == 2


def test_a_workload_named_beyond_a_label_value_owns_its_gangs_podgroup() -> None:
    api = Api([podgroup_pod("p0"), podgroup_pod("p1")])
    long_name = "job-" + "x" * 70
    api.workload = {**WORKLOAD, "metadata": {**WORKLOAD["metadata"], "name": long_name}}
    gang = gang_id(long_name)
    for pod in api.pods.values():
        pod["metadata"]["labels"]["gangplugin.io/gang"] = gang
        pod["spec"]["schedulingGroup"] = {"podGroupName": gang}
    assert run(api, gang) is None
    (created,) = api.made("POST", "/podgroups")
    assert created["metadata"]["ownerReferences"][0]["name"] == long_name


@pytest.mark.parametrize("why", ["no workload", "being deleted"])
def test_a_gang_whose_podgroup_cannot_be_there_stays_gated(why: str) -> None:
    existing = {**pod_group_object("ns", "g", 2, WORKLOAD)}
    existing["metadata"] = {**existing["metadata"], "deletionTimestamp": "2026-11-30T00:00:00Z"}
    api = Api([podgroup_pod("p0"), podgroup_pod("p1")], create_status=409, existing=existing)
    if why == "no workload":
        api.workload = None
    assert run(api) == RETRY_SECONDS
    assert api.made("PATCH", "/pods/") == []


@pytest.mark.parametrize("cause", ["API not served", "schedulingGroup dropped"])
def test_without_the_podgroup_api_the_gang_is_released_as_ungate_with_a_warning(cause: str) -> None:
    group = "g" if cause == "API not served" else None
    api = Api([podgroup_pod("p0", group=group), podgroup_pod("p1", group=group)], create_status=404)
    assert run(api) is None
    assert len(api.made("PATCH", "/pods/")) == 2
    (event,) = api.made("POST", "/events")
    assert event["reason"] == "PodGroupUnavailable" and event["type"] == "Warning"
    assert event["involvedObject"]["uid"] == "wl-uid"
    assert "GenericWorkload" in event["message"] and "spec.bindMode" in event["message"]
