"""Raw Kubernetes objects (dicts as parsed from YAML or JSON) to the core's slim records.

Used by `gangctl place` on `kubectl get -o yaml` files and by the extender and admission
controller on watch events, so it is plain dict access, no model classes. Every function
takes `field`, the path of the object in its source, and raises
`InputError(<field>.<sub-path>, problem)` for anything it cannot use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangplugin.core.eligibility import OPERATORS, PodConstraints, Requirement, Taint, Toleration
from gangplugin.core.errors import InputError
from gangplugin.core.keys import unknown_keys
from gangplugin.core.names import (
    KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    KUEUE_SLICE_SIZE_ANNOTATION,
    SLICE_PREFERRED_TOPOLOGY_ANNOTATION,
    SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
)
from gangplugin.core.names import PREFERRED_TOPOLOGY_ANNOTATION as PREFERRED_ANNOTATION
from gangplugin.core.names import REQUIRED_TOPOLOGY_ANNOTATION as REQUIRED_ANNOTATION
from gangplugin.core.placement import Gang, PlacementPolicy, PodSet
from gangplugin.core.resources import parse_resources
from gangplugin.core.topology import FINISHED_PHASES, BoundPod, Node, validate_levels

KUEUE_VERSIONS = ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")
_EMPTY: Mapping[str, Any] = {}


def _map(value: object, field: str) -> Mapping[str, Any]:
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise InputError(field, "must be a mapping")
    return value


def _list(value: object, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(field, "must be a list")
    return value


def _str_map(value: object, field: str) -> dict[str, str]:
    return {str(k): "" if v is None else str(v) for k, v in _map(value, field).items()}


def items_of(obj: object, kind: str, field: str = "") -> list[tuple[str, Mapping[str, Any]]]:
    """The objects of a `v1 List` / `<Kind>List` (or one bare object of `kind`), with their fields."""
    top = _map(obj, field or "document")
    prefix = f"{field}." if field else ""
    if top.get("kind") == kind:
        return [(field or kind, top)]
    if "items" not in top:
        raise InputError(field or "kind", f"expected a List of {kind} objects or one {kind}")
    items = _list(top.get("items"), f"{prefix}items")
    out = []
    for i, item in enumerate(items):
        f = f"{prefix}items[{i}]"
        m = _map(item, f)
        if m.get("kind", kind) != kind:
            raise InputError(f"{f}.kind", f"expected {kind}, found {m.get('kind')!r}")
        out.append((f, m))
    return out


# -- nodes -------------------------------------------------------------------------------------


def node_from_k8s(obj: Mapping[str, Any], field: str = "node") -> Node:
    meta = _map(obj.get("metadata"), f"{field}.metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(f"{field}.metadata.name", "a node needs a name")
    spec = _map(obj.get("spec"), f"{field}.spec")
    status = _map(obj.get("status"), f"{field}.status")
    alloc_field = f"{field}.status.allocatable"
    raw_alloc = status.get("allocatable")
    if raw_alloc is None:
        raw_alloc, alloc_field = status.get("capacity"), f"{field}.status.capacity"
    taints = []
    for i, t in enumerate(_list(spec.get("taints"), f"{field}.spec.taints")):
        tm = _map(t, f"{field}.spec.taints[{i}]")
        taints.append(Taint(str(tm.get("key", "")), str(tm.get("value") or ""), str(tm.get("effect", ""))))
    ready = False
    for i, c in enumerate(_list(status.get("conditions"), f"{field}.status.conditions")):
        cm = _map(c, f"{field}.status.conditions[{i}]")
        if cm.get("type") == "Ready":
            ready = cm.get("status") == "True"
    return Node(
        name=name,
        labels=_str_map(meta.get("labels"), f"{field}.metadata.labels"),
        allocatable=parse_resources(raw_alloc, alloc_field),
        taints=tuple(taints),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable", False)),
    )


def nodes_from_k8s(obj: object, field: str = "") -> list[Node]:
    """Nodes from `kubectl get nodes -o yaml` output (a List) or one Node."""
    return [node_from_k8s(m, f) for f, m in items_of(obj, "Node", field)]


# -- pods ----------------------------------------------------------------------------------------


def _container_requests(c: Mapping[str, Any], field: str) -> dict[str, int]:
    res = _map(c.get("resources"), f"{field}.resources")
    out = parse_resources(res.get("limits"), f"{field}.resources.limits")  # requests default to limits
    out.update(parse_resources(res.get("requests"), f"{field}.resources.requests"))
    return out


def pod_requests(spec: Mapping[str, Any], field: str = "spec") -> dict[str, int]:
    """Effective requests of a pod, as the scheduler computes them: the sum of the containers
    (plus restartable init containers, i.e. sidecars), or the largest init container step if
    larger, plus `spec.overhead`. Zero amounts are dropped."""
    total: dict[str, int] = {}
    for i, c in enumerate(_list(spec.get("containers"), f"{field}.containers")):
        for r, q in _container_requests(
            _map(c, f"{field}.containers[{i}]"), f"{field}.containers[{i}]"
        ).items():
            total[r] = total.get(r, 0) + q
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, c in enumerate(_list(spec.get("initContainers"), f"{field}.initContainers")):
        f = f"{field}.initContainers[{i}]"
        cm = _map(c, f)
        req = _container_requests(cm, f)
        if cm.get("restartPolicy") == "Always":
            for r, q in req.items():
                sidecars[r] = sidecars.get(r, 0) + q
            step = dict(sidecars)
        else:
            step = {r: q + sidecars.get(r, 0) for r, q in req.items()}
            for r, q in sidecars.items():
                step.setdefault(r, q)
        for r, q in step.items():
            if q > init_peak.get(r, 0):
                init_peak[r] = q
    for r, q in sidecars.items():
        total[r] = total.get(r, 0) + q
    for r, q in init_peak.items():
        if q > total.get(r, 0):
            total[r] = q
    for r, q in parse_resources(spec.get("overhead"), f"{field}.overhead").items():
        total[r] = total.get(r, 0) + q
    return {r: q for r, q in total.items() if q}


def bound_pod_from_k8s(obj: Mapping[str, Any], field: str = "pod") -> BoundPod | None:
    """The pod as it holds node capacity, or None if it is not bound or has finished."""
    spec = _map(obj.get("spec"), f"{field}.spec")
    node_name = spec.get("nodeName")
    phase = str(_map(obj.get("status"), f"{field}.status").get("phase", ""))
    if not node_name or phase in FINISHED_PHASES:
        return None
    meta = _map(obj.get("metadata"), f"{field}.metadata")
    return BoundPod(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        node_name=str(node_name),
        requests=pod_requests(spec, f"{field}.spec"),
        phase=phase,
    )


def bound_pods_from_k8s(obj: object, field: str = "") -> list[BoundPod]:
    """Active bound pods from `kubectl get pods -A -o yaml` output (a List) or one Pod."""
    out = []
    for f, m in items_of(obj, "Pod", field):
        pod = bound_pod_from_k8s(m, f)
        if pod is not None:
            out.append(pod)
    return out


# -- pod templates and gangs ---------------------------------------------------------------------


def _requirement(obj: object, field: str, match_field: bool) -> Requirement:
    m = _map(obj, field)
    key, op = m.get("key"), m.get("operator")
    if not isinstance(key, str) or not key:
        raise InputError(f"{field}.key", "is required")
    if op not in OPERATORS:
        raise InputError(f"{field}.operator", f"{op!r} is not one of {', '.join(sorted(OPERATORS))}")
    values = tuple(str(v) for v in _list(m.get("values"), f"{field}.values"))
    if op in ("In", "NotIn") and not values:
        raise InputError(f"{field}.values", f"{op} needs at least one value")
    if op in ("Exists", "DoesNotExist") and values:
        raise InputError(f"{field}.values", f"{op} takes no values")
    if op in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
        raise InputError(f"{field}.values", f"{op} needs exactly one integer value")
    return Requirement(key, str(op), values, match_field)


def constraints_from_pod_spec(spec: Mapping[str, Any], field: str = "spec") -> PodConstraints:
    tolerations = []
    for i, t in enumerate(_list(spec.get("tolerations"), f"{field}.tolerations")):
        tm = _map(t, f"{field}.tolerations[{i}]")
        op = tm.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise InputError(f"{field}.tolerations[{i}].operator", f"{op!r} is not Equal or Exists")
        tolerations.append(
            Toleration(
                str(tm.get("key") or ""), str(op), str(tm.get("value") or ""), str(tm.get("effect") or "")
            )
        )
    selector = tuple(sorted(_str_map(spec.get("nodeSelector"), f"{field}.nodeSelector").items()))
    terms: tuple[tuple[Requirement, ...], ...] | None = None
    na_field = f"{field}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = _map(spec.get("affinity"), f"{field}.affinity")
    node_affinity = _map(affinity.get("nodeAffinity"), f"{field}.affinity.nodeAffinity")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        parsed = []
        for i, term in enumerate(
            _list(_map(required, na_field).get("nodeSelectorTerms"), f"{na_field}.nodeSelectorTerms")
        ):
            tf = f"{na_field}.nodeSelectorTerms[{i}]"
            tm = _map(term, tf)
            reqs = [
                _requirement(e, f"{tf}.matchExpressions[{j}]", False)
                for j, e in enumerate(_list(tm.get("matchExpressions"), f"{tf}.matchExpressions"))
            ]
            reqs += [
                _requirement(e, f"{tf}.matchFields[{j}]", True)
                for j, e in enumerate(_list(tm.get("matchFields"), f"{tf}.matchFields"))
            ]
            parsed.append(tuple(reqs))
        terms = tuple(parsed)
    return PodConstraints(selector, terms, tuple(tolerations))


def _slice_count(raw: object, field: str) -> int:
    text = str(raw).strip()
    if isinstance(raw, bool) or not text.isdigit() or int(text) < 1:
        raise InputError(field, f"{raw!r} is not a whole number >= 1 (the pods per slice)")
    return int(text)


def slice_size(annotations: Mapping[str, Any], field: str) -> int | None:
    """`gangplugin.io/slice-size` (or Kueue's `podset-slice-size`) as a whole number >= 1;
    `field`: the annotations' path."""
    for name in (SLICE_SIZE_ANNOTATION, KUEUE_SLICE_SIZE_ANNOTATION):
        raw = annotations.get(name)
        if raw is not None:
            return _slice_count(raw, f"{field}.{name}")
    return None


def slice_topology(annotations: Mapping[str, Any], default: object = None) -> tuple[str | None, str | None]:
    """(required, preferred) slice level labels from the annotations (ours, then Kueue's)."""
    required = (
        annotations.get(SLICE_REQUIRED_TOPOLOGY_ANNOTATION)
        or annotations.get(KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION)
        or default
    )
    preferred = annotations.get(SLICE_PREFERRED_TOPOLOGY_ANNOTATION)
    return (str(required) if required else None, str(preferred) if preferred else None)


def podset_from_template(
    name: str,
    count: object,
    template: object,
    field: str,
    count_field: str,
    topology_request: Mapping[str, Any] = _EMPTY,
) -> PodSet:
    """A podset from a PodTemplateSpec. The topology annotations (gang level and slices) win over
    a Kueue topologyRequest (`required`, `preferred`, `podSetSliceRequiredTopology`, `podSetSliceSize`)."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise InputError(count_field, f"{count!r} is not a whole number")
    if count < 1:
        raise InputError(count_field, f"must be at least 1, not {count}")
    tm = _map(template, field)
    meta = _map(tm.get("metadata"), f"{field}.metadata")
    annotations = _str_map(meta.get("annotations"), f"{field}.metadata.annotations")
    labels = _str_map(meta.get("labels"), f"{field}.metadata.labels")
    spec = _map(tm.get("spec"), f"{field}.spec")
    required = annotations.get(REQUIRED_ANNOTATION) or topology_request.get("required")
    preferred = annotations.get(PREFERRED_ANNOTATION) or topology_request.get("preferred")
    slice_required, slice_preferred = slice_topology(
        annotations, topology_request.get("podSetSliceRequiredTopology")
    )
    size = slice_size(annotations, f"{field}.metadata.annotations")
    if size is None and topology_request.get("podSetSliceSize") is not None:
        tr_field = f"{field.rsplit('.template', 1)[0]}.topologyRequest.podSetSliceSize"
        size = _slice_count(topology_request["podSetSliceSize"], tr_field)
    return PodSet(
        name=name,
        count=count,
        requests=pod_requests(spec, f"{field}.spec"),
        constraints=constraints_from_pod_spec(spec, f"{field}.spec"),
        required_topology=str(required) if required else None,
        preferred_topology=str(preferred) if preferred else None,
        slice_size=size,
        slice_required_topology=slice_required,
        slice_preferred_topology=slice_preferred,
        unknown_keys=unknown_keys(annotations) + unknown_keys(labels, "metadata.labels"),
    )


def gang_from_k8s(obj: object, field: str = "") -> Gang:
    """The gang of a Kueue Workload (v1beta1/v1beta2, `spec.podSets`). The jobs Kueue makes
    Workloads of are read by `job_records`."""
    top = _map(obj, field or "document")
    p = f"{field}." if field else ""
    kind, api = top.get("kind"), top.get("apiVersion")
    meta = _map(top.get("metadata"), f"{p}metadata")
    name = str(meta.get("name", ""))
    spec = _map(top.get("spec"), f"{p}spec")
    if kind == "Workload":
        if api not in KUEUE_VERSIONS:
            raise InputError(f"{p}apiVersion", f"{api!r} is not one of {', '.join(KUEUE_VERSIONS)}")
        raw = _list(spec.get("podSets"), f"{p}spec.podSets")
        if not raw:
            raise InputError(f"{p}spec.podSets", "a Workload needs at least one podset")
        podsets = []
        seen: set[str] = set()
        for i, ps in enumerate(raw):
            f = f"{p}spec.podSets[{i}]"
            m = _map(ps, f)
            ps_name = m.get("name")
            if not isinstance(ps_name, str) or not ps_name:
                raise InputError(f"{f}.name", "each podset needs a name")
            if ps_name in seen:
                raise InputError(f"{f}.name", f"podset {ps_name!r} appears twice")
            seen.add(ps_name)
            tr = _map(m.get("topologyRequest"), f"{f}.topologyRequest")
            podsets.append(
                podset_from_template(
                    ps_name, m.get("count", 1), m.get("template"), f"{f}.template", f"{f}.count", tr
                )
            )
        return Gang(tuple(podsets), name)
    raise InputError(f"{p}kind", f"{kind!r} is not a Kueue Workload")


# -- Kueue Topology and GangPolicy --------------------------------------------------------------------


def levels_from_topology(obj: object, field: str = "") -> tuple[str, ...]:
    """The node labels of a Kueue Topology's `spec.levels`, widest first."""
    top = _map(obj, field or "document")
    p = f"{field}." if field else ""
    if top.get("kind") != "Topology" or top.get("apiVersion") not in KUEUE_VERSIONS:
        raise InputError(f"{p}kind", f"expected a Topology of {' or '.join(KUEUE_VERSIONS)}")
    levels = []
    for i, lv in enumerate(_list(_map(top.get("spec"), f"{p}spec").get("levels"), f"{p}spec.levels")):
        label = _map(lv, f"{p}spec.levels[{i}]").get("nodeLabel")
        if not isinstance(label, str) or not label:
            raise InputError(f"{p}spec.levels[{i}].nodeLabel", "each level needs a nodeLabel")
        levels.append(label)
    return validate_levels(levels, f"{p}spec.levels")


def topology_name(obj: object) -> str | None:
    name = _map(obj, "document").get("metadata")
    return str(name.get("name")) if isinstance(name, Mapping) and name.get("name") else None


def policy_from_k8s(obj: object, field: str = "") -> tuple[PlacementPolicy, str | None]:
    """A GangPolicy's placement part: (PlacementPolicy(sparesPerUltraServer), spec.topologyName)."""
    top = _map(obj, field or "document")
    p = f"{field}." if field else ""
    if top.get("kind") != "GangPolicy" or top.get("apiVersion") != "gangplugin.io/v1alpha1":
        raise InputError(f"{p}kind", "expected a GangPolicy of gangplugin.io/v1alpha1")
    spec = _map(top.get("spec"), f"{p}spec")
    spares = spec.get("sparesPerUltraServer", 0)
    if isinstance(spares, bool) or not isinstance(spares, int) or spares < 0:
        raise InputError(f"{p}spec.sparesPerUltraServer", f"{spares!r} is not a whole number >= 0")
    name = spec.get("topologyName")
    return PlacementPolicy(spares), str(name) if name else None
