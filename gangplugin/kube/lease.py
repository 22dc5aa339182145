"""Leader election on a coordination.k8s.io/v1 Lease: the I/O around `core.leader`.

One thread tries to acquire the Lease every retry period and, once it holds it, renews it every
retry period (`gangplugin serve` runs it in a process of its own: `renewer.py`). Writes carry
the resourceVersion read (optimistic concurrency): of two replicas writing at once, one gets 409
Conflict and simply has not acquired. A leader renews with one PUT of the Lease it last wrote
(client-go's optimistic renewal); after a failed try it reads the Lease again first.
`lost_reason` is checked on its own clock, so a renewal stuck in a slow HTTP call cannot keep a
replica acting past its renew deadline. Deadlines run on the monotonic clock; the wall clock
only stamps acquireTime and renewTime.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gangplugin.core.leader import (
    JITTER,
    Action,
    ElectionConfig,
    LeaseRecord,
    Observation,
    decide,
    lost,
    release,
)
from gangplugin.core.names import LEADER_LABEL
from gangplugin.kube.client import JSON, PODS, ApiError, Client, Resource

log = logging.getLogger(__name__)

LEASES = Resource("coordination.k8s.io/v1", "leases")


def _micro_time(t: float | None) -> str | None:
    """A Kubernetes MicroTime (RFC 3339 with microseconds)."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def record_from_k8s(obj: JSON) -> LeaseRecord:
    """The Lease's spec as the core reads it; fields someone wrote badly read as unset (a lease
    with no valid duration is expired, as in client-go), never as a crash."""
    spec = obj.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    transitions = spec.get("leaseTransitions")
    holder = spec.get("holderIdentity")
    return LeaseRecord(
        holder=holder if isinstance(holder, str) and holder else None,
        lease_duration=float(duration) if isinstance(duration, int) else 0.0,
        acquire_time=_epoch(spec.get("acquireTime")),
        renew_time=_epoch(spec.get("renewTime")),
        transitions=transitions if isinstance(transitions, int) else 0,
    )


def lease_to_k8s(record: LeaseRecord, namespace: str, name: str, current: JSON | None) -> JSON:
    """The Lease to write: `current`'s metadata (its resourceVersion makes the update conditional)."""
    spec: JSON = {
        "holderIdentity": record.holder or "",
        "leaseDurationSeconds": max(1, round(record.lease_duration)),
        "acquireTime": _micro_time(record.acquire_time),
        "renewTime": _micro_time(record.renew_time),
        "leaseTransitions": record.transitions,
    }
    meta = (current or {}).get("metadata") or {"name": name, "namespace": namespace}
    return {"apiVersion": LEASES.api_version, "kind": "Lease", "metadata": meta, "spec": spec}


@dataclass(frozen=True, slots=True)
class Renewal:
    """One renewal of a held Lease, on the monotonic clock: when it was due (a retry period after
    the last try ended), when the renewing code began (late when it waited for a core or the
    GIL) and when the API server had answered it."""

    due: float
    began: float
    done: float

    @property
    def latency(self) -> float:
        return self.done - self.due

    @property
    def wakeup(self) -> float:
        return self.began - self.due


