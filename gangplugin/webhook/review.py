"""Validating admission: an AdmissionReview (admission.k8s.io/v1) in, its response out.

The API server runs the CRD's schema and CEL rules first; what reaches here passed them. The
webhook adds what those cannot see: the same parsing the controllers do (so an object the
controllers would refuse is refused up front, with the field named), and references to other
objects (a GangPolicy's `topologyName` must name a Kueue Topology whose levels are node labels).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gangplugin.core.errors import InputError
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.records import levels_from_topology

# A validator raises InputError naming the field and the fix; it may read other objects.
Validator = Callable[[Mapping[str, Any]], None]
# Topology name -> the Topology object, or None when there is none.
TopologyOf = Callable[[str], Mapping[str, Any] | None]

REVIEW_VERSION = "admission.k8s.io/v1"


def gang_policy_validator(topology_of: TopologyOf) -> Validator:
    def validate(obj: Mapping[str, Any]) -> None:
        policy = rec.gang_policy_from_k8s(obj)
        if policy.topology_name is None:
            return
        topo = topology_of(policy.topology_name)
        if topo is None:
            raise InputError(
                "spec.topologyName",
                f"Kueue Topology {policy.topology_name!r} does not exist; create it first, "
                "or leave topologyName out for the default levels",
            )
        try:
            levels_from_topology(topo, f"Topology {policy.topology_name}")
        except InputError as err:
            raise InputError("spec.topologyName", f"{err.field}: {err.problem}") from None

    return validate


def review(body: Mapping[str, Any], validators: Mapping[str, Validator]) -> dict[str, Any]:
    """The AdmissionReview response for `body`; `validators` by the object's kind. A request
    that is not an AdmissionReview raises InputError (the server answers 400)."""
    if body.get("apiVersion") != REVIEW_VERSION or body.get("kind") != "AdmissionReview":
        raise InputError("apiVersion/kind", f"expected an AdmissionReview of {REVIEW_VERSION}")
    request = body.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise InputError("request.uid", "an AdmissionReview request needs a uid")
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
    return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "response": response}
