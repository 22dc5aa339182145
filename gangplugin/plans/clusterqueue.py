"""Reading and writing the nominalQuota of a Kueue ClusterQueue (raw dicts, no decisions)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import orjson

from gangplugin.core.names import PLAN_QUOTA_ANNOTATION
from gangplugin.core.quota import QuotaKey
from gangplugin.kube.client import JSON


def nominal_quotas(cq: JSON) -> dict[QuotaKey, str]:
    """Every (flavor, resource) of the ClusterQueue with its nominalQuota."""
    out: dict[QuotaKey, str] = {}
    for group in cq.get("spec", {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                out[(flavor["name"], res["name"])] = str(res.get("nominalQuota", "0"))
    return out


def flavors(cq: JSON) -> set[str]:
    return {flavor for flavor, _ in nominal_quotas(cq)}


def managed_quotas(cq: JSON) -> dict[QuotaKey, str]:
    """The bookkeeping annotation: "flavor/resource" -> the value before plans managed it.
    A damaged annotation counts as empty (the next update rewrites it)."""
    text = (cq.get("metadata", {}).get("annotations") or {}).get(PLAN_QUOTA_ANNOTATION)
    if not text:
        return {}
    try:
        raw = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(raw, dict):
        return {}
    out: dict[QuotaKey, str] = {}
    for key, before in raw.items():
        flavor, sep, resource = str(key).partition("/")
        if sep:
            out[(flavor, resource)] = str(before)
    return out


def quota_patch(cq: JSON, values: Mapping[QuotaKey, str], managed: Mapping[QuotaKey, str]) -> JSON:
    """A merge patch that writes `values` and the bookkeeping, guarded by the resourceVersion
    (spec.resourceGroups is an atomic list: the whole list is written, so a concurrent change
    must fail with a conflict rather than be overwritten)."""
    groups: list[Any] = copy.deepcopy(cq.get("spec", {}).get("resourceGroups") or [])
    for group in groups:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                value = values.get((flavor["name"], res["name"]))
                if value is not None:
                    res["nominalQuota"] = value
    # "flavor/resource" keys: a resource name holds at most one "/", a flavor name none.
    note = orjson.dumps({f"{f}/{r}": v for (f, r), v in sorted(managed.items())}).decode()
    return {
        "metadata": {
            "resourceVersion": cq["metadata"]["resourceVersion"],
            "annotations": {PLAN_QUOTA_ANNOTATION: note},
        },
        "spec": {"resourceGroups": groups},
    }
