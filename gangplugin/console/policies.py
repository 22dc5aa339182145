"""GangPolicies as the console shows and edits them: the settings in plain words, the form's
values, the one merge patch an edit sends (as the user, so the API server's schema and
gangplugin's validating webhook judge it, and it applies whole or not at all), and the field
an error names. Pure; the settings are read by the same parser the controllers use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gangplugin.console.model import PolicyField, PolicySettings
from gangplugin.core.durations import format_duration
from gangplugin.core.errors import InputError
from gangplugin.core.names import ADMISSION_CHECK_CONTROLLER
from gangplugin.core.policy import (
    ADMISSION_MODES,
    BIND_MODES,
    NODE_FAILURE_MODES,
    PREEMPTION_MODES,
    TIMESTAMPS,
    GangPolicy,
    backoff_seconds,
)
from gangplugin.kube import kueue_records as rec

JSON = dict[str, Any]
#: The fields a form offers as a choice, with their choices.
CHOICES: dict[PolicyField, tuple[str, ...]] = {
    PolicyField.ADMISSION: ADMISSION_MODES,
    PolicyField.NODE_FAILURE: NODE_FAILURE_MODES,
    PolicyField.REQUEUE_TIMESTAMP: TIMESTAMPS,
    PolicyField.PREEMPTION: PREEMPTION_MODES,
    PolicyField.BIND_MODE: BIND_MODES,
}
#: What each field is, as HyperPod's console names the setting.
LABELS: dict[PolicyField, str] = {
    PolicyField.READY_TIMEOUT: "Time for every pod to be Ready",
    PolicyField.UNSCHEDULED_TIMEOUT: "Time for every pod to get a node",
    PolicyField.RECOVERY_TIMEOUT: "Time to recover from a lost node",
    PolicyField.ADMISSION: "Admission (Sequential: one at a time)",
    PolicyField.NODE_FAILURE: "When a node fails",
    PolicyField.SPARES: "Spare nodes per UltraServer",
    PolicyField.MAX_REPLACED: "Nodes replaced at once, at most",
    PolicyField.REQUEUE_TIMESTAMP: "Backoff counted from",
    PolicyField.BACKOFF_BASE: "First backoff (seconds)",
    PolicyField.BACKOFF_MAX: "Longest backoff (seconds)",
    PolicyField.BACKOFF_LIMIT: "Retries before deactivating",
    PolicyField.PREEMPTION: "Preemption",
    PolicyField.BIND_MODE: "Bind mode",
    PolicyField.TOPOLOGY: "Kueue Topology (level order)",
}
#: The fields that hold whole numbers.
NUMBERS = frozenset(
    {
        PolicyField.SPARES,
        PolicyField.MAX_REPLACED,
        PolicyField.BACKOFF_BASE,
        PolicyField.BACKOFF_MAX,
        PolicyField.BACKOFF_LIMIT,
    }
)
#: Backoff steps the plain words spell out before "...".
SHOWN_STEPS = 4


def _at(obj: Mapping[str, Any], path: str) -> object:
    value: object = obj
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def form_values(obj: Mapping[str, Any]) -> tuple[tuple[PolicyField, str], ...]:
    """Each form field's value as the object holds it ("" when unset)."""
    return tuple((f, "" if (v := _at(obj, f.value)) is None else str(v)) for f in PolicyField)


def _backoff(policy: GangPolicy) -> str:
    rq = policy.requeue
    steps = [format_duration(backoff_seconds(rq, n)) for n in range(1, SHOWN_STEPS + 1)]
    limit = (
        "it is retried forever"
        if rq.backoff_limit_count is None
        else f"after {rq.backoff_limit_count} retries it is deactivated"
    )
    since = "its eviction" if rq.timestamp == "Eviction" else "the Workload's creation"
    base = format_duration(rq.backoff_base_seconds)
    return (
        f"A requeued gang waits {', '.join(steps)}, ... (doubling from {base}, "
        f"at most {format_duration(rq.backoff_max_seconds)}, counted from {since}) before it is tried "
        f"again; {limit}."
    )


