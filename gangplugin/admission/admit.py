"""The admission pass: every Workload whose check is Pending with quota reserved, in queue
order, decided against one snapshot that already counts capacity promised to admitted gangs
and admissions written but not yet seen (see `capacity.py`); the writes go out concurrently,
each Workload's on its own. Each gang's decision is the core's gate (`core.gate`) over the
facts `evaluate` reads from the view; `explain` answers what the pass would decide for one
gang now, through the same `evaluate`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from gangplugin.admission.capacity import Assumed, Promise
from gangplugin.admission.preempt import Preemptions
from gangplugin.admission.view import (
    AdmissionView,
    AdmittedGang,
    condition_time,
    fingerprint,
    timestamp,
    workload_key,
)
from gangplugin.admission.writes import CheckWriter
from gangplugin.core.admission import (
    AdmissionQueue,
    QueuedWorkload,
    admission_queue,
    with_selector,
)
from gangplugin.core.drain import DrainDecision
from gangplugin.core.errors import InputError
from gangplugin.core.gate import Backoff, GangFacts, PreemptionState, Verdict, gate, waiting_reason
from gangplugin.core.names import BACKOFF_UNTIL_ANNOTATION, UNKNOWN_KEY_REASON
from gangplugin.core.placement import Gang
from gangplugin.core.policy import GangPolicy
from gangplugin.core.preemption import Contender
from gangplugin.core.quota import next_quota_change
from gangplugin.core.topology import Snapshot
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.admitted import as_admitted
from gangplugin.kube.client import JSON, WORKLOADS, ApiError, Client
from gangplugin.kube.gangpolicies import GangPolicies
from gangplugin.runtime import metrics
from gangplugin.runtime.admissions import AdmissionsInFlight

log = logging.getLogger(__name__)


def _outcome(write: Callable[[], bool | None]) -> bool | Exception | None:
    """A write's result, or the error it raised (logged): one Workload's failure is its own."""
    try:
        return write()
    except Exception as err:  # any failure of one write is that Workload's alone
        log.warning("admission write failed: %s", err)
        return err


def _backoff(wl: JSON) -> Backoff | None:
    """The backoff of a gang requeued after a timeout, from its Workload (unreadable: none,
    rather than a gang held for good)."""
    raw = (wl["metadata"].get("annotations") or {}).get(BACKOFF_UNTIL_ANNOTATION)
    if not raw:
        return None
    try:
        return Backoff(rec.epoch(raw, f"metadata.annotations.{BACKOFF_UNTIL_ANNOTATION}"), raw)
    except InputError:
        return None


@dataclass(frozen=True, slots=True)
class Entry:
    """A Workload carrying our check, and the check's name."""

    wl: JSON
    check: str


def _admitted(q: QueuedWorkload, entry: Entry) -> AdmittedGang:
    return AdmittedGang(q.key, entry.wl, entry.check, q.policy, q.ever_ready)


