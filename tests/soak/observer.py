"""The soak's independent observer: what gang scheduling promises, checked from the Kubernetes
API alone.

It imports nothing of gangplugin (tests/unit/test_soak_observer.py scans its imports): it reads
pods, Workloads and nodes as plain dicts, as a person with kubectl would, and knows the product
only through its documented contracts (docs/architecture.md "Names and contracts",
docs/admission.md, docs/extender.md). Its input is a history, as a Jepsen checker's is: each
object state the API showed and when (`update`), the faults the injector caused (`fault`: the
nemesis's operations, so that a gang legitimately stalled by a dead kube-scheduler is not
blamed), the RSS of the `gangplugin serve` processes (`rss`) and the clock (`tick`). It is a
pure state machine (no I/O): `apiwatch` feeds it; unit tests feed it plain dicts.

The checks, each exactly what the product promises (docs/operations.md "The soak" explains them):

- **partly-bound**: from admission until it is first whole, a gang holds nodes for some of its
  pods only (0 < bound < size) and no more of them get bound for more than `PARTIAL_LIMIT`
  seconds: it is stuck part-bound, not being bound (a gang released pod by pod binds steadily,
  as fast as the machine lets it; one whose promised node a plain pod took stops until its
  requeue). Every bind mode runs here with gangplugin's extender in kube-scheduler, which keeps
  plain pods off capacity promised to a gang, so none is excused by the bind mode. Measured with
  the API's own timestamps (the pods' PodScheduled, whole seconds, hence `TIME_RESOLUTION`),
  minus the time a fault stalled binding for this gang (kube-scheduler or kube-apiserver down,
  no leader, a node of its domain failed, cordoned or tainted) and kube-scheduler's longest pod
  backoff after it (`SCHEDULER_BACKOFF`: a pod whose attempt failed during the fault is retried
  within it). After the gang was whole once, a lost pod is recovery: the watchdog's
  recoveryTimeout, and the stuck-gang check below. How long each release took, first pod bound
  to last, is a figure (`summary`), not a check: it follows the machine's load.
- **overpromised-ultraserver**: when a gang is admitted into an UltraServer, the pods promised
  there (every pod of each gang admitted into it, and the pods already bound on its nodes) need
  more GPUs than its usable nodes (Ready, schedulable, untainted) have. Judged as of the
  admission's own time, generously: a node usable at any moment from 10 s before to the
  evaluation counts, a pod bound in the 3 s before the decision does not (the admission pass
  decides on a cache that may lag that much).
- **admitted-twice**: within one admission (the gang check Ready, quota reserved, not evicted),
  the check's podSetUpdates move the gang to another domain; or more pods of the gang hold
  nodes at once than it has; or a pod created for this admission is bound outside the domain.
- **node-overcommitted**: the live pods bound to a node request more than its allocatable, for
  any resource, for `OVERCOMMIT_PERSIST` seconds (a true overcommit lasts; the persistence only
  keeps two watch streams' skew from looking like one).
- **stuck-gang**: a gang that neither runs (admitted, every pod Ready) nor carries a reason
  (not admitted, with a message: the gang check's, Kueue's QuotaReserved or Evicted, or
  deactivated; or not tried by Kueue yet while an older gang of its LocalQueue waits, its place
  in Kueue's queue being the reason) for `STUCK_LIMIT` seconds. An admitted gang that is not
  Running carries no reason: the soak's GangPolicies time out (readyTimeout,
  unscheduledTimeout, recoveryTimeout) well within it, so by then it must run or have been
  requeued. Time while a component was down (and `SCHEDULER_BACKOFF` after) does not count.
- **left-behind** (`check_drained`, `check_cleaned`): once the stream has drained, a pod still
  behind the placement gate, a pinned pod never bound, or an admitted Workload still carrying a
  hold (`gangplugin.io/preemption`, or a `gangplugin.io/backoff-until` that has passed); once
  every gang is deleted, any pod, Workload or PodGroup left, a ClusterQueue still marked as fed
  by plans that are gone (a `gangplugin.io/plan-quota` recording resources), or a node left
  tainted, cordoned or annotated by gangplugin.
- **rss-growth** (`finish`): a `gangplugin serve` process that lived `RSS_MIN_SPAN` seconds
  whose RSS, past its first `RSS_WARMUP` seconds, grew from the first half of its life to the
  second by more than `RSS_GROWTH_BYTES` and `RSS_GROWTH_RATIO` (a plateau is fine; a leak
  keeps climbing).
"""

from __future__ import annotations

import itertools
import statistics
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

JSON = dict[str, Any]

# The product's documented names (docs/architecture.md "Names and contracts"), restated here on
# purpose: the observer must not share code with what it checks.
GANG_LABEL = "gangplugin.io/gang"
BIND_MODE_LABEL = "gangplugin.io/bind-mode"
PLACEMENT_GATE = "gangplugin.io/placement"
PREEMPTION_ANNOTATION = "gangplugin.io/preemption"
BACKOFF_UNTIL_ANNOTATION = "gangplugin.io/backoff-until"
PLAN_QUOTA_ANNOTATION = "gangplugin.io/plan-quota"
ULTRASERVER = "topology.k8s.aws/ultraserver-id"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
PINNED_MODES = ("Ungate", "PodGroup")

