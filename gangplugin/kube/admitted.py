"""A Kueue Workload's gang as the core places it, and the domain the gang check admitted it to.

Read the same way by the gang check (what it promised an admitted gang) and by the gang
reservations the extender and the ungater share (what they keep plain pods off until the gang's
pods hold it), so both promise the same pods in the same nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gangplugin.core.admission import QueuedWorkload, admission_queue, gang_id, with_selector
from gangplugin.core.placement import Gang
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.informer import object_key
from gangplugin.kube.records import gang_from_k8s


def workload_gang(wl: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]]) -> Gang:
    """The Workload's gang, named by its gang id, each podset kept to the nodes of the
    ResourceFlavors Kueue assigned it. InputError when its podsets cannot be used."""
    gang = gang_from_k8s(wl)
    gang = Gang(gang.podsets, gang_id(wl["metadata"]["name"]))
    for podset, labels in rec.flavor_selector(wl, flavors).items():
        gang = with_selector(gang, labels, [podset])
    return gang


def in_domain(gang: Gang, updates: Sequence[Mapping[str, Any]]) -> Gang:
    """The gang with the nodeSelector of each of its podSetUpdates (the domain the check chose)."""
    for update in updates:
        gang = with_selector(gang, update.get("nodeSelector") or {}, [str(update.get("name"))])
    return gang


def holds_capacity(wl: Mapping[str, Any], state: Mapping[str, Any]) -> bool:
    """Whether the Workload holds the capacity the check promised it (`state`: the check's
    entry in its status), as the admission pass's own `admission_queue` counts it."""
    one = QueuedWorkload(
        object_key(dict(wl)),
        None,
        str(state.get("state", "")),
        rec.is_true(wl, "QuotaReserved"),
        rec.is_true(wl, "Finished"),
        rec.is_true(wl, "Evicted"),
    )
    return bool(admission_queue([one]).admitted)


def as_admitted(wl: Mapping[str, Any], check: str, updates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The Workload as the gang check's admission will make it: its check entry `check` Ready with
    `updates` as podSetUpdates (what the check writes), everything else as it is."""
    status = dict(wl.get("status") or {})
    entries = []
    for entry in status.get("admissionChecks") or []:
        if entry.get("name") == check:
            entry = {**entry, "state": "Ready", "podSetUpdates": [dict(u) for u in updates]}
        entries.append(entry)
    status["admissionChecks"] = entries
    return {**wl, "status": status}
