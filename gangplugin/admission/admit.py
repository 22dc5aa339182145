"""The admission pass: every Workload whose check is Pending with quota reserved, in queue
order, decided against one snapshot that already counts capacity promised to admitted gangs
and admissions written but not yet seen (`readmodel.capacity`); the writes go out through the
outbox (`outbox.py`) without the pass waiting for them, each Workload's on its own. Each gang's
decision is the core's gate (`core.gate`) over the facts the read model gives
(`readmodel.decisions.gang_facts`, which `gangctl explain` reads too).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from gangplugin.admission.outbox import Outbox, Outcome, Sent
from gangplugin.admission.preempt import Preemptions
from gangplugin.admission.reserve import recording, records
from gangplugin.admission.writes import CheckWriter, as_admitted
from gangplugin.core.admission import with_selector
from gangplugin.core.errors import InputError
from gangplugin.core.gate import (
    GangFacts,
    GateStep,
    GateVerdict,
    PreemptionState,
    WaitingReason,
    gate,
    waiting_reason,
)
from gangplugin.core.names import NEVER_WHOLE_REASON, UNKNOWN_KEY_REASON
from gangplugin.core.states import CheckState
from gangplugin.core.topology import Snapshot
from gangplugin.kube.client import JSON, WORKLOADS, ApiError, Client
from gangplugin.readmodel.capacity import Assumed, Promise
from gangplugin.readmodel.decisions import gang_facts, preemption_state, reservations
from gangplugin.readmodel.model import Entry, Queue, ReadModel, fingerprint
from gangplugin.runtime import metrics
from gangplugin.runtime.admissions import AdmissionsInFlight

log = logging.getLogger(__name__)
#: The Warning Event (its reason) of a gang held for something that is the user's to fix.
_WARNINGS = {GateStep.KEYS: UNKNOWN_KEY_REASON, GateStep.WHOLE: NEVER_WHOLE_REASON}

#: Seconds before the pass decides again the gangs whose write failed with an error.
RETRY_AFTER_ERROR = 0.5


@dataclass
class _Decided:
    """What deciding a pass's candidates gave: the writes in order, when to wake, and each
    waiting gang's time since its quota was reserved, by why it waits."""

    writes: list[Sent] = field(default_factory=list)
    wake: list[float] = field(default_factory=list)
    waits: dict[WaitingReason, list[float]] = field(default_factory=dict)


