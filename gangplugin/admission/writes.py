"""The gang check's writes: its entry in a Workload's admissionChecks (server-side apply,
conditional on the resourceVersion), conditions of its own objects, pod deletions, Events."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from gangplugin.core.admission import AdmissionDecision
from gangplugin.core.states import CheckState
from gangplugin.core.timeutil import format_time
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON, PODS, WORKLOADS, ApiError, Client
from gangplugin.kube.events import record_event
from gangplugin.runtime import metrics

log = logging.getLogger(__name__)

FIELD_MANAGER = "gangplugin-admission"
# A backoff's eviction and requeue state are applied by a field manager of their own: the check's
# applies (which own only the check's entry) then never remove the Evicted condition or
# requeueAt, as preempt.py's evictions have theirs.
BACKOFF_FIELD_MANAGER = "gangplugin-backoff"
# Kueue's reason for an eviction by an admission check (its Retry); its workload controller
# then honours requeueState.requeueAt before requeueing the Workload.
EVICTED_BY_CHECK_REASON = "AdmissionCheck"
COMPONENT = "gangplugin-admission"


class CheckWriter:
    def __init__(self, client: Client, clock: Callable[[], float]) -> None:
        self.client = client
        self.clock = clock
        self._events = ThreadPoolExecutor(1, thread_name_prefix="admission-events")

    def write_check(
        self,
        wl: JSON,
        check: str,
        state: CheckState,
        message: str,
        *,
        updates: list[JSON] | None = None,
        now: float,
        warning: str | None = None,
        detail: str = "",
    ) -> bool | None:
        """Server-side apply of our check's entry only (our field manager), conditional on the
        Workload's resourceVersion: a decision made on a stale copy is never written. Returns
        True when written, None when the entry already says this, False when the Workload
        changed meanwhile (the decision is made again on the fresh copy). `warning`: a Pending
        that is the user's to fix, recorded as a Warning Event of that reason. `detail`: the
        message with the counts it leaves out (the room there is now), for the Event and the log."""
        prev = rec.check_state(wl, check) or {}
        entry: JSON = {"name": check, "state": state, "message": message[:32768]}
        if updates:
            entry["podSetUpdates"] = updates
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
        if not self.apply_status(wl, {"admissionChecks": [entry]}):
            return False
        meta, said = wl["metadata"], detail or message
        if state is CheckState.PENDING and warning is not None and prev.get("message") != message:
            self.event(wl, "Warning", warning, said)
        elif (
            state is CheckState.PENDING
            and str(prev.get("message", "")).split(":")[0] != message.split(":")[0]
        ):
            self.event(wl, "Normal", "GangWaiting", said)  # a new kind of reason, not every recount
        log.info("workload %s/%s: check %s -> %s: %s", meta["namespace"], meta["name"], check, state, said)
        return True

    def annotate(self, wl: JSON, annotations: dict[str, str | None]) -> JSON | None:
        """Merge `annotations` into the Workload's metadata (None removes one), conditional on
        its resourceVersion: the Workload as written, or None when it changed meanwhile or the
        write failed (logged)."""
        meta = wl["metadata"]
        patch = {"metadata": {"annotations": annotations, "resourceVersion": meta["resourceVersion"]}}
        try:
            return self.client.patch(WORKLOADS, meta["name"], patch, meta["namespace"])
        except ApiError as err:
            if err.status not in (404, 409):
                log.warning(
                    "workload %s/%s: annotating %s failed: %s",
                    meta["namespace"],
                    meta["name"],
                    annotations,
                    err,
                )
            return None

    def evict_for_backoff(
        self, wl: JSON, check: str, retry_count: int, message: str, until: str, now: float
    ) -> bool:
        """Evict a timed-out gang for its backoff the way Kueue evicts one for its own
        waitForPodsReady backoff: `Evicted=True` (reason `AdmissionCheck`, as for a check's
        Retry), the check back to Pending with the retry counted, and `requeueState.requeueAt`,
        all in one server-side apply (BACKOFF_FIELD_MANAGER), conditional on the resourceVersion.
        Kueue then stops the job, releases the quota and keeps the Workload out of the queue
        until `requeueAt` (a Retry with requeueAfterSeconds would make Kueue wait that long
        *before* evicting). False when the Workload changed meanwhile or is gone."""
        at = format_time(datetime.fromtimestamp(int(now), UTC))
        status: JSON = {
            "conditions": [
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": EVICTED_BY_CHECK_REASON,
                    "message": message[:32768],
                    "lastTransitionTime": at,
                    "observedGeneration": wl["metadata"].get("generation", 0),
                }
            ],
            "admissionChecks": [
                {
                    "name": check,
                    "state": CheckState.PENDING,
                    "message": message[:32768],
                    "lastTransitionTime": at,
                    "retryCount": retry_count + 1,
                }
            ],
            "requeueState": {"requeueAt": until},
        }
        return self.apply_status(wl, status, BACKOFF_FIELD_MANAGER)

    def end_backoff(self, wl: JSON) -> bool:
        """Drop `requeueState.requeueAt` once it has passed, so that Kueue requeues the gang.
        Kueue clears it with a server-side apply of its own, which cannot remove a field another
        field manager set: a merge patch can. Conditional on the resourceVersion (a requeueAt
        set meanwhile stays); False when the Workload changed meanwhile or is gone."""
        meta = wl["metadata"]
        body = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "status": {"requeueState": {"requeueAt": None}},
        }
        params = {"fieldManager": BACKOFF_FIELD_MANAGER}
        if not self._patch_status(wl, body, "application/merge-patch+json", params):
            return False
        log.info("workload %s/%s: backoff over, requeued", meta["namespace"], meta["name"])
        return True

    def clear_annotations(self, wl: JSON, keys: tuple[str, ...]) -> bool:
        """Remove annotations from the Workload as `wl` has them (conditional on its
        resourceVersion: never one written since); False when it changed meanwhile or is gone."""
        meta = wl["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "annotations": dict.fromkeys(keys)}}
        try:
            self.client.patch(WORKLOADS, meta["name"], patch, meta["namespace"])
        except ApiError as err:
            if err.status in (404, 409):
                return False
            raise
        log.info("workload %s/%s: removed %s, spent by its admission", meta["namespace"], meta["name"], keys)
        return True

    def apply_status(self, wl: JSON, status: JSON, field_manager: str = FIELD_MANAGER) -> bool:
        """Server-side apply of `status` fields of a Workload as `field_manager`, conditional on
        the resourceVersion of `wl`; False when the Workload changed meanwhile or is gone."""
        meta = wl["metadata"]
        body = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "resourceVersion": meta["resourceVersion"],
            },
            "status": status,
        }
        params = {"fieldManager": field_manager, "force": "true"}
        return self._patch_status(wl, body, "application/apply-patch+yaml", params)

    def _patch_status(self, wl: JSON, body: JSON, content_type: str, params: dict[str, str]) -> bool:
        """PATCH the Workload's status; False when it changed meanwhile (409) or is gone (404)."""
        meta = wl["metadata"]
        try:
            self.client.request(
                "PATCH",
                WORKLOADS.path(meta["namespace"], meta["name"]) + "/status",
                body=body,
                content_type=content_type,
                params=params,
            )
        except ApiError as err:
            if err.status in (404, 409):
                return False
            raise
        return True

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Recorded in the background: an Event is for people, a decision must not wait for it."""
        self._events.submit(record_event, self.client, dict(obj), type_, reason, message, COMPONENT)

    def admit(
        self, wl: JSON, check: str, decision: AdmissionDecision, now: float, quota_reserved_at: float
    ) -> bool | None:
        ok = self.write_check(
            wl,
            check,
            CheckState.READY,
            decision.message,
            updates=[u.to_dict() for u in decision.pod_set_updates],
            now=now,
        )
        if ok:
            self.event(wl, "Normal", "GangAdmitted", decision.message)
            if quota_reserved_at:
                # to the write's end, not the pass's start: the wait for earlier passes and for
                # the writes before this one is the gang's too
                metrics.ADMISSION_LATENCY.observe(max(0.0, self.clock() - quota_reserved_at))
        return ok

    def reject(self, wl: JSON, check: str, message: str, now: float) -> bool | None:
        ok = self.write_check(wl, check, CheckState.REJECTED, message, now=now)
        if ok:
            self.event(wl, "Warning", "GangRejected", message)
        return ok

    def set_condition(self, res: Any, obj: JSON, kind: str, status: str, reason: str, message: str) -> bool:
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
        try:
            body = {"status": {"conditions": [*others, cond]}}
            self.client.patch(res, obj["metadata"]["name"], body, subresource="status")
        except ApiError as err:
            if err.status == 404:
                return False  # deleted since the cache showed it: nothing left to report on
            raise
        return True

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self.client.request(
                "DELETE",
                PODS.path(namespace, name),
                body={"gracePeriodSeconds": 0, "propagationPolicy": "Background"},
            )
        except ApiError as err:
            if err.status != 404:
                raise


def as_admitted(wl: Mapping[str, Any], check: str, updates: list[JSON]) -> JSON:
    """The Workload as the check's admission will make it: its entry `check` Ready with
    `updates` as podSetUpdates (what `admit` writes), everything else as it is."""
    status = dict(wl.get("status") or {})
    entries = []
    for entry in status.get("admissionChecks") or []:
        if entry.get("name") == check:
            entry = {**entry, "state": CheckState.READY, "podSetUpdates": [dict(u) for u in updates]}
        entries.append(entry)
    status["admissionChecks"] = entries
    return {**wl, "status": status}