class LeaderElector:
    """Holds the Lease `namespace/name` for `identity` while `run` runs; `on_renewed` hears of
    every renewal once it leads; while `may_renew` says no (the process it is held for is
    stopped), it does not renew, and past the deadline it has lost."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        name: str,
        identity: str,
        config: ElectionConfig,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        on_renewed: Callable[[Renewal], None] = lambda _r: None,
        may_renew: Callable[[], bool] = lambda: True,
    ) -> None:
        self.client, self.namespace, self.name, self.identity = client, namespace, name, identity
        self.on_renewed, self.may_renew = on_renewed, may_renew
        self.config = config.validate()
        self.clock, self.monotonic = clock, monotonic
        self.leading = threading.Event()
        self.holder: str | None = None  # who holds it, as last read
        self._observed: Observation | None = None
        self._written: JSON | None = None  # the Lease as this replica last wrote it, while it leads
        self.last_renewed = 0.0  # monotonic: when the last successful try began
        self._lost: str | None = None

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    def try_acquire_or_renew(self) -> bool:
        """One try; True when this replica holds the Lease afterwards."""
        now = round(self.clock(), 6)  # MicroTime precision, so what we write reads back equal
        mono = self.monotonic()  # before the calls: a slow write must not push the deadline out
        written, self._written = self._written, None  # a failed try reads the Lease again
        if written is not None and self.leading.is_set():
            current: JSON | None = written
        else:
            current = self.client.get_or_none(LEASES, self.name, self.namespace)
        lease = record_from_k8s(current) if current is not None else None
        d = decide(lease, self._observed, self.identity, now, self.config, mono)
        self._observed = d.observed
        if d.action is Action.WAIT:
            self.holder = lease.holder if lease else None
            log.debug("lease %s: %s", self.lease, d.reason)
            return False
        assert d.record is not None
        body = lease_to_k8s(d.record, self.namespace, self.name, current)
        try:
            if d.action is Action.CREATE:
                self._written = self.client.create(LEASES, body, self.namespace)
            else:
                self._written = self.client.request("PUT", LEASES.path(self.namespace, self.name), body=body)
        except ApiError as err:
            if err.status == 409:  # someone else wrote it first; read again next time
                return False
            raise
        if not self.leading.is_set():
            log.info("lease %s: %s", self.lease, d.reason, extra={"identity": self.identity})
        self._observed = Observation(d.record, mono)
        self.last_renewed = mono
        self.holder = self.identity
        return True

    def lost_reason(self) -> str | None:
        """Why this replica must stop acting now (None while it may go on)."""
        if self._lost is not None:
            return self._lost
        if self.leading.is_set() and lost(self.last_renewed, self.monotonic(), self.config):
            return f"lease {self.lease} not renewed within {self.config.renew_deadline:g}s"
        return None

    def _try(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except Exception as err:  # any failure is a failed try; lost_reason judges the deadline
            log.warning("lease %s: %s", self.lease, err)
            return False

    def _sleep(self, stop: threading.Event) -> bool:
        return stop.wait(self.config.retry_period * random.uniform(1.0, JITTER))

    def run(
        self, stop: threading.Event, on_started: Callable[[], None], release: threading.Event | None = None
    ) -> None:
        """Acquire (calling `on_started` once), then renew until `stop` (releasing the Lease,
        unless `release` is given and not set) or until a renewal fails past the deadline or
        finds another holder (`lost_reason` says so)."""
        while not self._try():
            if self._sleep(stop):
                return
        self.leading.set()
        on_started()
        due = self.monotonic() + self.config.retry_period
        paused = False
        while not stop.wait(max(0.0, due - self.monotonic())):
            began = self.monotonic()
            if not self.may_renew():
                if not paused:
                    log.warning(
                        "lease %s: not renewed while the process it is held for is stopped", self.lease
                    )
                paused, renewed = True, False
            else:
                paused, renewed = False, self._try()
            done = self.monotonic()
            if renewed:
                self._renewed(Renewal(due, began, done))
            due = done + self.config.retry_period
            if renewed:
                continue
            if self.holder not in (None, self.identity):
                self._lost = f"lease {self.lease} is now held by {self.holder}"
            if (why := self.lost_reason()) is not None:
                self._lost = why
                self.leading.clear()
                return
        if release is None or release.is_set():
            self.release()

    def _renewed(self, r: Renewal) -> None:
        if r.latency > self.config.retry_period:  # a fifth of the way to the renew deadline
            log.warning(
                "lease %s renewed %.1fs after it was due (began %.1fs late; answered in %.1fs)",
                self.lease,
                r.latency,
                r.wakeup,
                r.done - r.began,
            )
        self.on_renewed(r)

    def release(self) -> None:
        """Give the Lease up (a clean shutdown): a successor takes over without waiting it out."""
        self.leading.clear()
        try:
            current = self.client.get_or_none(LEASES, self.name, self.namespace)
            if current is None:
                return
            freed = release(record_from_k8s(current), self.identity, round(self.clock(), 6))
            if freed is not None:
                body = lease_to_k8s(freed, self.namespace, self.name, current)
                self.client.request("PUT", LEASES.path(self.namespace, self.name), body=body)
                log.info("lease %s released", self.lease)
        except Exception as err:
            log.warning("lease %s: could not release: %s", self.lease, err)


def label_leader_pod(client: Client, namespace: str, pod: str, leading: bool) -> None:
    """Mark (or unmark) this replica's own pod as the leader's: the extender Service selects the
    label, so kube-scheduler's calls reach the one replica that runs the extender."""
    value = "true" if leading else None
    client.patch(PODS, pod, {"metadata": {"labels": {LEADER_LABEL: value}}}, namespace)
