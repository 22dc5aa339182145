"""AdmissionReview in, response out, for GangPolicies: plain dicts, no server."""

from __future__ import annotations

import base64
from functools import partial
from typing import Any

import orjson
import pytest

from gangplugin.core.errors import InputError
from gangplugin.webhook.review import gang_policy_validator, gate_review, review
from tests.support.objects import gang_policy, topology

TOPOLOGY = topology("aws", "topology.k8s.aws/ultraserver-id", "kubernetes.io/hostname")
policy = partial(gang_policy, "p")


def request(obj: Any, operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": operation, "object": obj},
    }


def validators(topologies: dict[str, Any] | None = None, pod_groups: bool = True) -> dict[str, Any]:
    known = {"aws": TOPOLOGY} if topologies is None else topologies
    return {"GangPolicy": gang_policy_validator(known.get, lambda: pod_groups)}


def test_a_good_policy_is_allowed_and_the_uid_echoed() -> None:
    out = review(request(policy(readyTimeout="10m", topologyName="aws")), validators())
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    assert out["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"readyTimeout": "-5m"}, "spec.readyTimeout", "duration"),
        ({"recoveryTimeout": "soon"}, "spec.recoveryTimeout", "duration"),
        (
            {"requeue": {"backoffBaseSeconds": 60, "backoffMaxSeconds": 30}},
            "spec.requeue.backoffMaxSeconds",
            "below backoffBaseSeconds",
        ),
        ({"admission": "Sometimes"}, "spec.admission", "Parallel, Sequential"),
        ({"topologyName": "nowhere"}, "spec.topologyName", "does not exist; create it first"),
        ({"reservation": {"afterWaiting": "soon"}}, "spec.reservation.afterWaiting", "duration"),
        ({"reservation": {}}, "spec.reservation.afterWaiting", "is required"),
        ({"reservation": "10m"}, "spec.reservation", "must be a mapping, e.g. {afterWaiting: 10m}"),
        (
            {"reservation": {"afterWaiting": "10m", "maxCheckpointableEvictions": -1}},
            "spec.reservation.maxCheckpointableEvictions",
            "must not be negative",
        ),
        # a level the nodes do not have: not one of the policy's levels (here the defaults)
        (
            {"reservation": {"afterWaiting": "10m", "level": "rack"}},
            "spec.reservation.level",
            "'rack' is not one of the policy's levels (topology.kubernetes.io/zone,",
        ),
        (
            {
                "topologyName": "aws",
                "reservation": {"afterWaiting": "10m", "level": "topology.kubernetes.io/zone"},
            },
            "spec.reservation.level",
            "(topology.k8s.aws/ultraserver-id, kubernetes.io/hostname)",
        ),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(spec: dict[str, Any], field: str, words: str) -> None:
    response = review(request(policy(**spec)), validators())["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 422 and response["status"]["reason"] == "Invalid"
    message = response["status"]["message"]
    assert message.startswith('GangPolicy "p" is invalid: ') and field in message and words in message


def test_a_reservation_on_one_of_the_levels_is_allowed() -> None:
    reserve = {
        "afterWaiting": "10m",
        "level": "topology.k8s.aws/ultraserver-id",
        "maxCheckpointableEvictions": 2,
    }
    out = review(request(policy(topologyName="aws", reservation=reserve)), validators())
    assert out["response"]["allowed"] is True


def test_a_topology_whose_levels_are_not_labels_is_refused() -> None:
    broken = {**TOPOLOGY, "spec": {"levels": [{"nodeLabel": ""}]}}
    response = review(request(policy(topologyName="aws")), validators({"aws": broken}))["response"]
    assert response["allowed"] is False
    assert "spec.topologyName" in response["status"]["message"]
    assert "nodeLabel" in response["status"]["message"]


def test_delete_and_unknown_kinds_are_allowed() -> None:
    assert review(request(policy(readyTimeout="-1s"), "DELETE"), validators())["response"]["allowed"]
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    response = review(request(other), validators())["response"]
    assert response["allowed"] and "ConfigMap" in response["warnings"][0]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}},
    ],
)
def test_what_is_not_an_admission_review_is_an_input_error(body: dict[str, Any]) -> None:
    with pytest.raises(InputError):
        review(body, validators())


