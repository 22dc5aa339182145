"""What a user is told about a gang: its phase, its topology domain, and the sentences of
`gangctl explain`. Pure: the adapters read Workloads, pods and nodes and pass plain values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gangplugin.core.states import CheckState


class Phase(StrEnum):
    QUEUED = "Queued"  # no quota reserved yet
    PENDING = "Pending"  # quota reserved, the gang check (or, for a pod gang, its nodes) not there yet
    ADMITTED = "Admitted"  # admitted (a pod gang: every pod bound), not every pod Ready
    RUNNING = "Running"  # every pod Ready
    EVICTED = "Evicted"  # evicted and requeued; waits to be admitted again
    DEACTIVATED = "Deactivated"  # spec.active false: Kueue will not admit it until reactivated
    REJECTED = "Rejected"  # the check rejected it (the Workload cannot be used)
    FINISHED = "Finished"


#: Phases a gang leaves only through a user's action.
FINAL_PHASES = frozenset({Phase.DEACTIVATED, Phase.REJECTED, Phase.FINISHED})


@dataclass(frozen=True, slots=True)
class Pods:
    """Active (not terminating, not finished) pods of a gang, counted."""

    total: int
    bound: int = 0
    ready: int = 0


@dataclass(frozen=True, slots=True)
class WorkloadState:
    """The Workload conditions and check state the phase depends on."""

    active: bool = True
    finished: bool = False
    quota_reserved: bool = False
    admitted: bool = False
    evicted: bool = False
    check_state: CheckState | None = None  # None: no check entry yet


def workload_phase(state: WorkloadState, pods: Pods) -> Phase:
    """Kueue's conditions first (they say what Kueue will do), then the pods."""
    if state.finished:
        return Phase.FINISHED
    if state.check_state is CheckState.REJECTED:
        return Phase.REJECTED
    if not state.active:
        return Phase.DEACTIVATED
    if state.evicted or state.check_state is CheckState.RETRY:
        return Phase.EVICTED  # Kueue resets Evicted when quota is reserved again
    if state.admitted:
        return Phase.RUNNING if pods.total and pods.ready >= pods.total else Phase.ADMITTED
    return Phase.PENDING if state.quota_reserved else Phase.QUEUED


def pod_gang_phase(pods: Pods) -> Phase:
    """A plain pod gang has no admission: it waits whole until every pod has a node."""
    if pods.bound < pods.total:
        return Phase.PENDING
    return Phase.RUNNING if pods.ready >= pods.total else Phase.ADMITTED


def gang_domain(
    pinned: Mapping[str, str], node_labels: Sequence[Mapping[str, str]], levels: Sequence[str]
) -> tuple[str, str] | None:
    """(level label, value) of a gang's domain: the level our check pinned it to (a nodeSelector
    over a topology label), else the narrowest level every bound pod's node shares."""
    for level in reversed(levels):
        if pinned.get(level):
            return level, pinned[level]
    if not node_labels:
        return None
    for level in reversed(levels):
        values = {labels.get(level) for labels in node_labels}
        if len(values) == 1 and (value := values.pop()):
            return level, value
    return None


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The placement engine's answer for a waiting gang over the cluster now."""

    fits: bool
    reason: str
    level: str | None = None
    domains: tuple[str, ...] = ()
    blocked_by: str | None = None  # sequential admission: the gang it waits for


def explain(
    phase: Phase,
    pods: Pods,
    *,
    queue: str = "",
    domain: tuple[str, str] | None = None,
    check_message: str = "",
    retry_count: int = 0,
    evaluation: Evaluation | None = None,
    worker: str = "",
    dispatch: str | None = None,
) -> str:
    """The sentences `gangctl explain` prints, most important first. `dispatch` (on a MultiKueue
    manager, for a gang that passes Kueue's MultiKueue check, not ours): what gangplugin's
    dispatcher last said about it; `worker`: the worker cluster it runs in or is nominated to."""
    retried = f"Retried {retry_count} time{'s' if retry_count != 1 else ''} so far." if retry_count else ""
    if dispatch is not None:
        return "\n".join(s for s in (*_dispatched(phase, worker, dispatch, check_message), retried) if s)
    out = [_headline(phase, pods, queue, domain, evaluation, check_message)]
    if check_message:
        out.append(f"Gang check: {check_message}")
    if retried:
        out.append(retried)
    if evaluation is not None:
        if evaluation.blocked_by is not None:
            out.append(f"Now: sequential admission waits for gang {evaluation.blocked_by} to be Ready.")
        elif evaluation.fits:
            at = (
                f" in {evaluation.level}={','.join(evaluation.domains)}"
                if evaluation.level and evaluation.domains
                else ""
            )
            out.append(f"Now: it would fit{at} ({evaluation.reason}); the next admission pass admits it.")
        else:
            out.append(f"Now: it does not fit: {evaluation.reason}")
    return "\n".join(out)


#: What is said of a gang in a phase that needs no more than its name.
_SAID = {
    Phase.EVICTED: "Evicted and requeued: it waits to be admitted again (with backoff).",
    Phase.DEACTIVATED: "Deactivated: Kueue will not admit it again until spec.active is set to true.",
    Phase.REJECTED: "Rejected by the gang check: fix the Workload and submit it again.",
    Phase.FINISHED: "Finished.",
}
#: The same on a MultiKueue manager, where the dispatcher and MultiKueue act instead.
_SAID_DISPATCHED = {
    **_SAID,
    Phase.EVICTED: "Evicted and requeued: the dispatcher chooses a worker again.",
    Phase.REJECTED: "Rejected by MultiKueue: fix the job and submit it again.",
}


def _headline(
    phase: Phase,
    pods: Pods,
    queue: str,
    domain: tuple[str, str] | None,
    evaluation: Evaluation | None,
    check_message: str,
) -> str:
    """The first sentence: where the gang stands (a check message says why quota is held)."""
    where = f" in {domain[0]}={domain[1]}" if domain else ""
    if phase is Phase.QUEUED:
        return f"Waiting for quota in ClusterQueue {queue or '(unknown)'}: Kueue has not reserved it yet."
    if phase is Phase.PENDING and evaluation is None and not check_message:
        return f"Waiting for all {pods.total} pods to get nodes ({pods.bound} have one)."
    if phase is Phase.PENDING:
        return "Quota is reserved; the gang check holds it until the whole gang fits."
    if phase is Phase.ADMITTED:
        return f"Admitted{where}: {pods.bound}/{pods.total} pods bound, {pods.ready} Ready."
    if phase is Phase.RUNNING:
        return f"Running{where}: all {pods.total} pods Ready."
    return _SAID[phase]


def _dispatched(phase: Phase, worker: str, dispatch: str, check_message: str) -> list[str]:
    """The sentences for a gang on a MultiKueue manager: its pods run in a worker cluster."""
    if phase is Phase.QUEUED:
        out = ["Waiting for quota on the manager: Kueue has not reserved it yet."]
    elif phase is Phase.PENDING and worker:
        out = [f"Nominated to worker cluster {worker}: its Kueue and gang check decide now."]
    elif phase is Phase.PENDING:
        out = ["Quota is reserved on the manager; no worker cluster has room for the whole gang yet."]
    elif phase in (Phase.ADMITTED, Phase.RUNNING):
        out = [f"Admitted in worker cluster {worker or '(unknown)'}: its pods run there."]
    else:
        out = [_SAID_DISPATCHED[phase]]
    if check_message:
        out.append(f"MultiKueue: {check_message}")
    if dispatch:
        out.append(f"Dispatcher: {dispatch}")
    return out
