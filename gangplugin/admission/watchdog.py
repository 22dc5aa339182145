"""The watchdog of admitted gangs: readiness, unscheduled and recovery timeouts (`core.watchdog`),
node replacement from spares (`core.placement.recover`), and draining before a plan's block ends
(`core.drain`). Each gang wakes itself at its next deadline; nothing is polled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from gangplugin.admission.writes import CheckWriter
from gangplugin.core.admission import with_selector
from gangplugin.core.drain import DrainDecision
from gangplugin.core.errors import InputError
from gangplugin.core.names import BACKOFF_UNTIL_ANNOTATION, PLAN_DRAINING_REASON, READY_AT_ANNOTATION
from gangplugin.core.placement import Assignment, recover
from gangplugin.core.policy import GangPolicy, RequeueDecision, requeue_decision
from gangplugin.core.states import CheckState
from gangplugin.core.timeutil import format_time
from gangplugin.core.watchdog import WatchVerdict, watch
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON
from gangplugin.kube.expectations import DeletionExpectations
from gangplugin.readmodel.checks import OurCheck
from gangplugin.readmodel.model import ReadModel
from gangplugin.readmodel.records import PodRecord, WorkloadRecord
from gangplugin.runtime import metrics

log = logging.getLogger(__name__)


class Watchdog:
    def __init__(self, model: ReadModel, writer: CheckWriter, clock: Callable[[], float]) -> None:
        self.model = model
        self.writer = writer
        self.clock = clock
        self.deleted = DeletionExpectations()  # pods moved off failed nodes, until the watch shows it

    def run(self, key: str) -> float | None:
        found = self.model.workload(key)
        if found is None or not found[1].admitted or found[1].finished:
            metrics.GANG_READY.forget(key)
            return None if found is None else self._end_backoff(*found)
        wl, record = found
        check = self.model.check_of(wl)
        if check is None or check.entry is None or check.entry.state is not CheckState.READY:
            return None
        if spent := rec.spent_holds(wl):
            self.writer.clear_annotations(wl, spent)  # the Workload's event runs this again
        try:
            policy = self.model.policy(check.policy)
        except InputError:
            return None
        now = self.clock()
        obs = self.model.observe(record, self._pods(record, now))
        if obs.ready >= obs.size and not obs.ever_ready and record.pods_ready_means_running:
            # Kueue's PodsReady cannot say it for this kind: said here, once (the Workload's event
            # runs this again), and taken as said now.
            self.writer.annotate(
                wl, {READY_AT_ANNOTATION: format_time(datetime.fromtimestamp(int(now), UTC))}
            )
            obs = replace(obs, ever_ready=True)
        metrics.GANG_READY.update(key, obs.admitted_at, obs.ready >= obs.size, now)
        try:
            drain = self.model.gangs.drain(wl, now, obs.admitted_at)
        except InputError:
            drain = None  # admitted before the annotation went bad: the readiness watch goes on
        if drain is not None and drain.evict:
            self._drain_out(wl, check.name, drain, now)
            return None
        verdict = watch(policy, obs, now)
        if verdict.replace:
            try:
                self.replace_failed(wl, check, policy, obs.failed_nodes, now)
            except InputError as err:  # the recovery timeout still runs; say why nothing moved
                self.writer.event(wl, "Warning", "NodeReplacementImpossible", str(err))
                metrics.NODE_REPLACEMENTS.labels("Impossible").inc()
        if not verdict.expired:
            # Wake at the next deadline: the watchdog's, or the plans' termination start.
            wake = [] if verdict.recheck_at is None else [verdict.recheck_at]
            if drain is not None and drain.evict_at is not None:
                wake.append(drain.evict_at.timestamp())
            return max(0.05, min(wake) - now) if wake else None
        self._time_out(wl, record, check, policy, verdict, now)
        return None

    def _drain_out(self, wl: JSON, check: str, drain: DrainDecision, now: float) -> None:
        """Requeue a gang whose plan capacity is about to end (Kueue evicts it on Retry)."""
        end = format_time(drain.block_end) if drain.block_end is not None else "?"
        message = f"block ends at {end}, draining: {drain.reason}; requeued for the next block"
        if self.writer.write_check(wl, check, CheckState.RETRY, message, now=now):
            self.writer.event(wl, "Normal", PLAN_DRAINING_REASON, message)
            metrics.eviction(PLAN_DRAINING_REASON, CheckState.RETRY)

    def _time_out(
        self,
        wl: JSON,
        record: WorkloadRecord,
        check: OurCheck,
        policy: GangPolicy,
        verdict: WatchVerdict,
        now: float,
    ) -> None:
        retries = check.entry.retry_count if check.entry is not None else 0
        d = requeue_decision(policy, retries, verdict.reason, now, record.created_at)
        if d.state is CheckState.RETRY and d.requeue_after_seconds:
            self._back_off(wl, check.name, retries, d, verdict, now)
        elif self.writer.write_check(wl, check.name, d.state, d.message, now=now):
            reason = "GangRequeued" if d.state is CheckState.RETRY else "GangDeactivated"
            self.writer.event(wl, "Warning", reason, d.message)
            metrics.eviction(verdict.phase, d.state)

    def _back_off(
        self, wl: JSON, check: str, retries: int, d: RequeueDecision, verdict: WatchVerdict, now: float
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

    def _end_backoff(self, wl: JSON, record: WorkloadRecord) -> float | None:
        """A gang evicted for a backoff: requeued once Kueue's requeueAt has passed (Kueue's
        own clearing cannot drop a field gangplugin set), woken then until it has. Read from
        the Workload alone, so a restarted controller carries on."""
        at = rec.requeue_at(wl)
        if at is None or self.model.checks.of(record, self.model.our_checks()) is None:
            return None
        now = self.clock()
        if now < at:
            return at - now
        self.writer.end_backoff(wl)  # refused (changed meanwhile): the newer copy's event runs this again
        return None

    def _pods(self, record: WorkloadRecord, now: float) -> list[PodRecord]:
        """The gang's active pods, less those deleted here that the watch still shows."""
        pods = self.model.gang_pods(record.namespace, record.gang_id)
        return self.deleted.visible(pods, lambda p: p.uid, lambda p: p.active, now)

    def replace_failed(
        self, wl: JSON, check: OurCheck, policy: GangPolicy, failed: tuple[str, ...], now: float
    ) -> None:
        """Move the pods of the gang off NotReady nodes, all failed nodes in one decision of the
        core (`recover`: a spare of the gang's UltraServer first), or none of them: the pods
        there are deleted so their controller recreates them, and the domain nodeSelector keeps
        the new ones inside the gang's domain, where the extender lets them take the spare."""
        record = self.model.record(wl)
        gang = self.model.gangs.gang(wl)
        for upd in check.entry.pod_set_updates if check.entry is not None else ():
            gang = with_selector(gang, upd.get("nodeSelector") or {}, [str(upd.get("name"))])
        pods = sorted((p for p in self._pods(record, now) if p.placed_on), key=lambda p: p.name)
        assignments = [
            Assignment(p.podset or gang.podsets[0].name, i, p.node or "") for i, p in enumerate(pods)
        ]
        result = recover(
            self.model.capacity.build(self.model.levels(policy)), gang, assignments, failed, policy.placement
        )
        if not result.feasible:
            self.writer.event(
                wl, "Warning", "NodeReplacementImpossible", f"{result.reason}; waiting for recoveryTimeout"
            )
            metrics.NODE_REPLACEMENTS.labels("Impossible").inc()
            return
        for pod in pods:
            if pod.node in failed:
                self.writer.delete_pod(record.namespace, pod.name)
                self.deleted.expect(pod.uid, now)
        for move in result.moves:
            self.writer.event(
                wl, "Normal", "NodeReplaced", f"{move.reason}; {len(move.assignments)} pod(s) recreated there"
            )
            metrics.NODE_REPLACEMENTS.labels("Replaced").inc()
