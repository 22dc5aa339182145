"""The writes of preemption (the search is `core.preemption.find_victims`; whether a gang
preempts, resumes its recorded preemption or waits is the gate's preemption step, `core.gate`;
what a pass knows of it, the running gangs, the queues' rules and the live holds recorded on
preempting Workloads, is read by `readmodel.decisions.preemption_state`).

What it writes, in this order, so a restart in between leaves a state the next pass resumes:
1. the hold on the preemptor (conditional on its resourceVersion): from then on no other gang
   is placed in the held domain, and the victims are named where the API server keeps them;
2. the preemptor's check message ("preempting ...", why each victim);
3. each victim evicted the way Kueue's own preemption evicts it: condition `Evicted=True`,
   reason `Preempted` (Kueue stops the job, releases the quota and requeues the Workload; no
   admission-check `Retry`, so the victim is charged no retryCount and no backoff);
4. an Event on each victim naming the preemptor and on the preemptor naming the victims.
A pass that finds the hold with a victim still admitted in the domain evicts it (resume).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from gangplugin.admission.writes import CheckWriter
from gangplugin.core.names import PREEMPTED_REASON, PREEMPTION_ANNOTATION
from gangplugin.core.preemption import Hold, PreemptionPlan
from gangplugin.core.states import CheckState
from gangplugin.core.timeutil import format_time
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON, WORKLOADS, ApiError, Client
from gangplugin.kube.informer import object_key
from gangplugin.readmodel.model import ReadModel

log = logging.getLogger(__name__)
# Evictions are applied by a field manager of their own: the check's applies (which own only the
# check's entry) then never remove the Evicted condition, and these never remove podSetUpdates.
FIELD_MANAGER = "gangplugin-preemption"


class Preemptions:
    def __init__(self, model: ReadModel, writer: CheckWriter, client: Client) -> None:
        self.model = model
        self.writer = writer
        self.client = client

    # -- writes ----------------------------------------------------------------------------------

    def execute(
        self, wl: JSON, check: str, plan: PreemptionPlan, hold: Hold | None, message: str, now: float
    ) -> bool | None:
        """Carry out a preemption (see the module doc for the order); `hold`: a new hold to
        record (None: resuming the recorded one). False when the preemptor changed meanwhile."""
        if hold is not None:
            try:
                wl = self.client.request(
                    "PATCH",
                    WORKLOADS.path(wl["metadata"]["namespace"], wl["metadata"]["name"]),
                    body={
                        "metadata": {
                            "resourceVersion": wl["metadata"]["resourceVersion"],
                            "annotations": {PREEMPTION_ANNOTATION: rec.hold_annotation(hold)},
                        }
                    },
                    content_type="application/merge-patch+json",
                )
            except ApiError as err:
                if err.status in (404, 409):
                    return False
                raise
        self.writer.write_check(wl, check, CheckState.PENDING, message, now=now)
        preemptor = object_key(wl)
        ok = True
        for victim in plan.victims:
            ok = self._evict(victim.key, preemptor, plan, now) and ok
            self.writer.event(wl, "Normal", "Preempting", f"preempting {victim.why}")
        return ok

    def _evict(self, key: str, preemptor: str, plan: PreemptionPlan, now: float) -> bool:
        """Evict one victim as Kueue's own preemption does (`workload.Evict`): `Evicted=True`
        with reason `Preempted`, and its admission check back to Pending in the same write (so
        the check decides again when the victim gets quota back; Ready->Pending is no Retry,
        no retryCount). Conditional on the victim's resourceVersion."""
        victim = self.model.workloads.get(key)
        if victim is None or self.model.record(victim).evicted:
            return True
        found = self.model.check_of(victim)
        where = f"{plan.level}={plan.domain}" if plan.level else f"{len(plan.nodes)} node(s)"
        message = f"Preempted by gangplugin to free {where} for {preemptor}"
        at = format_time(datetime.fromtimestamp(int(now), UTC))
        meta = victim["metadata"]
        status: JSON = {
            "conditions": [
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": PREEMPTED_REASON,
                    "message": message,
                    "lastTransitionTime": at,
                    "observedGeneration": meta.get("generation", 0),
                }
            ]
        }
        if found is not None:
            status["admissionChecks"] = [
                {
                    "name": found.name,
                    "state": CheckState.PENDING,
                    "message": f"Reset to Pending after eviction: {message}",
                    "lastTransitionTime": at,
                }
            ]
        if not self.writer.apply_status(victim, status, FIELD_MANAGER):
            return False  # changed meanwhile: the next pass resumes from the hold
        log.info("workload %s preempted for %s: %s", key, preemptor, message)
        self.writer.event(victim, "Warning", PREEMPTED_REASON, f"{message} (whole gang, requeued)")
        return True
