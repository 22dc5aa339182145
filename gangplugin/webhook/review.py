"""Admission reviews (admission.k8s.io/v1): an AdmissionReview in, its response out.

Validating (`review`): the API server runs the CRD's schema and CEL rules first; what reaches
here passed them. The webhook adds what those cannot see: the same parsing the controllers do
(so an object the controllers would refuse is refused up front, with the field named), and
references to other objects (a GangPolicy's `topologyName` must name a Kueue Topology whose
levels are node labels, and its `reservation.level` must be one of those levels).

Mutating (`gate_review`): a pod of a bindMode Ungate or PodGroup gang is created behind the
placement scheduling gate, so kube-scheduler leaves it alone until the ungater pins it to its
node; a PodGroup gang's pod also names its native PodGroup (`spec.schedulingGroup`, which may
only be set at creation), the gang, which the ungater creates before it removes the gate.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gangplugin.core.errors import InputError
from gangplugin.core.names import BIND_MODE_LABEL, GANG_LABEL, PLACEMENT_GATE
from gangplugin.core.policy import PINNED_BIND_MODES, POD_GROUP_BIND_MODE
from gangplugin.core.topology import DEFAULT_LEVELS
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.records import levels_from_topology

# A validator raises InputError naming the field and the fix; it may read other objects.
Validator = Callable[[Mapping[str, Any]], None]
# Topology name -> the Topology object, or None when there is none.
TopologyOf = Callable[[str], Mapping[str, Any] | None]
# Whether the API server serves PodGroups (scheduling.k8s.io/v1beta1, GenericWorkload on).
PodGroupsServed = Callable[[], bool]

POD_GROUP_API_MISSING = (
    "PodGroup needs the PodGroup API (scheduling.k8s.io/v1beta1 podgroups), which this cluster "
    "does not serve: turn on the GenericWorkload feature gate on kube-apiserver (with "
    "--runtime-config=scheduling.k8s.io/v1beta1=true), kube-controller-manager and "
    "kube-scheduler, or choose bindMode Ungate"
)

REVIEW_VERSION = "admission.k8s.io/v1"


def gang_policy_validator(topology_of: TopologyOf, pod_groups_served: PodGroupsServed) -> Validator:
    def validate(obj: Mapping[str, Any]) -> None:
        policy = rec.gang_policy_from_k8s(obj)
        # Refused up front: without the API its gangs' PodGroups could never be created.
        if policy.bind_mode == POD_GROUP_BIND_MODE and not pod_groups_served():
            raise InputError("spec.bindMode", POD_GROUP_API_MISSING)
        levels = DEFAULT_LEVELS
        if policy.topology_name is not None:
            topo = topology_of(policy.topology_name)
            if topo is None:
                raise InputError(
                    "spec.topologyName",
                    f"Kueue Topology {policy.topology_name!r} does not exist; create it first, "
                    "or leave topologyName out for the default levels",
                )
            try:
                levels = levels_from_topology(topo, f"Topology {policy.topology_name}")
            except InputError as err:
                raise InputError("spec.topologyName", f"{err.field}: {err.problem}") from None
        widest = policy.reservation.level
        if widest is not None and widest not in levels:
            raise InputError(
                "spec.reservation.level",
                f"{widest!r} is not one of the policy's levels ({', '.join(levels)}); name one of them, "
                "or leave it out to reserve at any level",
            )

    return validate


def _request(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The review's request; InputError (the server answers 400) for anything else."""
    if body.get("apiVersion") != REVIEW_VERSION or body.get("kind") != "AdmissionReview":
        raise InputError("apiVersion/kind", f"expected an AdmissionReview of {REVIEW_VERSION}")
    request = body.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise InputError("request.uid", "an AdmissionReview request needs a uid")
    return request


def _answer(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": response}


def gate_patch(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON patch operations that put a bindMode Ungate or PodGroup gang pod behind the placement
    gate (and a PodGroup one in its gang's PodGroup); none for any other pod, or one created bound
    (gates need no nodeName). A gate or schedulingGroup the pod has already is kept."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = meta.get("labels") or {} if isinstance(meta, Mapping) else {}
    if not isinstance(labels, Mapping) or not isinstance(spec, Mapping):
        return []
    gang, mode = labels.get(GANG_LABEL), labels.get(BIND_MODE_LABEL)
    if not gang or mode not in PINNED_BIND_MODES or spec.get("nodeName"):
        return []
    ops: list[dict[str, Any]] = []
    gates = spec.get("schedulingGates")
    gate = {"name": PLACEMENT_GATE}
    if not isinstance(gates, list) or not gates:
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [gate]})
    elif not any(isinstance(g, Mapping) and g.get("name") == PLACEMENT_GATE for g in gates):
        ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": gate})
    if mode == POD_GROUP_BIND_MODE and not spec.get("schedulingGroup"):
        ops.append({"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": str(gang)}})
    return ops


def gate_review(body: Mapping[str, Any]) -> dict[str, Any]:
    """The mutating AdmissionReview response for a pod: always allowed, gated when it should be."""
    request = _request(body)
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    obj = request.get("object")
    if request.get("operation") == "CREATE" and isinstance(obj, Mapping):
        ops = gate_patch(obj)
        if ops:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(ops)).decode()
    return _answer(response)


def review(body: Mapping[str, Any], validators: Mapping[str, Validator]) -> dict[str, Any]:
    """The validating AdmissionReview response for `body`; `validators` by the object's kind. A
    request that is not an AdmissionReview raises InputError (the server answers 400)."""
    request = _request(body)
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    obj = request.get("object")
    if request.get("operation") in ("CREATE", "UPDATE") and isinstance(obj, Mapping):
        kind = str(obj.get("kind", ""))
        validate = validators.get(kind)
        if validate is None:
            response["warnings"] = [f"gangplugin's webhook does not validate kind {kind!r}"]
        else:
            try:
                validate(obj)
            except InputError as err:
                name = (obj.get("metadata") or {}).get("name", "")
                response["allowed"] = False
                response["status"] = {
                    "code": 422,
                    "reason": "Invalid",
                    "message": f'{kind} "{name}" is invalid: {err}',
                }
    return _answer(response)
