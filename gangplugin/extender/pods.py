"""Raw Pod dicts (watch events, the `Pod` of an extender call) to the core's `GangPod`.

Never raises: a pod whose gang metadata cannot be used becomes a record carrying `error`,
so one malformed pod neither stops the watch cache nor hides the other pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangplugin.core.errors import InputError
from gangplugin.core.gangplan import SIZE_FIELD, GangPod
from gangplugin.core.names import (
    BIND_MODE_LABEL,
    GANG_LABEL,
    GANG_SIZE_ANNOTATION,
    PLACEMENT_GATE,
    PREFERRED_TOPOLOGY_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_DOMAINS_ANNOTATION,
)
from gangplugin.core.placement.recorded import parse_slice_domains
from gangplugin.core.policy import PINNED_BIND_MODES
from gangplugin.core.topology import FINISHED_PHASES, HOSTNAME_LABEL
from gangplugin.kube.kueue_records import PODSET_LABEL
from gangplugin.kube.records import constraints_from_pod_spec, pod_requests, slice_size, slice_topology

# An Indexed Job's pod index (JobSet's Jobs are Indexed Jobs too).
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def _size(annotations: Mapping[str, Any]) -> int:
    raw = annotations.get(GANG_SIZE_ANNOTATION)
    if raw is None:
        raise InputError(SIZE_FIELD, f"is missing; a pod labelled {GANG_LABEL} needs its gang's pod count")
    text = str(raw).strip()
    if not text.isdigit() or int(text) < 1:
        raise InputError(SIZE_FIELD, f"{raw!r} is not a whole number >= 1")
    return int(text)


def _index(annotations: Mapping[str, Any]) -> int | None:
    raw = str(annotations.get(COMPLETION_INDEX_ANNOTATION) or "").strip()
    return int(raw) if raw.isdigit() else None


def _slice_domains(annotations: Mapping[str, Any]) -> tuple[str, ...]:
    raw = annotations.get(SLICE_DOMAINS_ANNOTATION)
    field = f"metadata.annotations.{SLICE_DOMAINS_ANNOTATION}"
    return () if raw is None else parse_slice_domains(raw, field)


def _gate_and_pin(labels: Mapping[str, Any], spec: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Whether an Ungate (or PodGroup) pod still waits behind the placement gate, and the node
    the ungater pinned it to once it does not (its kubernetes.io/hostname nodeSelector)."""
    if labels.get(BIND_MODE_LABEL) not in PINNED_BIND_MODES:
        return False, None
    gates = spec.get("schedulingGates") or []
    if any(isinstance(g, Mapping) and g.get("name") == PLACEMENT_GATE for g in gates):
        return True, None
    selector = spec.get("nodeSelector") or {}
    host = selector.get(HOSTNAME_LABEL) if isinstance(selector, Mapping) else None
    return False, str(host) if host else None


def _pod_group(spec: Mapping[str, Any]) -> str | None:
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return str(name) if name else None


def _without_pin(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The spec as the pod asked for it: the ungater's pin is `GangPod.pinned`, not one of the
    pod's own constraints, so a pinned pod keeps the signature of its gang's gated ones (a pod
    recreated after a node failure joins the slice its pinned peers started)."""
    selector = {k: v for k, v in (spec.get("nodeSelector") or {}).items() if k != HOSTNAME_LABEL}
    return {**spec, "nodeSelector": selector}


def gang_pod_from_k8s(obj: Mapping[str, Any]) -> GangPod:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    try:
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        if not isinstance(labels, Mapping) or not isinstance(annotations, Mapping):
            raise InputError("metadata", "labels and annotations must be mappings")
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            raise InputError("spec", "a pod needs a spec")
        gang = labels.get(GANG_LABEL)
        size = _size(annotations) if gang else None
        status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
        assert isinstance(status, Mapping)
        finished = status.get("phase") in FINISHED_PHASES
        gated, pinned = _gate_and_pin(labels, spec) if gang else (False, None)
        return GangPod(
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid") or ""),
            gang=str(gang) if gang else None,
            size=size,
            node=str(spec["nodeName"]) if spec.get("nodeName") else None,
            requests=pod_requests(spec),
            constraints=constraints_from_pod_spec(_without_pin(spec) if pinned else spec),
            required_topology=str(annotations.get(REQUIRED_TOPOLOGY_ANNOTATION) or "") or None,
            preferred_topology=str(annotations.get(PREFERRED_TOPOLOGY_ANNOTATION) or "") or None,
            slices=(slice_size(annotations, "metadata.annotations"), *slice_topology(annotations)),
            slice_domains=_slice_domains(annotations),
            index=_index(annotations),
            pod_set=str(labels[PODSET_LABEL]) if gang and labels.get(PODSET_LABEL) else None,
            finished=finished,
            deleting=bool(meta.get("deletionTimestamp")),
            gated=gated,
            pinned=pinned,
            bind_mode=str(labels[BIND_MODE_LABEL]) if gang and labels.get(BIND_MODE_LABEL) else None,
            pod_group=_pod_group(spec),
            replaceable=any(
                isinstance(o, Mapping) and o.get("controller") for o in meta.get("ownerReferences") or ()
            ),
        )
    except InputError as err:
        return GangPod(namespace, name, str(meta.get("uid") or ""), error=str(err))