class AdmissionPass:
    def __init__(
        self,
        view: AdmissionView,
        writer: CheckWriter,
        client: Client,
        clock: Callable[[], float],
        in_flight: AdmissionsInFlight | None = None,
    ) -> None:
        self.view = view
        self.writer = writer
        self.client = client
        self.clock = clock
        # Told of each admission before it is written (the gang reservations keep its capacity
        # off plain pods from then on); `announced`: the Workloads those were decided on.
        self.in_flight = in_flight or AdmissionsInFlight()
        self.announced: dict[str, JSON] = {}
        self._writers = ThreadPoolExecutor(8, thread_name_prefix="admission-write")
        self.preemptions = Preemptions(view, writer, client)

    def queue(
        self, ours: Mapping[str, str | None], *, settle: bool
    ) -> tuple[AdmissionQueue, dict[str, Entry]]:
        """The Workloads carrying our check, in the core's admission order, with each one's
        Workload and check name. `settle`: forget assumed admissions the cache now shows (the
        pass); explain only reads."""
        queued: list[QueuedWorkload] = []
        entries: dict[str, Entry] = {}
        for wl in self.view.workloads.items():
            found = GangPolicies.check_of(wl, ours)
            if found is None:
                continue
            name, state = found
            key = workload_key(wl)
            entries[key] = Entry(wl, name)
            queued.append(
                QueuedWorkload(
                    key,
                    ours[name],
                    str(state.get("state", "")),
                    rec.is_true(wl, "QuotaReserved"),
                    rec.is_true(wl, "Finished"),
                    rec.is_true(wl, "Evicted"),
                    condition_time(wl, "QuotaReserved"),
                    timestamp(wl, "creationTimestamp"),
                    condition_time(wl, "Admitted"),
                    self.view.ever_ready(wl),
                    self._still_assumed(key, wl) if settle else key in self.view.capacity.assumed,
                )
            )
        if settle:
            for key in set(self.view.capacity.assumed) - set(entries):
                self.view.capacity.forget(key)  # deleted or no longer ours
                self.announced.pop(key, None)
        return admission_queue(queued), entries

    def run(self) -> float | None:
        started = time.monotonic()
        now = self.clock()
        ours = self.view.our_checks()
        if not ours:
            metrics.waiting({})
            return None
        queue, entries = self.queue(ours, settle=True)
        if not queue.candidates:
            metrics.waiting({})
            return None
        admitted = [_admitted(q, entries[q.key]) for q in queue.admitted]
        unready = {k: list(v) for k, v in queue.unready.items()}
        gov = self._governance(queue, entries, now)
        # Decide every candidate in order on one snapshot (each admission charged before the next
        # is decided), then write the decisions concurrently: a write waits on the API server,
        # and the decisions no longer depend on each other.
        writes: list[tuple[str | None, Callable[[], bool | None]]] = []
        wake: list[float] = []  # when a gang the plans hold back may be decided otherwise
        waits: dict[str, list[float]] = {}  # reason -> each waiting gang's time since quota reserved
        with self.view.capacity.locked():
            promises: list[Promise] | None = None
            snapshots: dict[tuple[str, ...], Snapshot] = {}

            def snapshot(levels: tuple[str, ...]) -> Snapshot:
                nonlocal promises
                if levels not in snapshots:
                    if promises is None:
                        promises = self.view.promises(admitted)
                    snapshots[levels] = self.view.capacity.snapshot(levels, promises)
                return snapshots[levels]

            # Refreshed once for the pass before any decision: a cost of the pass (its
            # histogram), not of the first gang decided.
            for q in queue.candidates:
                with contextlib.suppress(InputError):
                    snapshot(self.view.levels(self.view.policy(q.policy)))
            for q in queue.candidates:
                wl, check = entries[q.key].wl, entries[q.key].check
                decide_start, cpu_start = time.monotonic(), time.thread_time()
                verdict = self.evaluate(wl, q.policy, snapshot, unready, now, gov)
                metrics.ADMISSION_DECISION.observe(time.monotonic() - decide_start)
                metrics.ADMISSION_DECISION_CPU.observe(time.thread_time() - cpu_start)
                if verdict.wake_at is not None:
                    wake.append(verdict.wake_at)
                if not verdict.rejected and (verdict.decision is None or not verdict.decision.ready):
                    reserved = condition_time(wl, "QuotaReserved")
                    waits.setdefault(waiting_reason(verdict), []).append(
                        max(0.0, now - reserved) if reserved else 0.0
                    )
                plan = verdict.preemption
                if plan is not None and plan.preempts:
                    gov.started(q.key, plan, verdict.hold)
                    preempt = partial(
                        self.preemptions.execute, wl, check, plan, verdict.hold, verdict.message, now
                    )
                    writes.append((None, preempt))
                elif verdict.rejected:
                    writes.append((None, partial(self.writer.reject, wl, check, verdict.message, now)))
                elif verdict.decision is None or not verdict.decision.ready:
                    warning = UNKNOWN_KEY_REASON if verdict.step == "keys" else None
                    pending = partial(
                        self.writer.write_check,
                        wl,
                        check,
                        "Pending",
                        verdict.message,
                        now=now,
                        warning=warning,
                    )
                    writes.append((None, pending))
                else:
                    self._assume(q, wl, check, verdict, unready)
                    writes.append((q.key, partial(self.writer.admit, wl, check, verdict.decision, now)))
        outcomes = self._write(writes)
        with self.view.capacity.locked():
            for (admitted_key, _), outcome in zip(writes, outcomes, strict=True):
                if admitted_key is not None and outcome is not True:
                    self._settle_failed_admission(admitted_key, outcome)
        # A refused write (the Workload changed meanwhile) only over-counted capacity in this
        # pass; the pass runs again on fresh copies.
        rerun = any(o is False or isinstance(o, Exception) for o in outcomes)
        metrics.waiting(waits)
        took = time.monotonic() - started
        metrics.ADMISSION_PASS.observe(took)
        log.log(
            logging.INFO if took > 1.0 else logging.DEBUG,
            "admission pass: %d candidates, %d admitted gangs, %.3fs, rerun=%s",
            len(queue.candidates),
            len(admitted),
            took,
            rerun,
        )
        if rerun:
            return 0.5
        return max(0.05, min(wake) - now) if wake else None

    def _write(
        self, writes: list[tuple[str | None, Callable[[], bool | None]]]
    ) -> list[bool | Exception | None]:
        """Every write runs to its end, each on its own: one Workload's failure holds back no
        other. The admissions go out one after another in the order they were decided, beside
        the other writes: the Workload watch then shows them in that order, so the extender,
        which plans an admitted gang only once its admission has arrived, has every admission
        decided before it by then and leaves their promised capacity alone."""
        admissions = [i for i, (key, _) in enumerate(writes) if key is not None]
        others = [self._writers.submit(_outcome, fn) for key, fn in writes if key is None]
        in_order = {i: _outcome(writes[i][1]) for i in admissions}
        rest = iter([f.result() for f in others])
        return [in_order[i] if i in in_order else next(rest) for i in range(len(writes))]

    def evaluate(
        self,
        wl: JSON,
        policy_name: str | None,
        snapshot: Callable[[tuple[str, ...]], Snapshot],
        unready: Mapping[str | None, list[str]],
        now: float,
        gov: PreemptionState,
    ) -> Verdict:
        """The one decision for one waiting gang: its facts read from the view as plain values
        (errors included), through the core's gate (`core.gate`: policy, a pod group's pods,
        backoff, Sequential, plan drain, placement off the domains held for other gangs'
        preemptions, preemption).
        The pass acts on it; explain shows it."""
        key = workload_key(wl)
        policy: GangPolicy | InputError
        snap: Snapshot | None
        try:
            policy = self.view.policy(policy_name)
            snap = snapshot(self.view.levels(policy))
        except InputError as err:
            policy, snap = err, None
        gang: Gang | InputError
        try:
            gang = self.view.gang(wl)
        except InputError as err:
            gang = err
        drain: DrainDecision | InputError | None
        change = None
        try:
            drain = self.view.drain(wl, now)
        except InputError as err:
            drain = err
        if isinstance(drain, DrainDecision) and not drain.admit:
            cluster_queue, _, plans = self.view.plans_of(wl)
            at = next_quota_change(plans, cluster_queue, datetime.fromtimestamp(now, UTC))
            change = None if at is None else at.timestamp()
        contender = Contender(key, rec.priority(wl), rec.quota_of(wl)[0], timestamp(wl, "creationTimestamp"))
        facts = GangFacts(
            contender,
            policy,
            gang,
            snap,
            now,
            condition_time(wl, "QuotaReserved"),
            _backoff(wl),
            tuple(unready.get(policy_name, ())),
            drain,
            change,
            tuple(self.view.podsets_without_pods(wl)),
        )
        return gate(facts, gov)

    def explain(self, wl: JSON, check: str, now: float) -> Verdict | None:
        """What the pass would decide for this waiting gang now (None: not our check), on a
        fresh snapshot with every admitted gang's promise; nothing is charged or written."""
        ours = self.view.our_checks()
        if check not in ours:
            return None
        queue, entries = self.queue(ours, settle=False)
        admitted = [_admitted(q, entries[q.key]) for q in queue.admitted]
        unready = {k: list(v) for k, v in queue.unready.items()}
        snapshots: dict[tuple[str, ...], Snapshot] = {}

        def snapshot(levels: tuple[str, ...]) -> Snapshot:
            if levels not in snapshots:  # one per explain: the victim search reads the same one
                snapshots[levels] = self.view.promised_snapshot(levels, admitted)
            return snapshots[levels]

        gov = self._governance(queue, entries, now)
        return self.evaluate(wl, ours[check], snapshot, unready, now, gov)

    def _governance(self, queue: AdmissionQueue, entries: Mapping[str, Entry], now: float) -> PreemptionState:
        """The preemption holds of the waiting gangs (each lives as long as its policy's
        readyTimeout: a preemptor that never fits gives its domain back)."""
        waiting = []
        for q in queue.candidates:
            try:
                ttl = self.view.policy(q.policy).ready_timeout
            except InputError:
                continue
            waiting.append((entries[q.key].wl, ttl))
        return self.preemptions.holds(waiting, now)

    def _assume(
        self,
        q: QueuedWorkload,
        wl: JSON,
        check: str,
        verdict: Verdict,
        unready: dict[str | None, list[str]],
    ) -> None:
        """Charge an admission being written until the cache shows it (under the capacity lock)."""
        decision, gang, policy = verdict.decision, verdict.gang, verdict.policy
        assert decision is not None and decision.placement is not None
        assert gang is not None and policy is not None
        updates = [u.to_dict() for u in decision.pod_set_updates]
        self.announced[q.key] = wl
        self.in_flight.admitting(as_admitted(wl, check, updates))
        self.view.capacity.assume(
            q.key,
            Assumed(
                wl["metadata"]["resourceVersion"],
                True,
                (fingerprint(updates, Counter()), ()),
                wl["metadata"]["namespace"],
                with_selector(gang, decision.domain),
                decision.placement,
                policy.placement,
            ),
        )
        if policy.sequential:
            unready.setdefault(q.policy, []).append(q.key)

    def _still_assumed(self, key: str, wl: JSON) -> bool:
        """Whether an admission this controller wrote is not yet in the cached Workload (then its
        capacity stays charged and the gang is not a candidate); forgets it once it is."""
        a = self.view.capacity.assumed.get(key)
        if a is None:
            return False
        if wl["metadata"].get("resourceVersion") != a.resource_version:
            with self.view.capacity.locked():
                self.view.capacity.forget(key)
            self.announced.pop(key, None)  # the watch shows the Workload after the write now
            return False
        if a.certain:
            return True
        try:  # the write's outcome is unknown: the API server says whether it happened
            live = self.client.request(
                "GET", WORKLOADS.path(wl["metadata"]["namespace"], wl["metadata"]["name"])
            )
        except ApiError as err:
            if err.status == 404:
                with self.view.capacity.locked():
                    self.view.capacity.forget(key)
                self._withdraw(key)
                return False
            return True  # still unknown: keep counting it
        if live["metadata"].get("resourceVersion") == a.resource_version:
            with self.view.capacity.locked():
                self.view.capacity.forget(key)  # not written: the gang is decided again
            self._withdraw(key)
            return False
        return True

    def _settle_failed_admission(self, key: str, outcome: bool | Exception | None) -> None:
        """After an admission's write: refused (False, or a 4xx) or a no-op (None) means nothing
        was written; any other error leaves the outcome unknown until the Workload is read again."""
        a = self.view.capacity.assumed.get(key)
        if a is None:
            return
        if isinstance(outcome, Exception) and not (isinstance(outcome, ApiError) and outcome.status < 500):
            self.view.capacity.assumed[key] = dataclasses.replace(a, certain=False)
        else:
            self.view.capacity.forget(key)
            self._withdraw(key)

    def _withdraw(self, key: str) -> None:
        """The admission announced for `key` was not written: tell those it was announced to."""
        wl = self.announced.pop(key, None)
        if wl is not None:
            self.in_flight.withdrawn(wl)