PARTIAL_LIMIT = 5.0
TIME_RESOLUTION = 1.0  # the API's condition times are whole seconds
SCHEDULER_BACKOFF = 10.0  # kube-scheduler's podMaxBackoffSeconds (default; the local cluster keeps it)
STUCK_LIMIT = 120.0
OVERCOMMIT_PERSIST = 2.0
EXCESS_PERSIST = 2.0
PROMISE_DELAY = 3.0  # evaluate an admission once every watch has caught up with it
PROMISE_NODE_SLACK = 10.0
PROMISE_POD_SLACK = 3.0
RSS_MIN_SPAN = 360.0
RSS_WARMUP = 120.0
RSS_GROWTH_BYTES = 48 * 2**20
RSS_GROWTH_RATIO = 0.25
MAX_TICK = 5.0  # a stalled ticker counts no more than this per tick (never blames a gang for it)

# Fault scopes (Window.scope): what a fault stops.
ALL = "all"  # kube-apiserver down, or no gangplugin leader: nothing is decided or bound
BINDING = "binding"  # kube-scheduler down: nothing is bound
CONTROL = "control"  # Kueue or a gangplugin replica's webhook down: admissions and pod creations wait
NODES = "nodes"  # nodes NotReady, cordoned or tainted
GANG = "gang"  # pods of one gang deleted
NONE = "none"  # bad input: stops nothing


@dataclass(frozen=True, slots=True)
class Window:
    """A fault as history: what it stopped (`scope`), on which nodes or gang, from `start`
    until `end` (None while it lasts), in epoch seconds."""

    id: int
    kind: str
    scope: str
    start: float
    end: float | None = None
    nodes: tuple[str, ...] = ()
    gang: str | None = None

    def stalls_binding_of(self, gang: str, domain_nodes: Collection[str]) -> bool:
        if self.scope in (ALL, BINDING):
            return True
        if self.scope == GANG:
            return self.gang == gang
        return self.scope == NODES and any(n in domain_nodes for n in self.nodes)


@dataclass(frozen=True, slots=True)
class Violation:
    check: str
    at: float
    subject: str
    message: str
    evidence: tuple[JSON, ...] = ()

    def to_json(self) -> JSON:
        return {
            "check": self.check,
            "at": _iso(self.at),
            "subject": self.subject,
            "message": self.message,
            "evidence": list(self.evidence),
        }


# -- reading objects --------------------------------------------------------------------------


def parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def conditions(obj: Mapping[str, Any]) -> dict[str, JSON]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []}


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    return conditions(obj).get(kind, {}).get("status") == "True"


_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}


def quantity(value: Any) -> float:
    """A Kubernetes quantity ("500m", "64Gi", "4") as a number of its base unit."""
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).lstrip("+-").isdigit():
            return float(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return float(text)


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """What the scheduler charges a pod: its containers' requests summed, or the largest init
    container's where that is more, plus one pod."""
    spec = pod.get("spec") or {}
    total: dict[str, float] = {"pods": 1.0}
    for c in spec.get("containers") or []:
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, 0.0) + quantity(value)
    for c in spec.get("initContainers") or []:
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, 0.0), quantity(value))
    return total


def pod_gpus(pod: Mapping[str, Any]) -> float:
    return pod_requests(pod).get(GPU, 0.0)


def pod_live(pod: Mapping[str, Any]) -> bool:
    """Holds its node (the scheduler still counts a terminating pod until it is gone)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def pod_current(pod: Mapping[str, Any]) -> bool:
    """Live and not being deleted: a member of its gang's current admission."""
    return pod_live(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp")


def pod_node(pod: Mapping[str, Any]) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def pod_ready(pod: Mapping[str, Any]) -> bool:
    return is_true(pod, "Ready")


def bound_at(pod: Mapping[str, Any]) -> float | None:
    c = conditions(pod).get("PodScheduled") or {}
    return parse_time(c.get("lastTransitionTime")) if c.get("status") == "True" else None


def released_at(pod: Mapping[str, Any]) -> float | None:
    """When deleting the pod was asked for (deletionTimestamp is that plus the grace period)."""
    meta = pod.get("metadata") or {}
    at = parse_time(meta.get("deletionTimestamp"))
    return None if at is None else at - float(meta.get("deletionGracePeriodSeconds") or 0)


def pod_gates(pod: Mapping[str, Any]) -> list[str]:
    return [str(g.get("name")) for g in (pod.get("spec") or {}).get("schedulingGates") or []]


def node_usable(node: Mapping[str, Any]) -> bool:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []):
        return False
    return is_true(node, "Ready")


def node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def node_gpus(node: Mapping[str, Any]) -> float:
    return quantity(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0))


def gang_check(wl: Mapping[str, Any], names: Collection[str] | None = None) -> JSON | None:
    """The Workload's gang admission check state (the soak's ClusterQueues list one check)."""
    for check in (wl.get("status") or {}).get("admissionChecks") or []:
        if names is None or check.get("name") in names:
            return dict(check)
    return None


def workload_size(wl: Mapping[str, Any]) -> int:
    return sum(int(ps.get("count", 1)) for ps in (wl.get("spec") or {}).get("podSets") or [])


def workload_gpus(wl: Mapping[str, Any]) -> float:
    total = 0.0
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        per_pod = pod_gpus(ps.get("template") or {})
        total += per_pod * int(ps.get("count", 1))
    return total


def selectors(check: Mapping[str, Any] | None) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """The domain the check pinned each podset to (podSetUpdates' nodeSelectors)."""
    out = []
    for u in (check or {}).get("podSetUpdates") or []:
        out.append((str(u.get("name")), tuple(sorted((u.get("nodeSelector") or {}).items()))))
    return tuple(sorted(out))