def plain_words(policy: GangPolicy) -> tuple[str, ...]:
    """The policy's settings as sentences an admin reads."""
    out = [
        f"Every pod of an admitted gang must be Ready within {format_duration(policy.ready_timeout)}, "
        "else the whole gang is evicted and requeued."
    ]
    if policy.unscheduled_timeout is None:
        out.append("No separate limit for the pods to get nodes: the ready timeout covers it.")
    else:
        out.append(
            f"Every pod must have a node within {format_duration(policy.unscheduled_timeout)} of "
            "admission, else the whole gang is requeued (a slow image pull does not count here)."
        )
    if policy.recovery_timeout <= 0:
        out.append("A running gang that loses a pod or a node is never evicted for it.")
    else:
        out.append(
            f"A running gang that loses a pod or a node gets {format_duration(policy.recovery_timeout)} "
            "to recover before it is evicted and requeued."
        )
    if policy.node_failure == "ReplaceFromSpare":
        most = (
            ""
            if policy.max_replaced_nodes is None
            else f" (at most {policy.max_replaced_nodes} at once; more requeue the gang whole)"
        )
        out.append(f"A failed node under a running gang is replaced from a spare of its UltraServer{most}.")
    else:
        out.append("A failed node under a running gang requeues the gang whole.")
    spares = policy.placement.spares_per_ultraserver
    out.append(
        f"{spares} spare node{'s' if spares != 1 else ''} per UltraServer {'are' if spares != 1 else 'is'} "
        "kept free for that."
        if spares
        else "No spare nodes are kept free in the UltraServers."
    )
    out.append(
        "Gangs are admitted one at a time: the next only once the one before is fully Ready."
        if policy.sequential
        else "Gangs are admitted in parallel, each as soon as it fits whole."
    )
    out.append(_backoff(policy))
    out.append(
        "It never preempts other gangs."
        if policy.preemption == "Never"
        else "It preempts lower-priority gangs (whole) as the ClusterQueue's preemption rules allow."
    )
    out.append(f"Pods reach their nodes by bind mode {policy.bind_mode}.")
    if policy.topology_name:
        out.append(f"Topology levels come from the Kueue Topology {policy.topology_name}.")
    return tuple(out)


def used_by(
    name: str, checks: Sequence[Mapping[str, Any]], cluster_queues: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """The ClusterQueues whose admission check of ours takes its parameters from policy `name`."""
    ours = set()
    for ac in checks:
        if (ac.get("spec") or {}).get("controllerName") != ADMISSION_CHECK_CONTROLLER:
            continue
        try:
            if rec.policy_name_of_check(ac) == name:
                ours.add(str(ac["metadata"]["name"]))
        except InputError:
            continue
    out = []
    for cq in cluster_queues:
        spec = cq.get("spec") or {}
        listed = {
            str(r.get("name"))
            for r in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        }
        listed |= {str(c) for c in spec.get("admissionChecks") or []}
        if listed & ours:
            out.append(str(cq["metadata"]["name"]))
    return tuple(sorted(out))


def policy_settings(
    obj: Mapping[str, Any], checks: Sequence[Mapping[str, Any]], cluster_queues: Sequence[Mapping[str, Any]]
) -> PolicySettings:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    try:
        sentences, problem = plain_words(rec.gang_policy_from_k8s(obj)), ""
    except InputError as err:
        sentences, problem = (), str(err)
    return PolicySettings(
        name=name,
        resource_version=str(meta.get("resourceVersion", "")),
        values=form_values(obj),
        sentences=sentences,
        problem=problem,
        used_by=used_by(name, checks, cluster_queues),
    )


def _typed(field: PolicyField, text: str) -> object:
    """The form's text as the object holds it: None (unset) when empty, a whole number for the
    number fields when it reads as one; anything else as written, for the API server to judge
    (it names the field)."""
    text = text.strip()
    if not text:
        return None
    if field in NUMBERS and text.lstrip("-").isdigit():
        return int(text)
    return text


def policy_patch(form: Mapping[str, str], resource_version: str) -> JSON:
    """One merge patch setting every form field (an empty one removes it, so the API server's
    default applies), conditional on the version the form was made from: it applies whole or is
    refused whole, and never overwrites a change made meanwhile."""
    spec: JSON = {}
    for field in PolicyField:
        if field.value not in form:
            continue
        *parents, leaf = field.value.split(".")[1:]
        into = spec
        for key in parents:
            into = into.setdefault(key, {})
        into[leaf] = _typed(field, form[field.value])
    return {"metadata": {"resourceVersion": resource_version}, "spec": spec}


def field_of(message: str) -> PolicyField | None:
    """The form field an API server's (or the webhook's) message names first."""
    found = [(message.find(f.value), -len(f.value), f) for f in PolicyField if f.value in message]
    return min(found)[2] if found else None
