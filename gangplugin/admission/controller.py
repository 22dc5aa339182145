"""The `gangplugin.io/gang` admission-check controller.

Shaped like Kueue's pkg/controller/admissionchecks/provisioning: it only reads Workload status
(plus the nodes and pods it needs to judge capacity and readiness) and writes its own check's
state. Everything it decides comes from the core (`core.admission`, `core.watchdog`,
`core.policy`) over what the watch caches hold, so a restarted controller reaches the same
decisions: nothing is remembered in memory that the API server does not also hold.

Work items (one WorkQueue, keys collapse):
  "pass"           admit: every Workload whose check is Pending with quota reserved, in queue
                   order, against one snapshot that already counts capacity promised to admitted
                   gangs; run again whenever capacity or check states change (never on a poll).
  "wl/<ns>/<name>" watchdog of one admitted gang; wakes itself at its next deadline.
  "check/<name>"   the AdmissionCheck's Active condition.
  "policy/<name>"  the GangPolicy's Valid condition.

Where TrainingPlans feed a Workload's ClusterQueue flavor, `core.drain` also decides: a gang that
would outlive the plan capacity is not admitted from the termination start on, an admitted one
is requeued (check Retry) at that instant, and pods carry the block end to checkpoint before it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from gangplugin.admission import records as rec
from gangplugin.admission.capacity import Assumed, CapacityView, Promise
from gangplugin.core.admission import (
    AdmissionDecision,
    decide,
    gang_id,
    promise,
    remaining,
    sequential_blocker,
    with_selector,
)
from gangplugin.core.drain import DrainDecision, gang_drain
from gangplugin.core.errors import InputError
from gangplugin.core.names import (
    ADMISSION_CHECK_CONTROLLER,
    BLOCK_END_ANNOTATION,
    GANG_LABEL,
    MAX_RUNTIME_ANNOTATION,
    PLAN_DRAINING_REASON,
    TOPOLOGY_ANNOTATIONS,
)
from gangplugin.core.placement import Assignment, Gang, recover
from gangplugin.core.plans import TrainingPlan
from gangplugin.core.policy import GangPolicy, requeue_decision
from gangplugin.core.quota import next_quota_change
from gangplugin.core.timeutil import format_time
from gangplugin.core.topology import Snapshot
from gangplugin.core.watchdog import GangObservation, Verdict, watch
from gangplugin.kube.client import JSON, NODES, PODS, WORKLOADS, ApiError, Client
from gangplugin.kube.events import record_event
from gangplugin.kube.gangpolicies import GangPolicies
from gangplugin.kube.informer import Informer, object_key
from gangplugin.kube.records import gang_from_k8s
from gangplugin.kube.workqueue import WorkQueue
from gangplugin.plans.controller import TRAINING_PLANS
from gangplugin.server import metrics

log = logging.getLogger(__name__)

FIELD_MANAGER = "gangplugin-admission"
COMPONENT = "gangplugin-admission"
PASS = "pass"
_STARTED_REASONS = ("WaitForRecovery", "Recovered", "Started")


@dataclass(frozen=True, slots=True)
class AdmittedGang:
    """An admitted (check Ready) gang as the pass sees it."""

    key: str
    wl: JSON
    check: str
    policy: str | None
    ever_ready: bool


def _key(wl: Mapping[str, Any]) -> str:
    return object_key(dict(wl))


def _ts(wl: Mapping[str, Any], field: str) -> float:
    try:
        return rec.epoch(wl.get("metadata", {}).get(field), f"metadata.{field}")
    except InputError:
        return 0.0


def condition_time(obj: Mapping[str, Any], kind: str) -> float:
    c = rec.conditions(obj).get(kind) or {}
    try:
        return rec.epoch(c.get("lastTransitionTime"), f"status.conditions[{kind}].lastTransitionTime")
    except InputError:
        return 0.0


def _pod_active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and not pod.get(
        "metadata", {}
    ).get("deletionTimestamp")


class GangAdmission:
    def __init__(
        self,
        client: Client,
        informer: Callable[..., Informer[Any]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.clock = clock
        self.workloads = informer(WORKLOADS)
        self.checks = informer(rec.ADMISSION_CHECKS)
        self.policies = informer(rec.GANG_POLICIES)
        self.nodes = informer(NODES)
        self.pods = informer(PODS)
        self.flavors = informer(rec.RESOURCE_FLAVORS)
        self.topologies = informer(rec.TOPOLOGIES)
        self.plans = informer(TRAINING_PLANS, rec.plan_or_none)
        self.queue = WorkQueue()
        self.capacity = CapacityView(self.nodes.items, self.pods.items)
        self._parsed: dict[str | None, tuple[str | None, GangPolicy]] = {}
        self.lookup = GangPolicies(self.workloads, self.checks, self.policies, self.topologies)
        self._writers = ThreadPoolExecutor(8, thread_name_prefix="admission-write")
        self._events = ThreadPoolExecutor(1, thread_name_prefix="admission-events")
        # (namespace, gang label) -> pods by name: an index over the pod cache, rebuilt by its relist.
        self._gang_pods: dict[tuple[str, str], dict[str, JSON]] = {}
        self._lock = threading.Lock()
        self.workloads.add_handler(self._on_workload)
        self.pods.add_handler(self.capacity.on_pod)
        self.pods.add_handler(self._on_pod)
        self.nodes.add_handler(self.capacity.on_node)
        self.nodes.add_handler(self._on_node)
        self.checks.add_handler(lambda _t, _o, n: self._on_config("check", n))
        self.policies.add_handler(lambda _t, _o, n: self._on_config("policy", n))
        self.topologies.add_handler(lambda _t, _o, _n: self.queue.add(PASS))
        self.flavors.add_handler(lambda _t, _o, _n: self.queue.add(PASS))
        self.plans.add_handler(lambda _t, _o, _n: self._recheck_admitted())

    # -- event handlers: only enqueue ----------------------------------------------------------

    def _on_workload(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        self.queue.add(PASS)
        obj = new or old
        if obj is not None:
            self.queue.add("wl/" + _key(obj))

    def _on_pod(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        obj = new or old
        assert obj is not None
        meta = obj.get("metadata", {})
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        if gang:
            idx = (meta.get("namespace", ""), gang)
            with self._lock:
                pods = self._gang_pods.setdefault(idx, {})
                if new is None:
                    pods.pop(meta.get("name", ""), None)
                    if not pods:
                        del self._gang_pods[idx]
                else:
                    pods[meta.get("name", "")] = new
            owner = self.lookup.workload_of_gang(meta.get("namespace", ""), gang)
            if owner:
                self.queue.add("wl/" + owner)
        # Capacity came free: a waiting gang may fit now.
        if (
            (new is None or not _pod_active(new))
            and old is not None
            and (old.get("spec") or {}).get("nodeName")
        ):
            self.queue.add(PASS)

    def _on_node(self, kind: str, old: JSON | None, new: JSON | None) -> None:
        if old is not None and new is not None and _node_view(old) == _node_view(new):
            return  # a heartbeat: nothing placement or the watchdog reads changed
        self._recheck_admitted()

    def _recheck_admitted(self) -> None:
        self.queue.add(PASS)
        for wl in self.workloads.items():
            if rec.is_true(wl, "Admitted"):
                self.queue.add("wl/" + _key(wl))

    def _on_config(self, kind: str, obj: JSON | None) -> None:
        if obj is not None:
            self.queue.add(f"{kind}/{obj['metadata']['name']}")
        if kind == "policy":
            for ac in self.checks.items():
                self.queue.add(f"check/{ac['metadata']['name']}")
        self.queue.add(PASS)

    # -- reconcile -----------------------------------------------------------------------------

    def reconcile(self, key: str) -> float | None:
        if key == PASS:
            return self.admission_pass()
        kind, _, rest = key.partition("/")
        if kind == "wl":
            return self.watchdog(rest)
        if kind == "check":
            self.sync_check(rest)
        elif kind == "policy":
            self.sync_policy(rest)
        return None

    def our_checks(self) -> dict[str, str | None]:
        """AdmissionCheck name -> GangPolicy name (None: defaults) for checks routed to us."""
        return self.lookup.our_checks()

    def policy(self, name: str | None) -> GangPolicy:
        """The GangPolicy by name (defaults for None); InputError when missing or invalid.
        Parsed once per resourceVersion, not once per gang and pass."""
        obj = self.policies.get(name) if name is not None else None
        rv = obj["metadata"].get("resourceVersion") if obj is not None else None
        cached = self._parsed.get(name)
        if cached is not None and cached[0] == rv and obj is not None:
            return cached[1]
        policy = self.lookup.policy(name)
        self._parsed[name] = (rv, policy)
        return policy

    def levels(self, policy: GangPolicy) -> tuple[str, ...]:
        return self.lookup.levels(policy)

    def gang(self, wl: Mapping[str, Any]) -> Gang:
        """The Workload's gang, with the node labels of its assigned flavors and of the domain our
        check already chose (podSetUpdates) in each podset's nodeSelector."""
        gang = gang_from_k8s(self._with_pod_group_annotations(wl))
        gang = Gang(gang.podsets, gang_id(wl["metadata"]["name"]))
        flavors = {f["metadata"]["name"]: f for f in self.flavors.items()}
        for ps_name, labels in rec.flavor_selector(wl, flavors).items():
            gang = with_selector(gang, labels, [ps_name])
        return gang

    def _with_pod_group_annotations(self, wl: Mapping[str, Any]) -> Mapping[str, Any]:
        """Kueue builds a plain pod group's podset templates without the pods' annotations; the
        topology annotations a user put on the pods are read from the pods (its owners)."""
        owners = wl.get("metadata", {}).get("ownerReferences") or []
        if not owners or any(o.get("kind") != "Pod" for o in owners):
            return wl
        ns = wl["metadata"].get("namespace", "")
        podsets = []
        for ps in (wl.get("spec") or {}).get("podSets") or []:
            extra: dict[str, str] = {}
            for o in owners:
                pod = self.pods.get(f"{ns}/{o.get('name')}")
                ann = (pod or {}).get("metadata", {}).get("annotations") or {}
                extra = {
                    k: v for k, v in ann.items() if k in TOPOLOGY_ANNOTATIONS or k == MAX_RUNTIME_ANNOTATION
                }
                if extra:
                    break
            template = dict(ps.get("template") or {})
            meta = dict(template.get("metadata") or {})
            meta["annotations"] = {**extra, **(meta.get("annotations") or {})}
            template["metadata"] = meta
            podsets.append({**ps, "template": template})
        return {**wl, "spec": {**(wl.get("spec") or {}), "podSets": podsets}}

    def _plans_of(self, wl: Mapping[str, Any]) -> tuple[str, set[str], list[TrainingPlan]]:
        cluster_queue, flavors = rec.quota_of(wl)
        plans = [p for p in self.plans.items() if p is not None and p.cluster_queue == cluster_queue]
        return cluster_queue, flavors, plans

    def drain(
        self, wl: Mapping[str, Any], now: float, admitted_at: float | None = None
    ) -> DrainDecision | None:
        """What the TrainingPlans feeding the Workload's quota say about it (None: no plan feeds
        it); InputError when its max-runtime annotation is unusable."""
        cluster_queue, flavors, plans = self._plans_of(wl)
        if not plans:
            return None
        return gang_drain(
            plans,
            cluster_queue,
            flavors,
            datetime.fromtimestamp(now, UTC),
            rec.max_runtime(self._with_pod_group_annotations(wl)),
            None if admitted_at is None else datetime.fromtimestamp(admitted_at, UTC),
        )

    def _bound(self, namespace: str, gang: str) -> tuple[Counter[str], tuple[str, ...]]:
        """The gang's bound pods: how many per podset, and their nodes."""
        with self._lock:
            pods = list(self._gang_pods.get((namespace, gang), {}).values())
        out: Counter[str] = Counter()
        nodes: set[str] = set()
        for pod in pods:
            if (node := (pod.get("spec") or {}).get("nodeName")) and _pod_active(pod):
                out[(pod["metadata"].get("labels") or {}).get(rec.PODSET_LABEL, "main")] += 1
                nodes.add(node)
        return out, tuple(sorted(nodes))

    def gang_pods(self, namespace: str, gang: str) -> list[JSON]:
        with self._lock:
            return list(self._gang_pods.get((namespace, gang), {}).values())

    # -- admission -------------------------------------------------------------------------

    def admission_pass(self) -> float | None:
        started = time.monotonic()
        now = self.clock()
        ours = self.our_checks()
        if not ours:
            return None
        admitted: list[AdmittedGang] = []
        candidates: list[tuple[tuple[float, float, str], JSON, str]] = []
        unready: dict[str | None, list[str]] = {}
        seen: set[str] = set()
        for wl in self.workloads.items():
            found = GangPolicies.check_of(wl, ours)
            if found is None or not rec.is_true(wl, "QuotaReserved") or rec.is_true(wl, "Finished"):
                continue
            name, state = found
            key = _key(wl)
            seen.add(key)
            if self._still_assumed(key, wl):
                unready.setdefault(ours[name], []).append(key)
                continue  # admitted by an earlier pass; the cache has not shown the write yet
            if state.get("state") == "Ready":
                admitted.append(AdmittedGang(key, wl, name, ours[name], self.ever_ready(wl)))
            elif state.get("state") == "Pending" and not rec.is_true(wl, "Evicted"):
                order = (condition_time(wl, "QuotaReserved"), _ts(wl, "creationTimestamp"), key)
                candidates.append((order, wl, name))
        for key in set(self.capacity.assumed) - seen:
            self.capacity.forget(key)  # deleted, finished or no longer ours
        if not candidates:
            return None
        candidates.sort(key=lambda c: c[0])
        admitted.sort(key=lambda a: (condition_time(a.wl, "Admitted"), a.key))
        snapshots: dict[tuple[str, ...], Snapshot] = {}
        for a in admitted:
            if not a.ever_ready:
                unready.setdefault(a.policy, []).append(a.key)
        # Decide every candidate in order on one snapshot (each admission charged before the next
        # is decided), then write the decisions concurrently: a write waits on the API server,
        # and the decisions no longer depend on each other.
        writes: list[tuple[str | None, Callable[[], bool | None]]] = []
        wake: list[float] = []  # when a gang the plans hold back may be decided otherwise
        with self.capacity.locked():
            self._decide_all(candidates, ours, admitted, unready, snapshots, writes, wake, now)
        # Every write runs to its end, each on its own: one Workload's failure holds back no other.
        outcomes = list(self._writers.map(lambda w: _outcome(w[1]), writes))
        with self.capacity.locked():
            for (admitted_key, _), outcome in zip(writes, outcomes, strict=True):
                if admitted_key is not None and outcome is not True:
                    self._settle_failed_admission(admitted_key, outcome)
        # A refused write (the Workload changed meanwhile) only over-counted capacity in this
        # pass; the pass runs again on fresh copies.
        rerun = any(o is False or isinstance(o, Exception) for o in outcomes)
        took = time.monotonic() - started
        log.log(
            logging.INFO if took > 1.0 else logging.DEBUG,
            "admission pass: %d candidates, %d admitted gangs, %.3fs, rerun=%s",
            len(candidates),
            len(admitted),
            took,
            rerun,
        )
        if rerun:
            return 0.5
        return max(0.05, min(wake) - now) if wake else None

    def _still_assumed(self, key: str, wl: JSON) -> bool:
        """Whether an admission this controller wrote is not yet in the cached Workload (then its
        capacity stays charged and the gang is not a candidate); forgets it once it is."""
        a = self.capacity.assumed.get(key)
        if a is None:
            return False
        if wl["metadata"].get("resourceVersion") != a.resource_version:
            with self.capacity.locked():
                self.capacity.forget(key)
            return False
        if a.certain:
            return True
        try:  # the write's outcome is unknown: the API server says whether it happened
            live = self.client.request(
                "GET", WORKLOADS.path(wl["metadata"]["namespace"], wl["metadata"]["name"])
            )
        except ApiError as err:
            if err.status == 404:
                with self.capacity.locked():
                    self.capacity.forget(key)
                return False
            return True  # still unknown: keep counting it
        if live["metadata"].get("resourceVersion") == a.resource_version:
            with self.capacity.locked():
                self.capacity.forget(key)  # not written: the gang is decided again
            return False
        return True

    def _settle_failed_admission(self, key: str, outcome: bool | Exception | None) -> None:
        """After an admission's write: refused (False, or a 4xx) or a no-op (None) means nothing
        was written; any other error leaves the outcome unknown until the Workload is read again."""
        a = self.capacity.assumed.get(key)
        if a is None:
            return
        if isinstance(outcome, Exception) and not (isinstance(outcome, ApiError) and outcome.status < 500):
            self.capacity.assumed[key] = dataclasses.replace(a, certain=False)
        else:
            self.capacity.forget(key)

    def _decide_all(
        self,
        candidates: list[tuple[tuple[float, float, str], JSON, str]],
        ours: Mapping[str, str | None],
        admitted: list[AdmittedGang],
        unready: dict[str | None, list[str]],
        snapshots: dict[tuple[str, ...], Snapshot],
        writes: list[tuple[str | None, Callable[[], bool | None]]],
        wake: list[float],
        now: float,
    ) -> None:
        """Decide every candidate in queue order (under the capacity lock); queue the writes."""
        promises: list[Promise] | None = None
        for _, wl, check in candidates:
            policy_name = ours[check]
            try:
                policy = self.policy(policy_name)
                levels = self.levels(policy)
            except InputError as err:
                writes.append(
                    (None, partial(self._write_check, wl, check, "Pending", f"waiting: {err}", now=now))
                )
                continue
            snap = snapshots.get(levels)
            if snap is None:
                if promises is None:
                    promises = self._promises(admitted)
                snap = snapshots[levels] = self.capacity.snapshot(levels, promises)
            blocker = (
                sequential_blocker(_key(wl), unready.get(policy_name, [])) if policy.sequential else None
            )
            try:
                drain = self.drain(wl, now)
                if drain is not None and not drain.admit:
                    cluster_queue, _, plans = self._plans_of(wl)
                    change = next_quota_change(plans, cluster_queue, datetime.fromtimestamp(now, UTC))
                    if change is not None:
                        wake.append(change.timestamp())
                    writes.append(
                        (
                            None,
                            partial(
                                self._write_check,
                                wl,
                                check,
                                "Pending",
                                f"waiting for the next block: {drain.reason}",
                                now=now,
                            ),
                        )
                    )
                    continue
                end = (
                    {}
                    if drain is None or drain.block_end is None
                    else {BLOCK_END_ANNOTATION: format_time(drain.block_end)}
                )
                gang = self.gang(wl)
                decision = decide(snap, gang, gang.name, policy.placement, blocker, end)
            except InputError as err:
                writes.append(
                    (None, partial(self._reject, wl, check, f"the Workload cannot be used: {err}", now))
                )
                continue
            if decision.ready:
                assert decision.placement is not None
                key = _key(wl)
                updates = [u.to_dict() for u in decision.pod_set_updates]
                self.capacity.assume(
                    key,
                    Assumed(
                        wl["metadata"]["resourceVersion"],
                        True,
                        (_fingerprint(updates, Counter()), ()),
                        wl["metadata"]["namespace"],
                        gang,
                        decision.placement,
                    ),
                )
                if policy.sequential:
                    unready.setdefault(policy_name, []).append(key)
                writes.append((key, partial(self._admit, wl, check, decision, now)))
            else:
                writes.append(
                    (None, partial(self._write_check, wl, check, "Pending", decision.message, now=now))
                )

    def _promises(self, admitted: list[AdmittedGang]) -> list[Promise]:
        """What every admitted gang still needs (its unbound pods in its chosen domain), in
        admission order; each gang is parsed only when its promise has to be redone."""
        out = []
        for a in admitted:
            try:
                policy = self.policy(a.policy)
            except InputError:
                continue
            ns = a.wl["metadata"]["namespace"]
            gid = gang_id(a.wl["metadata"]["name"])
            updates = (rec.check_state(a.wl, a.check) or {}).get("podSetUpdates") or []
            bound, occupied = self._bound(ns, gid)
            out.append(
                Promise(
                    a.key,
                    (_fingerprint(updates, bound), occupied),
                    ns,
                    partial(self._unbound_gang, a.wl, updates, bound),
                    policy.placement,
                    occupied,
                )
            )
        return out

    def promised_snapshot(self, levels: tuple[str, ...], admitted: list[AdmittedGang]) -> Snapshot:
        """A fresh snapshot with every admitted gang's promise, for read-only what-ifs off the
        admission path (the gangs API's explain); the pass itself uses the kept `capacity`."""
        snap = self.capacity.build(levels)
        for p in self._promises(admitted):
            try:
                promise(snap, p.gang(), p.namespace, p.policy, p.occupied)
            except InputError as err:
                log.warning("admitted workload %s: promised capacity not counted: %s", p.key, err)
        return snap

    def _unbound_gang(self, wl: JSON, updates: list[JSON], bound: Counter[str]) -> Gang:
        gang = self.gang(wl)
        for upd in updates:
            gang = with_selector(gang, upd.get("nodeSelector") or {}, [str(upd.get("name"))])
        return remaining(gang, bound)

    def _admit(self, wl: JSON, check: str, decision: AdmissionDecision, now: float) -> bool | None:
        ok = self._write_check(
            wl,
            check,
            "Ready",
            decision.message,
            updates=[u.to_dict() for u in decision.pod_set_updates],
            now=now,
        )
        if ok:
            self.event(wl, "Normal", "GangAdmitted", decision.message)
            if reserved := condition_time(wl, "QuotaReserved"):
                metrics.ADMISSION_LATENCY.observe(max(0.0, now - reserved))
        return ok

    def _reject(self, wl: JSON, check: str, message: str, now: float) -> bool | None:
        ok = self._write_check(wl, check, "Rejected", message, now=now)
        if ok:
            self.event(wl, "Warning", "GangRejected", message)
        return ok

    def ever_ready(self, wl: Mapping[str, Any]) -> bool:
        """Whether the gang was fully Ready since its current admission: Kueue's PodsReady
        condition (set because waitForPodsReady is on, with a timeout that never fires)."""
        c = rec.conditions(wl).get("PodsReady")
        if c is None:
            return False
        if condition_time(wl, "PodsReady") < condition_time(wl, "Admitted"):
            return False  # left over from an earlier admission
        return c.get("status") == "True" or c.get("reason") in ("WaitForRecovery", "Recovered")

    # -- watchdog ------------------------------------------------------------------------------

    def watchdog(self, key: str) -> float | None:
        wl = self.workloads.get(key)
        if wl is None or not rec.is_true(wl, "Admitted") or rec.is_true(wl, "Finished"):
            metrics.GANG_READY.forget(key)
            return None
        ours = self.our_checks()
        found = GangPolicies.check_of(wl, ours)
        if found is None or found[1].get("state") != "Ready":
            return None
        check, state = found
        try:
            policy = self.policy(ours[check])
        except InputError:
            return None
        now = self.clock()
        ns = wl["metadata"]["namespace"]
        gang = gang_id(wl["metadata"]["name"])
        obs = self.observe(wl, self.gang_pods(ns, gang))
        metrics.GANG_READY.update(key, obs.admitted_at, obs.ready >= obs.size, now)
        try:
            drain = self.drain(wl, now, obs.admitted_at)
        except InputError:
            drain = None  # admitted before the annotation went bad: the readiness watch goes on
        if drain is not None and drain.evict:
            self._drain_out(wl, check, drain, now)
            return None
        verdict = watch(policy, obs, now)
        if verdict.replace:
            try:
                self.replace_failed(wl, state, policy, obs.failed_nodes)
            except InputError as err:  # the recovery timeout still runs; say why nothing moved
                self.event(wl, "Warning", "NodeReplacementImpossible", str(err))
        if not verdict.expired:
            # Wake at the next deadline: the watchdog's, or the plans' termination start.
            wake = [] if verdict.recheck_at is None else [verdict.recheck_at]
            if drain is not None and drain.evict_at is not None:
                wake.append(drain.evict_at.timestamp())
            return max(0.05, min(wake) - now) if wake else None
        self._time_out(wl, check, state, policy, verdict, now)
        return None

    def _drain_out(self, wl: JSON, check: str, drain: DrainDecision, now: float) -> None:
        """Requeue a gang whose plan capacity is about to end (Kueue evicts it on Retry)."""
        end = format_time(drain.block_end) if drain.block_end is not None else "?"
        message = f"block ends at {end}, draining: {drain.reason}; requeued for the next block"
        if self._write_check(wl, check, "Retry", message, now=now):
            self.event(wl, "Normal", PLAN_DRAINING_REASON, message)
            metrics.eviction(PLAN_DRAINING_REASON, "Retry")

    def observe(self, wl: Mapping[str, Any], pods: list[JSON]) -> GangObservation:
        size = sum(int(ps.get("count", 1)) for ps in (wl.get("spec") or {}).get("podSets") or [])
        active = [p for p in pods if _pod_active(p)]
        bound = [p for p in active if (p.get("spec") or {}).get("nodeName")]
        ready = sum(1 for p in bound if rec.pod_ready(p))
        ever = self.ever_ready(wl) or (not rec.conditions(wl).get("PodsReady") and ready >= size)
        failed: list[str] = []
        since: list[float] = []
        for node_name in sorted({p["spec"]["nodeName"] for p in bound}):
            node = self.nodes.get(node_name)
            is_ready, changed = rec.node_ready_since(node) if node is not None else (False, None)
            if not is_ready:
                failed.append(node_name)
                if changed is not None:
                    since.append(changed)
        pr = rec.conditions(wl).get("PodsReady") or {}
        if ever and pr.get("status") == "False":
            since.append(condition_time(wl, "PodsReady"))
        return GangObservation(
            size=size,
            bound=len(bound),
            ready=ready,
            admitted_at=condition_time(wl, "Admitted"),
            ever_ready=ever,
            degraded_since=min(since) if ever and since else None,
            failed_nodes=tuple(failed),
        )

    def _time_out(
        self, wl: JSON, check: str, state: Mapping[str, Any], policy: GangPolicy, verdict: Verdict, now: float
    ) -> None:
        retries = int(state.get("retryCount") or 0)
        d = requeue_decision(policy, retries, verdict.reason, now, _ts(wl, "creationTimestamp"))
        if self._write_check(wl, check, d.state, d.message, requeue_after=d.requeue_after_seconds, now=now):
            reason = "GangRequeued" if d.state == "Retry" else "GangDeactivated"
            self.event(wl, "Warning", reason, d.message)
            metrics.eviction(verdict.phase, d.state)

    def replace_failed(
        self, wl: JSON, state: Mapping[str, Any], policy: GangPolicy, failed: tuple[str, ...]
    ) -> None:
        """Move the pods of the gang off NotReady nodes, all failed nodes in one decision of the
        core (`recover`: a spare of the gang's UltraServer first), or none of them: the pods
        there are deleted so their controller recreates them, and the domain nodeSelector keeps
        the new ones inside the gang's domain, where the extender lets them take the spare."""
        ns = wl["metadata"]["namespace"]
        gang = self.gang(wl)
        for upd in state.get("podSetUpdates") or []:
            gang = with_selector(gang, upd.get("nodeSelector") or {}, [str(upd.get("name"))])
        pods = [p for p in self.gang_pods(ns, gang.name) if _pod_active(p) and p["spec"].get("nodeName")]
        assignments = [
            Assignment(
                (p["metadata"].get("labels") or {}).get(rec.PODSET_LABEL, gang.podsets[0].name),
                i,
                p["spec"]["nodeName"],
            )
            for i, p in enumerate(sorted(pods, key=lambda p: p["metadata"]["name"]))
        ]
        result = recover(
            self.capacity.build(self.levels(policy)), gang, assignments, failed, policy.placement
        )
        if not result.feasible:
            self.event(
                wl, "Warning", "NodeReplacementImpossible", f"{result.reason}; waiting for recoveryTimeout"
            )
            return
        for pod in pods:
            if pod["spec"]["nodeName"] in failed:
                self._delete_pod(ns, pod["metadata"]["name"])
        for move in result.moves:
            self.event(
                wl, "Normal", "NodeReplaced", f"{move.reason}; {len(move.assignments)} pod(s) recreated there"
            )

    def _delete_pod(self, namespace: str, name: str) -> None:
        try:
            self.client.request(
                "DELETE",
                PODS.path(namespace, name),
                body={"gracePeriodSeconds": 0, "propagationPolicy": "Background"},
            )
        except ApiError as err:
            if err.status != 404:
                raise

    # -- writing ---------------------------------------------------------------------------

    def _write_check(
        self,
        wl: JSON,
        check: str,
        state: str,
        message: str,
        *,
        updates: list[JSON] | None = None,
        requeue_after: int | None = None,
        now: float,
    ) -> bool | None:
        """Server-side apply of our check's entry only (our field manager), conditional on the
        Workload's resourceVersion: a decision made on a stale copy is never written. Returns
        True when written, None when the entry already says this, False when the Workload
        changed meanwhile (the decision is made again on the fresh copy)."""
        prev = rec.check_state(wl, check) or {}
        entry: JSON = {"name": check, "state": state, "message": message[:32768]}
        if updates:
            entry["podSetUpdates"] = updates
        if requeue_after is not None:
            entry["requeueAfterSeconds"] = requeue_after
        unchanged = all(prev.get(k) == v for k, v in entry.items()) and (
            bool(prev.get("podSetUpdates")) == bool(updates)
        )
        if unchanged:
            return None
        same_state = prev.get("state") == state
        entry["lastTransitionTime"] = (
            prev.get("lastTransitionTime")
            if same_state and prev.get("lastTransitionTime")
            else format_time(datetime.fromtimestamp(int(now), UTC))
        )
        meta = wl["metadata"]
        body = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "resourceVersion": meta["resourceVersion"],
            },
            "status": {"admissionChecks": [entry]},
        }
        try:
            self.client.request(
                "PATCH",
                WORKLOADS.path(meta["namespace"], meta["name"]) + "/status",
                body=body,
                content_type="application/apply-patch+yaml",
                params={"fieldManager": FIELD_MANAGER, "force": "true"},
            )
        except ApiError as err:
            if err.status in (404, 409):
                return False
            raise
        if state == "Pending" and str(prev.get("message", "")).split(":")[0] != message.split(":")[0]:
            self.event(wl, "Normal", "GangWaiting", message)  # a new kind of reason, not every recount
        log.info("workload %s/%s: check %s -> %s: %s", meta["namespace"], meta["name"], check, state, message)
        return True

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Recorded in the background: an Event is for people, a decision must not wait for it."""
        self._events.submit(record_event, self.client, dict(obj), type_, reason, message, COMPONENT)

    # -- AdmissionCheck and GangPolicy status ------------------------------------------------------

    def sync_check(self, name: str) -> None:
        ac = self.checks.get(name)
        if ac is None or (ac.get("spec") or {}).get("controllerName") != ADMISSION_CHECK_CONTROLLER:
            return
        try:
            policy = self.policy(rec.policy_name_of_check(ac))
            self.levels(policy)
            status, reason, message = "True", "Active", "the gangplugin.io/gang controller is ready"
        except InputError as err:
            status, reason, message = "False", "InvalidParameters", str(err)
        self._set_condition(rec.ADMISSION_CHECKS, ac, "Active", status, reason, message)

    def sync_policy(self, name: str) -> None:
        obj = self.policies.get(name)
        if obj is None:
            return
        try:
            self.levels(rec.gang_policy_from_k8s(obj))
            status, reason, message = "True", "Valid", "the policy is usable"
        except InputError as err:
            status, reason, message = "False", "Invalid", str(err)
        if (
            self._set_condition(rec.GANG_POLICIES, obj, "Valid", status, reason, message)
            and status == "False"
        ):
            self.event(obj, "Warning", "InvalidGangPolicy", message)

    def _set_condition(self, res: Any, obj: JSON, kind: str, status: str, reason: str, message: str) -> bool:
        current = rec.conditions(obj).get(kind)
        if current and (current.get("status"), current.get("reason"), current.get("message")) == (
            status,
            reason,
            message,
        ):
            return False
        now = format_time(datetime.fromtimestamp(int(self.clock()), UTC))
        cond = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": current.get("lastTransitionTime", now)
            if current and current.get("status") == status
            else now,
            "observedGeneration": obj["metadata"].get("generation", 0),
        }
        others = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") != kind]
        self.client.patch(
            res, obj["metadata"]["name"], {"status": {"conditions": [*others, cond]}}, subresource="status"
        )
        return True


def _fingerprint(updates: list[JSON], bound: Counter[str]) -> tuple[Any, ...]:
    """What an admitted gang's promise depends on: its domain per podset and its bound pods."""
    domains = tuple(
        sorted((str(u.get("name")), tuple(sorted((u.get("nodeSelector") or {}).items()))) for u in updates)
    )
    return domains, tuple(sorted(bound.items()))


def _outcome(write: Callable[[], bool | None]) -> bool | Exception | None:
    """A write's result, or the error it raised (logged): one Workload's failure is its own."""
    try:
        return write()
    except Exception as err:  # any failure of one write is that Workload's alone
        log.warning("admission write failed: %s", err)
        return err


def _node_view(obj: JSON) -> tuple[Any, ...]:
    """What of a Node the controller reads (so heartbeats can be told apart from changes)."""
    status = obj.get("status") or {}
    ready = rec.conditions(obj).get("Ready") or {}
    return (
        obj.get("metadata", {}).get("labels"),
        (obj.get("spec") or {}).get("unschedulable"),
        (obj.get("spec") or {}).get("taints"),
        status.get("allocatable"),
        ready.get("status"),
    )