def in_admission(wl: Mapping[str, Any], names: Collection[str] | None = None) -> bool:
    """Admitted by the gang check and not on its way out: what holds capacity for it."""
    check = gang_check(wl, names)
    return (
        check is not None
        and check.get("state") == "Ready"
        and is_true(wl, "QuotaReserved")
        and not is_true(wl, "Evicted")
        and not is_true(wl, "Finished")
        and (wl.get("spec") or {}).get("active", True) is not False
    )


def pod_brief(pod: Mapping[str, Any]) -> JSON:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    conds = conditions(pod)
    return {
        "pod": f"{meta.get('namespace')}/{meta.get('name')}",
        "uid": meta.get("uid"),
        "created": meta.get("creationTimestamp"),
        "node": spec.get("nodeName"),
        "pin": (spec.get("nodeSelector") or {}).get(HOSTNAME),
        "gates": pod_gates(pod),
        "phase": (pod.get("status") or {}).get("phase"),
        "deleting": meta.get("deletionTimestamp"),
        "scheduled": {k: conds.get("PodScheduled", {}).get(k) for k in ("status", "lastTransitionTime")},
        "ready": conds.get("Ready", {}).get("status"),
        "message": conds.get("PodScheduled", {}).get("message"),
    }


def workload_brief(wl: Mapping[str, Any]) -> JSON:
    meta = wl.get("metadata") or {}
    return {
        "workload": f"{meta.get('namespace')}/{meta.get('name')}",
        "uid": meta.get("uid"),
        "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if "gangplugin.io" in k},
        "active": (wl.get("spec") or {}).get("active", True),
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for c in (wl.get("status") or {}).get("conditions") or []
        ],
        "admissionChecks": [
            {
                k: c.get(k)
                for k in ("name", "state", "message", "lastTransitionTime", "podSetUpdates", "retryCount")
            }
            for c in (wl.get("status") or {}).get("admissionChecks") or []
        ],
    }


def node_brief(node: Mapping[str, Any]) -> JSON:
    spec = node.get("spec") or {}
    return {
        "node": (node.get("metadata") or {}).get("name"),
        "ready": conditions(node).get("Ready", {}).get("status"),
        "unschedulable": bool(spec.get("unschedulable")),
        "taints": [f"{t.get('key')}:{t.get('effect')}" for t in spec.get("taints") or []],
        ULTRASERVER: node_labels(node).get(ULTRASERVER),
        "allocatable": (node.get("status") or {}).get("allocatable"),
    }


def window_brief(w: Window) -> JSON:
    return {
        "fault": w.kind,
        "start": _iso(w.start),
        "end": _iso(w.end) if w.end is not None else None,
        "nodes": list(w.nodes),
        "gang": w.gang,
    }


# -- what is tracked per gang -------------------------------------------------------------------


@dataclass(slots=True)
class Admission:
    """One admission of a gang: from its check going Ready to its eviction or deletion."""

    number: int
    start: float  # the check's lastTransitionTime (API), else when seen
    domain: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    end: float | None = None
    whole_once: bool = False
    partial_start: float | None = None
    partial_pods: tuple[JSON, ...] = ()
    bind_times: set[float] = field(default_factory=set)  # PodScheduled of members while partial
    last_release: float | None = None
    reported_move: bool = False
    reported_outside: set[str] = field(default_factory=set)

    def ultraserver(self) -> str | None:
        values = {v for _, sel in self.domain for k, v in sel if k == ULTRASERVER}
        return next(iter(values)) if len(values) == 1 else None


@dataclass(slots=True)
class GangTrack:
    key: str  # namespace/workload (the gang label is the Workload's name)
    created: float | None
    size: int = 0
    gpus: float = 0.0
    job: str | None = None
    admissions: list[Admission] = field(default_factory=list)
    deleted: bool = False
    running: bool = False
    first_running: float | None = None
    rejected: bool = False
    evictions: dict[str, int] = field(default_factory=dict)
    unexplained_for: float = 0.0
    stuck_reported: bool = False
    excess_since: float | None = None
    excess_reported: bool = False

    @property
    def current(self) -> Admission | None:
        return self.admissions[-1] if self.admissions and self.admissions[-1].end is None else None


# -- the observer -------------------------------------------------------------------------------


