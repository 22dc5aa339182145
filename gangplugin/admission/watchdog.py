"""The watchdog of admitted gangs: readiness, unscheduled and recovery timeouts (`core.watchdog`),
node replacement from spares (`core.placement.recover`), and draining before a plan's block ends
(`core.drain`). Each gang wakes itself at its next deadline; nothing is polled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gangplugin.admission.view import AdmissionView, pod_active, timestamp
from gangplugin.admission.writes import CheckWriter
from gangplugin.core.admission import (
    gang_id,
    with_selector,
)
from gangplugin.core.drain import DrainDecision
from gangplugin.core.errors import InputError
from gangplugin.core.names import BACKOFF_UNTIL_ANNOTATION, PLAN_DRAINING_REASON, READY_AT_ANNOTATION
from gangplugin.core.placement import Assignment, recover
from gangplugin.core.policy import GangPolicy, RequeueDecision, requeue_decision
from gangplugin.core.timeutil import format_time
from gangplugin.core.watchdog import Verdict, watch
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON
from gangplugin.kube.expectations import DeletionExpectations
from gangplugin.kube.gangpolicies import GangPolicies
from gangplugin.runtime import metrics

log = logging.getLogger(__name__)


def pod_uid(pod: JSON) -> str:
    return str(pod["metadata"].get("uid", ""))


class Watchdog:
    def __init__(self, view: AdmissionView, writer: CheckWriter, clock: Callable[[], float]) -> None:
        self.view = view
        self.writer = writer
        self.clock = clock
        self.deleted = DeletionExpectations()  # pods moved off failed nodes, until the watch shows it

    def run(self, key: str) -> float | None:
        wl = self.view.workloads.get(key)
        if wl is None or not rec.is_true(wl, "Admitted") or rec.is_true(wl, "Finished"):
            metrics.GANG_READY.forget(key)
            return None if wl is None else self._end_backoff(wl)
        ours = self.view.our_checks()
        found = GangPolicies.check_of(wl, ours)
        if found is None or found[1].get("state") != "Ready":
            return None
        check, state = found
        if spent := rec.spent_holds(wl):
            self.writer.clear_annotations(wl, spent)  # the Workload's event runs this again
        try:
            policy = self.view.policy(ours[check])
        except InputError:
            return None
        now = self.clock()
        ns = wl["metadata"]["namespace"]
        gang = gang_id(wl["metadata"]["name"])
        obs = self.view.observe(wl, self._pods(ns, gang, now))
        if obs.ready >= obs.size and not obs.ever_ready and rec.pods_ready_means_running(wl):
            # Kueue's PodsReady cannot say it for this kind: said here, once (the Workload's event
            # runs this again), and taken as said now.
            self.writer.annotate(
                wl, {READY_AT_ANNOTATION: format_time(datetime.fromtimestamp(int(now), UTC))}
            )
            obs = replace(obs, ever_ready=True)
        metrics.GANG_READY.update(key, obs.admitted_at, obs.ready >= obs.size, now)
        try:
            drain = self.view.drain(wl, now, obs.admitted_at)
        except InputError:
            drain = None  # admitted before the annotation went bad: the readiness watch goes on
        if drain is not None and drain.evict:
            self._drain_out(wl, check, drain, now)
            return None
        verdict = watch(policy, obs, now)
        if verdict.replace:
            try:
                self.replace_failed(wl, state, policy, obs.failed_nodes, now)
            except InputError as err:  # the recovery timeout still runs; say why nothing moved
                self.writer.event(wl, "Warning", "NodeReplacementImpossible", str(err))
                metrics.NODE_REPLACEMENTS.labels("Impossible").inc()
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
        if self.writer.write_check(wl, check, "Retry", message, now=now):
            self.writer.event(wl, "Normal", PLAN_DRAINING_REASON, message)
            metrics.eviction(PLAN_DRAINING_REASON, "Retry")

    def _time_out(
        self, wl: JSON, check: str, state: Mapping[str, Any], policy: GangPolicy, verdict: Verdict, now: float
    ) -> None:
        retries = int(state.get("retryCount") or 0)
        d = requeue_decision(policy, retries, verdict.reason, now, timestamp(wl, "creationTimestamp"))
        if d.state == "Retry" and d.requeue_after_seconds:
            self._back_off(wl, check, retries, d, verdict, now)
        elif self.writer.write_check(wl, check, d.state, d.message, now=now):
            reason = "GangRequeued" if d.state == "Retry" else "GangDeactivated"
            self.writer.event(wl, "Warning", reason, d.message)
            metrics.eviction(verdict.phase, d.state)

    def _back_off(
        self, wl: JSON, check: str, retries: int, d: RequeueDecision, verdict: Verdict, now: float
    ) -> None:
        """Requeue a gang with a backoff that holds neither its nodes nor its quota. Not a Retry
        with requeueAfterSeconds: Kueue (v0.17 to v0.19) waits that long *before* it evicts
        (`Reconcile` returns while requeueState.requeueAt is ahead, before its check-based
        eviction), so the gang would keep both for the whole backoff. It is evicted here, as
        Kueue evicts for its own waitForPodsReady backoff, with requeueAt the backoff's end;
        `_end_backoff` requeues it then. The annotation goes first (the check holds the gang
        back with it, should it get quota sooner); both writes are conditional on the copy the
        decision was made on, and a restart between them redoes both (the gang is admitted)."""
        assert d.requeue_after_seconds
        until = format_time(datetime.fromtimestamp(int(now) + d.requeue_after_seconds, UTC))
        message = f"{d.message}: backoff until {until}"
        written = self.writer.annotate(wl, {BACKOFF_UNTIL_ANNOTATION: until})
        if written is None:
            return
        if self.writer.evict_for_backoff(written, check, retries, message, until, now):
            log.info("workload %s/%s: %s", wl["metadata"]["namespace"], wl["metadata"]["name"], message)
            self.writer.event(wl, "Warning", "GangRequeued", message)
            metrics.eviction(verdict.phase, d.state)

    def _end_backoff(self, wl: JSON) -> float | None:
        """A gang evicted for a backoff: requeued once Kueue's requeueAt has passed (Kueue's
        own clearing cannot drop a field gangplugin set), woken then until it has. Read from
        the Workload alone, so a restarted controller carries on."""
        at = rec.requeue_at(wl)
        if at is None or GangPolicies.check_of(wl, self.view.our_checks()) is None:
            return None
        now = self.clock()
        if now < at:
            return at - now
        self.writer.end_backoff(wl)  # refused (changed meanwhile): the newer copy's event runs this again
        return None

    def _pods(self, namespace: str, gang: str, now: float) -> list[JSON]:
        return self.deleted.visible(self.view.gang_pods(namespace, gang), pod_uid, pod_active, now)

    def replace_failed(
        self, wl: JSON, state: Mapping[str, Any], policy: GangPolicy, failed: tuple[str, ...], now: float
    ) -> None:
        """Move the pods of the gang off NotReady nodes, all failed nodes in one decision of the
        core (`recover`: a spare of the gang's UltraServer first), or none of them: the pods
        there are deleted so their controller recreates them, and the domain nodeSelector keeps
        the new ones inside the gang's domain, where the extender lets them take the spare."""
        ns = wl["metadata"]["namespace"]
        gang = self.view.gang(wl)
        for upd in state.get("podSetUpdates") or []:
            gang = with_selector(gang, upd.get("nodeSelector") or {}, [str(upd.get("name"))])
        pods = [p for p in self._pods(ns, gang.name, now) if pod_active(p) and p["spec"].get("nodeName")]
        assignments = [
            Assignment(
                (p["metadata"].get("labels") or {}).get(rec.PODSET_LABEL, gang.podsets[0].name),
                i,
                p["spec"]["nodeName"],
            )
            for i, p in enumerate(sorted(pods, key=lambda p: p["metadata"]["name"]))
        ]
        result = recover(
            self.view.capacity.build(self.view.levels(policy)), gang, assignments, failed, policy.placement
        )
        if not result.feasible:
            self.writer.event(
                wl, "Warning", "NodeReplacementImpossible", f"{result.reason}; waiting for recoveryTimeout"
            )
            metrics.NODE_REPLACEMENTS.labels("Impossible").inc()
            return
        for pod in pods:
            if pod["spec"]["nodeName"] in failed:
                self.writer.delete_pod(ns, pod["metadata"]["name"])
                self.deleted.expect(pod_uid(pod), now)
        for move in result.moves:
            self.writer.event(
                wl, "Normal", "NodeReplaced", f"{move.reason}; {len(move.assignments)} pod(s) recreated there"
            )
            metrics.NODE_REPLACEMENTS.labels("Replaced").inc()