def test_bind_mode_podgroup_is_refused_where_the_api_server_serves_no_podgroups() -> None:
    assert review(request(policy(bindMode="PodGroup")), validators())["response"]["allowed"] is True
    out = review(request(policy(bindMode="PodGroup")), validators(pod_groups=False))["response"]
    assert out["allowed"] is False and out["status"]["code"] == 422
    message = out["status"]["message"]
    assert message.startswith('GangPolicy "p" is invalid: spec.bindMode: PodGroup needs the PodGroup API')
    assert "GenericWorkload" in message and "or choose bindMode Ungate" in message
    # Other modes never ask.
    assert review(request(policy(bindMode="Ungate")), validators(pod_groups=False))["response"]["allowed"]


def _ungate_pod(mode: str = "Ungate", **spec: Any) -> dict[str, Any]:
    labels = {"gangplugin.io/gang": "g", "gangplugin.io/bind-mode": mode}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels}, "spec": spec}


def _patch_of(out: dict[str, Any]) -> list[dict[str, Any]] | None:
    response = out["response"]
    assert response["allowed"] is True and response["uid"] == "u-1"
    if "patch" not in response:
        return None
    assert response["patchType"] == "JSONPatch"
    return list(orjson.loads(base64.b64decode(response["patch"])))


def test_an_ungate_gang_pod_is_created_behind_the_placement_gate() -> None:
    gate = {"name": "gangplugin.io/placement"}
    assert _patch_of(gate_review(request(_ungate_pod()))) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [gate]}
    ]
    # Another controller's gate stays; ours is added after it.
    other = _ungate_pod(schedulingGates=[{"name": "kueue.x-k8s.io/topology"}])
    assert _patch_of(gate_review(request(other))) == [
        {"op": "add", "path": "/spec/schedulingGates/-", "value": gate}
    ]


def test_a_podgroup_gang_pod_is_gated_and_put_in_its_gangs_podgroup() -> None:
    gate = {"name": "gangplugin.io/placement"}
    group = {"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "g"}}
    assert _patch_of(gate_review(request(_ungate_pod("PodGroup")))) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [gate]},
        group,
    ]
    # Gated already (a reinvocation): only the group; a group it names already stays.
    gated = _ungate_pod("PodGroup", schedulingGates=[gate])
    assert _patch_of(gate_review(request(gated))) == [group]
    own = _ungate_pod("PodGroup", schedulingGroup={"podGroupName": "mine"})
    assert _patch_of(gate_review(request(own))) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [gate]}
    ]
    # Ungate pods get no group; a pod created bound gets neither.
    assert "schedulingGroup" not in str(_patch_of(gate_review(request(_ungate_pod()))))
    assert _patch_of(gate_review(request(_ungate_pod("PodGroup", nodeName="n1")))) is None


@pytest.mark.parametrize(
    "pod",
    [
        _ungate_pod(schedulingGates=[{"name": "gangplugin.io/placement"}]),  # gated already
        _ungate_pod("Extender"),
        _ungate_pod(nodeName="n1"),  # created bound: a gate is not allowed
        {**_ungate_pod(), "metadata": {"name": "p", "labels": {"gangplugin.io/bind-mode": "Ungate"}}},
        {**_ungate_pod(), "metadata": {"name": "p", "labels": {"gangplugin.io/gang": "g"}}},
        {"kind": "Pod", "metadata": {"name": "p", "labels": "not a mapping"}, "spec": {}},
    ],
)
def test_other_pods_pass_untouched(pod: dict[str, Any]) -> None:
    assert _patch_of(gate_review(request(pod))) is None


def test_only_creation_is_gated_and_a_non_review_is_an_error() -> None:
    assert _patch_of(gate_review(request(_ungate_pod(), operation="UPDATE"))) is None
    with pytest.raises(InputError, match="AdmissionReview"):
        gate_review({"kind": "Pod"})