class Observer:
    """Feed it the history (thread-safe); read `violations` and `summary()`."""

    def __init__(self, namespaces: Collection[str] | None = None, checks: Collection[str] | None = None):
        self.namespaces = set(namespaces) if namespaces is not None else None
        self.checks = set(checks) if checks is not None else None
        self._lock = threading.RLock()
        self.pods: dict[str, JSON] = {}
        self.workloads: dict[str, JSON] = {}
        self.nodes: dict[str, JSON] = {}
        self.gangs: dict[str, GangTrack] = {}
        self.windows: dict[int, Window] = {}
        self.violations: list[Violation] = []
        self.submitted: dict[str, float] = {}  # namespace/job -> when the stream created it
        self.rss_samples: dict[tuple[str, int], list[tuple[float, int]]] = {}
        self._gang_pods: dict[str, set[str]] = {}
        self._node_pods: dict[str, set[str]] = {}
        self._usable: dict[str, list[tuple[float, bool]]] = {}
        self._dirty_nodes: set[str] = set()
        self._overcommit_since: dict[str, float] = {}
        self._overcommit_reported: set[str] = set()
        self._promise_checks: list[tuple[float, str, int]] = []
        self._last_tick: float | None = None
        self.releases: list[float] = []  # seconds from a gang's first pod bound to its last

    # -- input ----------------------------------------------------------------------------------

    def update(self, kind: str, key: str, obj: JSON | None, now: float) -> None:
        """An object as the API showed it at `now` (None: deleted). `kind`: pods, workloads, nodes."""
        with self._lock:
            if kind == "pods":
                self._on_pod(key, obj, now)
            elif kind == "workloads":
                self._on_workload(key, obj, now)
            elif kind == "nodes":
                self._on_node(key, obj, now)

    def fault(self, window: Window) -> None:
        """A fault started (end None) or ended (the same id with its end)."""
        with self._lock:
            self.windows[window.id] = window

    def submission(self, namespace: str, job: str, at: float) -> None:
        with self._lock:
            self.submitted[f"{namespace}/{job}"] = at

    def rss(self, process: str, pid: int, rss_bytes: int, now: float) -> None:
        with self._lock:
            self.rss_samples.setdefault((process, pid), []).append((now, rss_bytes))

    def report(self, violation: Violation) -> None:
        """A violation found outside the observer (the injector's check of refused bad input)."""
        with self._lock:
            self.violations.append(violation)

    def tick(self, now: float) -> None:
        with self._lock:
            dt = 0.0 if self._last_tick is None else min(MAX_TICK, max(0.0, now - self._last_tick))
            self._last_tick = now
            self._run_promise_checks(now)
            for name in sorted(self._dirty_nodes):
                self._check_overcommit(name, now)
            for track in self.gangs.values():
                if not track.deleted:
                    self._check_stuck(track, dt, now)
                    self._check_excess(track, now)

    # -- pods -----------------------------------------------------------------------------------

    def _gang_of(self, pod: Mapping[str, Any]) -> str | None:
        meta = pod.get("metadata") or {}
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        return f"{meta.get('namespace')}/{gang}" if gang else None

    def _on_pod(self, key: str, obj: JSON | None, now: float) -> None:
        old = self.pods.pop(key, None)
        if obj is not None:
            self.pods[key] = obj
        for pod, add in ((old, False), (obj, True)):
            if pod is None:
                continue
            gang, node = self._gang_of(pod), pod_node(pod)
            if gang:
                (self._gang_pods.setdefault(gang, set()).add if add else self._gang_pods[gang].discard)(key)
            if node:
                (self._node_pods.setdefault(node, set()).add if add else self._node_pods[node].discard)(key)
                self._dirty_nodes.add(node)
        if old is not None and pod_current(old) and pod_node(old) and (obj is None or not pod_current(obj)):
            gang = self._gang_of(old)
            track = self.gangs.get(gang) if gang else None
            if track is not None and track.current is not None:
                at = released_at(obj or old) or now
                adm = track.current
                adm.last_release = at if adm.last_release is None else max(adm.last_release, at)
        for gang in {g for g in (self._gang_of(old or {}), self._gang_of(obj or {})) if g}:
            self._evaluate_gang(gang, now)

    def gang_pods(self, gang: str) -> list[JSON]:
        return [self.pods[k] for k in sorted(self._gang_pods.get(gang, ())) if k in self.pods]

    # -- nodes ----------------------------------------------------------------------------------

    def _on_node(self, name: str, obj: JSON | None, now: float) -> None:
        if obj is None:
            self.nodes.pop(name, None)
            usable = False
        else:
            self.nodes[name] = obj
            usable = node_usable(obj)
        history = self._usable.setdefault(name, [])
        if not history or history[-1][1] != usable:
            history.append((now, usable))
        self._dirty_nodes.add(name)

    def usable_during(self, name: str, start: float, end: float) -> bool:
        """Usable at some moment of [start, end]."""
        history = self._usable.get(name, [])
        state = False
        for at, usable in history:
            if at <= start:
                state = usable
            elif at <= end and usable:
                return True
        return state

    def _domain_nodes(self, admission: Admission | None) -> set[str]:
        """The nodes a gang's admission pinned it to (every node when it asked for no level)."""
        wanted = {k: v for _, sel in (admission.domain if admission else ()) for k, v in sel}
        return {
            n
            for n, node in self.nodes.items()
            if all(node_labels(node).get(k) == v for k, v in wanted.items())
        }

    def _check_overcommit(self, name: str, now: float) -> None:
        self._dirty_nodes.discard(name)
        node = self.nodes.get(name)
        if node is None:
            return
        pods = [self.pods[k] for k in sorted(self._node_pods.get(name, ())) if k in self.pods]
        pods = [p for p in pods if pod_live(p) and pod_node(p) == name]
        used: dict[str, float] = {}
        for pod in pods:
            for res, amount in pod_requests(pod).items():
                used[res] = used.get(res, 0.0) + amount
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        over = {
            res: (used.get(res, 0.0), quantity(cap))
            for res, cap in allocatable.items()
            if used.get(res, 0.0) > quantity(cap) + 1e-9
        }
        if not over:
            self._overcommit_since.pop(name, None)
            self._overcommit_reported.discard(name)
            return
        since = self._overcommit_since.setdefault(name, now)
        self._dirty_nodes.add(name)  # look again at the next tick
        if now - since >= OVERCOMMIT_PERSIST and name not in self._overcommit_reported:
            self._overcommit_reported.add(name)
            what = ", ".join(f"{res} {u:g} > {c:g}" for res, (u, c) in sorted(over.items()))
            self.violations.append(
                Violation(
                    "node-overcommitted",
                    now,
                    name,
                    f"node {name} over-committed for {now - since:.0f}s: {what} requested by "
                    f"{len(pods)} live pods bound to it",
                    (node_brief(node), *(pod_brief(p) for p in pods)),
                )
            )

    # -- workloads ------------------------------------------------------------------------------

    def _on_workload(self, key: str, obj: JSON | None, now: float) -> None:
        if self.namespaces is not None and key.split("/", 1)[0] not in self.namespaces:
            return
        track = self.gangs.get(key)
        if obj is None:
            self.workloads.pop(key, None)
            if track is not None:
                self._end_admission(track, now, now)
                track.deleted = True
            return
        meta = obj.get("metadata") or {}
        if track is None or track.deleted:
            owners = [o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job"]
            track = GangTrack(
                key, parse_time(meta.get("creationTimestamp")), job=owners[0] if owners else None
            )
            self.gangs[key] = track
        self.workloads[key] = obj
        track.size = workload_size(obj)
        track.gpus = workload_gpus(obj)
        check = gang_check(obj, self.checks)
        if (obj.get("spec") or {}).get("active", True) is False or (check or {}).get("state") == "Rejected":
            track.rejected = True
        adm = track.current
        if in_admission(obj, self.checks):
            domain = selectors(check)
            if adm is None:
                start = parse_time((check or {}).get("lastTransitionTime")) or now
                adm = Admission(len(track.admissions) + 1, start, domain)
                track.admissions.append(adm)
                track.running = False
                if adm.ultraserver() is not None:
                    self._promise_checks.append((now + PROMISE_DELAY, key, adm.number))
            elif domain != adm.domain and not adm.reported_move:
                adm.reported_move = True
                self.violations.append(
                    Violation(
                        "admitted-twice",
                        now,
                        key,
                        f"{key} admitted into another domain within one admission: "
                        f"{_domain_text(adm.domain)} -> {_domain_text(domain)}",
                        (workload_brief(obj),),
                    )
                )
        elif adm is not None:
            ev = conditions(obj).get("Evicted") or {}
            end = parse_time(ev.get("lastTransitionTime")) if ev.get("status") == "True" else None
            if end is None:
                end = parse_time((check or {}).get("lastTransitionTime")) or now
            self._end_admission(track, max(end, adm.start), now)
            if ev.get("status") == "True":
                reason = str(ev.get("reason") or "Evicted")
                track.evictions[reason] = track.evictions.get(reason, 0) + 1
        self._evaluate_gang(key, now)

    def _end_admission(self, track: GangTrack, end: float, now: float) -> None:
        adm = track.current
        if adm is None:
            return
        if adm.partial_start is not None:
            self._close_partial(track, adm, max(end, adm.partial_start), now)
        adm.end = end
        track.running = False

    # -- partly bound, running, admitted twice --------------------------------------------------

    def _evaluate_gang(self, key: str, now: float) -> None:
        track = self.gangs.get(key)
        adm = track.current if track is not None else None
        if track is None or adm is None:
            return
        pods = [p for p in self.gang_pods(key) if pod_current(p)]
        bound = [p for p in pods if pod_node(p)]
        track.excess_since = (track.excess_since or now) if len(bound) > track.size else None
        self._check_outside(track, adm, bound, now)
        ready = [p for p in bound if pod_ready(p)]
        track.running = track.size > 0 and len(ready) >= track.size
        if track.running and track.first_running is None:
            times = [parse_time(conditions(p).get("Ready", {}).get("lastTransitionTime")) for p in ready]
            track.first_running = max((t for t in times if t is not None), default=now)
        if adm.whole_once:
            return
        times = {t for p in bound if (t := bound_at(p)) is not None}
        if track.size and len(bound) >= track.size:
            adm.whole_once = True
            if adm.partial_start is not None:
                adm.partial_pods = tuple(pod_brief(p) for p in pods)
                adm.bind_times.update(times)
                self._close_partial(track, adm, max(max(times, default=now), adm.partial_start), now)
        elif bound:
            if adm.partial_start is None:
                adm.partial_start = min(times, default=now)
            adm.bind_times.update(times)
            adm.partial_pods = tuple(pod_brief(p) for p in pods)
        elif adm.partial_start is not None:
            self._close_partial(track, adm, max(adm.last_release or now, adm.partial_start), now)

    def _excused(self, gang: str, adm: Admission, start: float, end: float) -> tuple[float, list[Window]]:
        """Seconds of [start, end] that a fault stalled this gang's binding (plus the scheduler's
        pod backoff after it), and those faults."""
        domain = self._domain_nodes(adm)
        domain.update(n for p in adm.partial_pods if (n := p.get("node") or p.get("pin")))
        spans, seen = [], []
        for w in self.windows.values():
            if not w.stalls_binding_of(gang, domain):
                continue
            w_end = (w.end if w.end is not None else end) + SCHEDULER_BACKOFF
            lo, hi = max(start, w.start), min(end, w_end)
            if hi > lo:
                spans.append((lo, hi))
                seen.append(w)
        return _union_length(spans), seen

    def _close_partial(self, track: GangTrack, adm: Admission, end: float, now: float) -> None:
        """The partial interval [partial_start, end] is over: its longest stretch with no member
        bound, less what faults excuse, must stay within PARTIAL_LIMIT."""
        start = adm.partial_start
        adm.partial_start = None
        if start is None:
            return
        times = sorted({start, end} | {t for t in adm.bind_times if start <= t <= end})
        adm.bind_times.clear()
        self.releases.append(end - start)
        stall, since, until, faults = 0.0, start, start, []
        for a, b in itertools.pairwise(times):
            excused, seen = self._excused(track.key, adm, a, b)
            if (b - a) - excused > stall:
                stall, since, until, faults = (b - a) - excused, a, b, seen
        if stall <= PARTIAL_LIMIT + TIME_RESOLUTION:
            return
        bound = sum(1 for p in adm.partial_pods if p.get("node") and not p.get("deleting"))
        wl = self.workloads.get(track.key)
        mode = next(
            (
                v
                for p in self.gang_pods(track.key)
                if (v := ((p.get("metadata") or {}).get("labels") or {}).get(BIND_MODE_LABEL))
            ),
            "?",
        )
        self.violations.append(
            Violation(
                "partly-bound",
                now,
                track.key,
                f"{track.key} ({mode}, {track.size} pods, admission {adm.number}) partly bound with no "
                f"pod bound for {stall:.0f}s not excused by a fault, from {_iso(since)} to {_iso(until)} "
                f"(partly bound {end - start:.0f}s in all; {bound}/{track.size} bound when last seen "
                "partial)",
                (
                    *((workload_brief(wl),) if wl else ()),
                    *adm.partial_pods,
                    *(window_brief(w) for w in faults),
                ),
            )
        )

    def _check_outside(self, track: GangTrack, adm: Admission, bound: list[JSON], now: float) -> None:
        wanted = {k: v for _, sel in adm.domain for k, v in sel}
        if not wanted:
            return
        for pod in bound:
            created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
            node = self.nodes.get(pod_node(pod) or "")
            name = str((pod.get("metadata") or {}).get("name"))
            if node is None or created is None or created < adm.start - TIME_RESOLUTION:
                continue
            labels = node_labels(node)
            if all(labels.get(k) == v for k, v in wanted.items()) or name in adm.reported_outside:
                continue
            adm.reported_outside.add(name)
            self._admitted_twice(
                track,
                now,
                f"pod {name} of admission {adm.number} bound to {pod_node(pod)}, "
                f"outside the admitted domain {_domain_text(adm.domain)}",
                pod_brief(pod),
                node_brief(node),
            )

    def _check_excess(self, track: GangTrack, now: float) -> None:
        since = track.excess_since
        if since is None or track.excess_reported or now - since < EXCESS_PERSIST:
            return
        track.excess_reported = True
        pods = [p for p in self.gang_pods(track.key) if pod_current(p) and pod_node(p)]
        message = f"{len(pods)} pods hold nodes at once, the gang has {track.size}"
        self._admitted_twice(track, now, message, *(pod_brief(p) for p in pods))

    def _admitted_twice(self, track: GangTrack, now: float, message: str, *evidence: JSON) -> None:
        wl = self.workloads.get(track.key)
        brief = (workload_brief(wl),) if wl else ()
        self.violations.append(
            Violation("admitted-twice", now, track.key, f"{track.key}: {message}", (*brief, *evidence))
        )

    # -- stuck ----------------------------------------------------------------------------------

    def explained(self, track: GangTrack) -> bool:
        """Not admitted, and the Workload says why (or it is deactivated or finished)."""
        wl = self.workloads.get(track.key) or {}
        if (wl.get("spec") or {}).get("active", True) is False or is_true(wl, "Finished"):
            return True
        if track.current is not None:
            return False
        check = gang_check(wl, self.checks) or {}
        if check.get("state") not in (None, "Ready") and check.get("message"):
            return True
        conds = conditions(wl)
        quota = conds.get("QuotaReserved") or {}
        if quota.get("status") == "False" and quota.get("message"):
            return True
        if not quota and self._queued_behind(track, wl):
            return True
        evicted = conds.get("Evicted") or {}
        return evicted.get("status") == "True" and bool(evicted.get("message"))

    def _queued_behind(self, track: GangTrack, wl: Mapping[str, Any]) -> bool:
        """Kueue has not tried the Workload yet (it writes QuotaReserved when it does) and an
        older one of its LocalQueue waits too: its reason is its place in Kueue's queue (a
        BestEffortFIFO queue tries the oldest first), which Kueue keeps on the queue, not on it."""
        ns, queue = track.key.split("/", 1)[0], (wl.get("spec") or {}).get("queueName")
        for other in self.gangs.values():
            owl = self.workloads.get(other.key)
            if (
                other is track
                or owl is None
                or other.deleted
                or other.running
                or other.rejected
                or other.key.split("/", 1)[0] != ns
                or (owl.get("spec") or {}).get("queueName") != queue
            ):
                continue
            if (other.created or 0.0) < (track.created or 0.0):
                return True
        return False

    def stalled(self, now: float) -> bool:
        """A component is down (or was, within the scheduler's backoff): clocks pause."""
        return any(
            w.scope in (ALL, BINDING, CONTROL)
            and w.start <= now
            and (w.end is None or now <= w.end + SCHEDULER_BACKOFF)
            for w in self.windows.values()
        )

    def _check_stuck(self, track: GangTrack, dt: float, now: float) -> None:
        if track.running or self.explained(track):
            track.unexplained_for = 0.0
            track.stuck_reported = False
            return
        if not self.stalled(now):
            track.unexplained_for += dt
        if track.unexplained_for <= STUCK_LIMIT or track.stuck_reported:
            return
        track.stuck_reported = True
        wl = self.workloads.get(track.key) or {}
        adm = track.current
        pods = self.gang_pods(track.key)
        ready = sum(1 for p in pods if pod_current(p) and pod_ready(p))
        state = (
            f"admitted {_iso(adm.start)} (admission {adm.number}), {ready}/{track.size} pods Ready"
            if adm is not None
            else "not admitted, and nothing on the Workload says why"
        )
        self.violations.append(
            Violation(
                "stuck-gang",
                now,
                track.key,
                f"{track.key} neither running nor carrying a reason for "
                f"{track.unexplained_for:.0f}s: {state}",
                (workload_brief(wl), *(pod_brief(p) for p in pods)),
            )
        )

    # -- promises to an UltraServer --------------------------------------------------------------

    def _run_promise_checks(self, now: float) -> None:
        due = [c for c in self._promise_checks if c[0] <= now]
        self._promise_checks = [c for c in self._promise_checks if c[0] > now]
        for _, key, number in due:
            track = self.gangs.get(key)
            if track is not None and number <= len(track.admissions):
                self._check_promise(track, track.admissions[number - 1], now)

    def _check_promise(self, track: GangTrack, adm: Admission, now: float) -> None:
        us = adm.ultraserver()
        at = adm.start
        nodes = {n: node for n, node in self.nodes.items() if node_labels(node).get(ULTRASERVER) == us}
        usable = {n for n in nodes if self.usable_during(n, at - PROMISE_NODE_SLACK, now)}
        capacity = sum(node_gpus(nodes[n]) for n in usable)
        promised: list[tuple[GangTrack, Admission]] = []
        for other in self.gangs.values():
            for a in other.admissions:
                # admitted by then and still admitted a moment after: it held its promise then
                if (
                    a.ultraserver() == us
                    and a.start <= at
                    and (a.end is None or a.end > at + TIME_RESOLUTION)
                ):
                    promised.append((other, a))
        members = {g.key for g, _ in promised}
        demand, lines, evidence = 0.0, [], []
        for gang, _ in promised:
            lost = sum(
                pod_gpus(p)
                for p in self.gang_pods(gang.key)
                if pod_current(p) and pod_node(p) and pod_node(p) not in usable
            )
            demand += gang.gpus - lost
            lines.append(f"{gang.key} {gang.size} pods")
            if wl := self.workloads.get(gang.key):
                evidence.append(workload_brief(wl))
        for name in sorted(usable):
            for key in sorted(self._node_pods.get(name, ())):
                pod = self.pods.get(key)
                if pod is None or not pod_current(pod) or pod_node(pod) != name:
                    continue
                if self._gang_of(pod) in members:
                    continue
                t = bound_at(pod)
                if t is None or t > at - PROMISE_POD_SLACK:
                    continue
                demand += pod_gpus(pod)
                lines.append(f"{key} on {name}")
                evidence.append(pod_brief(pod))
        if demand <= capacity + 1e-9:
            return
        unusable = [node_brief(nodes[n]) for n in sorted(set(nodes) - usable)]
        self.violations.append(
            Violation(
                "overpromised-ultraserver",
                now,
                f"{ULTRASERVER}={us}",
                f"admitting {track.key} at {_iso(at)} promised {us} {demand:g} GPUs, its "
                f"{len(usable)} usable nodes have {capacity:g}: {'; '.join(lines)}",
                (*evidence, *unusable),
            )
        )

    # -- after the stream --------------------------------------------------------------------------

    def check_drained(self, now: float) -> None:
        """The stream has drained (nothing waits, every gang left runs): nothing of an admission
        in progress may be left on the objects."""
        with self._lock:
            for key, wl in sorted(self.workloads.items()):
                if not in_admission(wl, self.checks):
                    continue
                ann = (wl.get("metadata") or {}).get("annotations") or {}
                held = []
                if PREEMPTION_ANNOTATION in ann:
                    held.append(f"{PREEMPTION_ANNOTATION}={ann[PREEMPTION_ANNOTATION]}")
                until = parse_time(ann.get(BACKOFF_UNTIL_ANNOTATION))
                if until is not None and until < now:
                    held.append(f"{BACKOFF_UNTIL_ANNOTATION}={ann[BACKOFF_UNTIL_ANNOTATION]}")
                if held:
                    self.violations.append(
                        Violation(
                            "left-behind",
                            now,
                            key,
                            f"{key} is admitted and still carries {', '.join(held)}",
                            (workload_brief(wl),),
                        )
                    )
            for key, pod in sorted(self.pods.items()):
                if not pod_current(pod):
                    continue
                labels = (pod.get("metadata") or {}).get("labels") or {}
                pin = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(HOSTNAME)
                if PLACEMENT_GATE in pod_gates(pod):
                    what = f"still behind the {PLACEMENT_GATE} gate"
                elif pin and labels.get(BIND_MODE_LABEL) in PINNED_MODES and not pod_node(pod):
                    what = f"pinned to {pin} and never bound"
                else:
                    continue
                gang = self._gang_of(pod)
                wl = self.workloads.get(gang or "")
                self.violations.append(
                    Violation(
                        "left-behind",
                        now,
                        key,
                        f"pod {key} {what} after the stream drained",
                        (pod_brief(pod), *((workload_brief(wl),) if wl else ())),
                    )
                )

    def check_cleaned(
        self,
        now: float,
        *,
        podgroups: Iterable[JSON] = (),
        cluster_queues: Iterable[JSON] = (),
        plans: Iterable[JSON] = (),
    ) -> None:
        """Every gang and plan of the soak deleted: nothing of them may be left."""
        with self._lock:
            left: list[tuple[str, str, JSON]] = []
            for key, pod in sorted(self.pods.items()):
                if self.namespaces is None or key.split("/", 1)[0] in self.namespaces:
                    left.append((key, "pod", pod_brief(pod)))
            for key, wl in sorted(self.workloads.items()):
                left.append((key, "Workload", workload_brief(wl)))
            for pg in podgroups:
                meta = pg.get("metadata") or {}
                left.append((f"{meta.get('namespace')}/{meta.get('name')}", "PodGroup", dict(meta)))
            if not list(plans):
                for cq in cluster_queues:
                    meta = cq.get("metadata") or {}
                    if (meta.get("annotations") or {}).get(PLAN_QUOTA_ANNOTATION, "{}") != "{}":
                        left.append(
                            (str(meta.get("name")), f"ClusterQueue with {PLAN_QUOTA_ANNOTATION}", dict(meta))
                        )
            for name, node in sorted(self.nodes.items()):
                meta, spec = node.get("metadata") or {}, node.get("spec") or {}
                marks = [k for k in (meta.get("annotations") or {}) if k.startswith("gangplugin.io/")]
                if spec.get("unschedulable") or spec.get("taints") or marks:
                    left.append((name, "node cordoned, tainted or annotated", node_brief(node)))
            for subject, what, evidence in left:
                self.violations.append(
                    Violation(
                        "left-behind",
                        now,
                        subject,
                        f"{what} {subject} left after every gang was deleted",
                        (evidence,),
                    )
                )

    def finish(self, now: float) -> None:
        """The end: close what is still open (a gang still partly bound) and judge the RSS."""
        with self._lock:
            for track in self.gangs.values():
                adm = track.current
                if adm is not None and adm.partial_start is not None:
                    self._close_partial(track, adm, now, now)
            for (process, pid), samples in sorted(self.rss_samples.items()):
                verdict = rss_growth(samples)
                if verdict is not None:
                    self.violations.append(
                        Violation(
                            "rss-growth",
                            now,
                            f"{process} (pid {pid})",
                            f"{process} (pid {pid}) RSS grew {verdict}",
                            tuple(
                                {"at": _iso(t), "rssMiB": round(b / 2**20, 1)}
                                for t, b in samples[:: max(1, len(samples) // 40)]
                            ),
                        )
                    )

    # -- figures ---------------------------------------------------------------------------------

    def summary(self) -> JSON:
        with self._lock:
            tracks = list(self.gangs.values())
            waits = []
            for t in tracks:
                submitted = self.submitted.get(f"{t.key.split('/', 1)[0]}/{t.job}") or t.created
                if t.first_running is not None and submitted is not None:
                    waits.append(max(0.0, t.first_running - submitted))
            reasons: dict[str, int] = {}
            for t in tracks:
                for reason, n in t.evictions.items():
                    reasons[reason] = reasons.get(reason, 0) + n
            return {
                "gangs": {
                    "submitted": len(tracks),
                    "run": sum(1 for t in tracks if t.first_running is not None),
                    "requeued": sum(1 for t in tracks if len(t.admissions) > 1 or t.evictions),
                    "requeues": sum(max(0, len(t.admissions) - 1) for t in tracks),
                    "rejected": sum(1 for t in tracks if t.rejected),
                    "neverRan": sum(1 for t in tracks if t.first_running is None and not t.rejected),
                    "evictions": dict(sorted(reasons.items())),
                },
                "releaseSeconds": {
                    "p50": _percentile(self.releases, 50),
                    "p95": _percentile(self.releases, 95),
                    "max": round(max(self.releases), 1) if self.releases else None,
                },
                "p50RunningSeconds": _percentile(waits, 50),
                "p95RunningSeconds": _percentile(waits, 95),
                "rss": {
                    f"{process} (pid {pid})": rss_figures(samples)
                    for (process, pid), samples in sorted(self.rss_samples.items())
                },
            }

    def waiting(self) -> list[str]:
        """Gangs that exist, are not rejected and do not run: what a drain waits for."""
        with self._lock:
            return sorted(
                t.key for t in self.gangs.values() if not t.deleted and not t.running and not t.rejected
            )


def _domain_text(domain: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]) -> str:
    parts = [",".join(f"{k}={v}" for k, v in sel) or "anywhere" for _, sel in domain]
    return "; ".join(parts) or "anywhere"


def _union_length(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, None
    for lo, hi in sorted(spans):
        if reach is None or lo > reach:
            total += hi - lo
            reach = hi
        elif hi > reach:
            total += hi - reach
            reach = hi
    return total


def _percentile(values: list[float], pct: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return round(ordered[rank], 1)


def rss_growth(samples: list[tuple[float, int]]) -> str | None:
    """Why these RSS samples of one process climb without bound, or None (too short to judge,
    or level)."""
    if not samples or samples[-1][0] - samples[0][0] < RSS_MIN_SPAN:
        return None
    settled = [s for s in samples if s[0] >= samples[0][0] + RSS_WARMUP]
    if len(settled) < 8:
        return None
    half = len(settled) // 2
    first = statistics.median(b for _, b in settled[:half])
    second = statistics.median(b for _, b in settled[half:])
    growth = second - first
    if growth > RSS_GROWTH_BYTES and growth > RSS_GROWTH_RATIO * first:
        return (
            f"from a median of {first / 2**20:.0f} MiB to {second / 2**20:.0f} MiB between the first "
            f"and second half of its life past {RSS_WARMUP:.0f}s of warm-up"
        )
    return None


def rss_figures(samples: list[tuple[float, int]]) -> JSON:
    if not samples:
        return {}
    return {
        "seconds": round(samples[-1][0] - samples[0][0]),
        "firstMiB": round(samples[0][1] / 2**20, 1),
        "peakMiB": round(max(b for _, b in samples) / 2**20, 1),
        "lastMiB": round(samples[-1][1] / 2**20, 1),
        "judged": samples[-1][0] - samples[0][0] >= RSS_MIN_SPAN,
    }