class AdmissionPass:
    def __init__(
        self,
        model: ReadModel,
        writer: CheckWriter,
        client: Client,
        clock: Callable[[], float],
        in_flight: AdmissionsInFlight | None = None,
        rerun: Callable[[float], None] = lambda _after: None,
    ) -> None:
        self.model = model
        self.capacity = model.capacity
        self.writer = writer
        self.client = client
        self.clock = clock
        # Told of each admission before it is written (the gang reservations keep its capacity
        # off plain pods from then on); `announced`: the Workloads those were decided on.
        self.in_flight = in_flight or AdmissionsInFlight()
        self.announced: dict[str, JSON] = {}
        self._announced_lock = threading.Lock()
        # Called when a write was refused or failed: the pass decides those gangs again (after
        # that many seconds: at once for a refusal, a moment later after an error).
        self.rerun = rerun
        self.outbox = Outbox(self._sent)
        self.preemptions = Preemptions(model, writer, client)

    def run(self) -> float | None:
        started = time.monotonic()
        now = self.clock()
        if not self.model.our_checks():
            metrics.waiting({})
            return None
        queue = self.model.queue(assumed=self._still_assumed)
        for key in set(self.capacity.assumed) - set(queue.entries):
            with self.capacity.locked():
                self.capacity.forget(key)  # deleted or no longer ours
            with self._announced_lock:
                self.announced.pop(key, None)
        if not queue.order.candidates:
            metrics.waiting({})
            return None
        decided = self._decide(queue, now)
        # Side by side when the gang reservations of this process hear of each admission first.
        self.outbox.send(decided.writes, ordered=not self.in_flight.listened())
        metrics.waiting(decided.waits)
        took = time.monotonic() - started
        metrics.ADMISSION_PASS.observe(took)
        log.log(
            logging.INFO if took > 1.0 else logging.DEBUG,
            "admission pass: %d candidates, %d admitted gangs, %d writes sent, %.3fs",
            len(queue.order.candidates),
            len(queue.order.admitted),
            len(decided.writes),
            took,
        )
        return max(0.05, min(decided.wake) - now) if decided.wake else None

    def _sent(self, sent: Sent, outcome: Outcome, passed_over: bool) -> None:
        """A write ended (on a writer thread). A refused (False) or failed admission gives its
        capacity back (a failure of unknown outcome only once the API server says it did not
        happen); either way the pass decides again, on fresh copies, as it does when a pass
        left the gang be while the write was in flight (the event that ran it may be its)."""
        if sent.admission and outcome is not True:
            with self.capacity.locked():
                self._settle_failed_admission(sent.key, sent.resource_version, outcome)
        if isinstance(outcome, Exception):
            self.rerun(RETRY_AFTER_ERROR)
        elif outcome is False or passed_over:
            self.rerun(0.0)

    def _decide(self, queue: Queue, now: float) -> _Decided:
        """Decide every candidate in order on one snapshot (each admission charged before the next
        is decided); the writes go out afterwards, since a write waits on the API server and the
        decisions no longer depend on each other."""
        unready = {k: list(v) for k, v in queue.order.unready.items()}
        gov = preemption_state(self.model, queue, now)
        seen = {k: e.record.resource_version for k, e in queue.entries.items()}
        for key, hold in self.outbox.holds(seen).items():
            gov.holds.setdefault(key, hold)  # sent, not in the cache yet
        book = reservations(self.model, queue, now, gov, sent=self.outbox.reservations(seen))
        out = _Decided()
        with self.capacity.locked():
            snapshot = self._snapshots(queue.admitted())
            # Refreshed once for the pass before any decision: a cost of the pass (its
            # histogram), not of the first gang decided.
            for q in queue.order.candidates:
                with contextlib.suppress(InputError):
                    snapshot(self.model.levels(self.model.policy(q.policy)))
            for q in queue.order.candidates:
                entry = queue.entries[q.key]
                if self.outbox.pass_over(q.key):
                    continue  # its write's answer decides what is next (then a pass runs again)
                decide_start, cpu_start = time.monotonic(), time.thread_time()
                facts = gang_facts(self.model, entry.wl, q.policy, snapshot, unready, now)
                verdict = gate(facts, gov, reservations=book)
                metrics.ADMISSION_DECISION.observe(time.monotonic() - decide_start)
                metrics.ADMISSION_DECISION_CPU.observe(time.thread_time() - cpu_start)
                self._act(entry, facts, verdict, gov, unready, out)
        return out

    def _snapshots(self, admitted: list[Entry]) -> Callable[[tuple[str, ...]], Snapshot]:
        """The pass's snapshot per level order (under the capacity lock): the kept one, with
        exactly the admitted gangs' promises and the assumed admissions charged."""
        promises: list[Promise] | None = None
        snapshots: dict[tuple[str, ...], Snapshot] = {}

        def snapshot(levels: tuple[str, ...]) -> Snapshot:
            nonlocal promises
            if levels not in snapshots:
                if promises is None:
                    promises = self.model.promises(admitted)
                snapshots[levels] = self.capacity.snapshot(levels, promises)
            return snapshots[levels]

        return snapshot

    def _act(
        self,
        entry: Entry,
        facts: GangFacts,
        verdict: GateVerdict,
        gov: PreemptionState,
        unready: dict[str | None, list[str]],
        out: _Decided,
    ) -> None:
        """The write a verdict calls for (an admission is charged at once), and its wake-up."""
        wl, check, key = entry.wl, entry.check.name, entry.record.key
        if verdict.wake_at is not None:
            out.wake.append(verdict.wake_at)
        if not verdict.rejected and (verdict.decision is None or not verdict.decision.ready):
            reserved = entry.record.quota_reserved_at
            out.waits.setdefault(waiting_reason(verdict), []).append(
                max(0.0, facts.now - reserved) if reserved else 0.0
            )
        plan, rv = verdict.preemption, entry.record.resource_version
        # with what it records of its reservation: the passes read that until the cache does
        sent = partial(Sent, key, rv, reserves=records(wl, verdict), reservation=verdict.reservation)
        if plan is not None and plan.preempts:
            gov.started(key, plan, verdict.hold)
            preempt = partial(
                self.preemptions.execute,
                check=check,
                plan=plan,
                hold=verdict.hold,
                message=verdict.message,
                now=facts.now,
            )
            out.writes.append(sent(recording(self.writer, wl, verdict, preempt), hold=verdict.hold))
        elif verdict.rejected:
            reject = partial(self.writer.reject, wl, check, verdict.message, facts.now)
            out.writes.append(sent(reject))
        elif verdict.decision is None or not verdict.decision.ready:
            pending = partial(
                self.writer.write_check,
                check=check,
                state=CheckState.PENDING,
                message=verdict.message,
                now=facts.now,
                warning=_WARNINGS.get(verdict.step),
                detail=verdict.detail,
            )
            out.writes.append(sent(recording(self.writer, wl, verdict, pending)))
        else:
            self._assume(entry, verdict, unready)
            admit = partial(
                self.writer.admit, wl, check, verdict.decision, facts.now, entry.record.quota_reserved_at
            )
            out.writes.append(sent(admit, admission=True))

    def _assume(self, entry: Entry, verdict: GateVerdict, unready: dict[str | None, list[str]]) -> None:
        """Charge an admission being written until the cache shows it (under the capacity lock)."""
        decision, gang, policy = verdict.decision, verdict.gang, verdict.policy
        assert decision is not None and decision.placement is not None
        assert gang is not None and policy is not None
        wl, key = entry.wl, entry.record.key
        updates = [u.to_dict() for u in decision.pod_set_updates]
        with self._announced_lock:
            self.announced[key] = wl
        self.in_flight.admitting(as_admitted(wl, entry.check.name, updates))
        self.capacity.assume(
            key,
            Assumed(
                resource_version=entry.record.resource_version,
                certain=True,
                fingerprint=fingerprint(updates, {}),
                namespace=entry.record.namespace,
                gang=with_selector(gang, decision.domain),
                placement=decision.placement,
                policy=policy.placement,
            ),
        )
        if policy.sequential:
            unready.setdefault(entry.check.policy, []).append(key)

    def _still_assumed(self, key: str, wl: JSON) -> bool:
        """Whether an admission this controller wrote is not yet in the cached Workload (then its
        capacity stays charged and the gang is not a candidate); forgets it once it is."""
        a = self.capacity.assumed.get(key)
        if a is None:
            return False
        if wl["metadata"].get("resourceVersion") != a.resource_version:
            with self.capacity.locked():
                self.capacity.forget(key)
            with self._announced_lock:
                self.announced.pop(key, None)  # the watch shows the Workload after the write now
            return False
        if a.certain or self.outbox.busy(key):
            return True  # written, or its answer not in yet
        try:  # the write's outcome is unknown: the API server says whether it happened
            live = self.client.request(
                "GET", WORKLOADS.path(wl["metadata"]["namespace"], wl["metadata"]["name"])
            )
        except ApiError as err:
            if err.status == 404:
                self._unassume(key, a.resource_version)
                return False
            return True  # still unknown: keep counting it
        if live["metadata"].get("resourceVersion") == a.resource_version:
            self._unassume(key, a.resource_version)  # not written: the gang is decided again
            return False
        return True

    def _unassume(self, key: str, resource_version: str) -> None:
        with self.capacity.locked():
            self.capacity.forget(key)
        self._withdraw(key, resource_version)

    def _settle_failed_admission(self, key: str, resource_version: str, outcome: Outcome) -> None:
        """After an admission's write decided on `resource_version`: refused (False, or a 4xx)
        or a no-op (None) means nothing was written; any other error leaves the outcome unknown
        until the Workload is read again. An admission decided since on a newer copy is left be."""
        a = self.capacity.assumed.get(key)
        if a is None or a.resource_version != resource_version:
            return
        if isinstance(outcome, Exception) and not (isinstance(outcome, ApiError) and outcome.status < 500):
            self.capacity.assumed[key] = dataclasses.replace(a, certain=False)
        else:
            self.capacity.forget(key)
            self._withdraw(key, resource_version)

    def _withdraw(self, key: str, resource_version: str) -> None:
        """The admission announced for `key` on that copy was not written: tell those it was
        announced to."""
        with self._announced_lock:
            wl = self.announced.get(key)
            if wl is None or wl["metadata"].get("resourceVersion") != resource_version:
                return
            del self.announced[key]
        self.in_flight.withdrawn(wl)
