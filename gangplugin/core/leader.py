"""Leader election over a Lease, as client-go's leaderelection does it, as pure decisions.

Given the Lease as last read, what this replica observed of it before, its identity and `now`,
`decide` says whether to create the Lease, write it (acquire or renew), or wait, and what this
replica has now observed. Expiry is judged from when *this* replica saw the record change, not from
the holder's `renewTime`, so clocks of different machines never need to agree (client-go does the
same); that instant and every deadline are on a monotonic clock (`mono`), so an NTP step of the
wall clock (`now`, which only stamps the record written) can neither end a healthy lease early nor
stretch a stale one. A leader that has not renewed within the renew deadline has lost: `lost` says so, and the
caller must stop acting before the lease can expire and another replica take over.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from gangplugin.core.errors import InputError

JITTER = 1.2  # client-go's JitterFactor: retries wait retry_period * [1, 1.2)


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    """Seconds, with client-go's defaults; `validate` checks their order."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def validate(self) -> ElectionConfig:
        if self.retry_period <= 0:
            raise InputError("--leader-election-retry-period", "must be more than 0s")
        if self.renew_deadline <= self.retry_period * JITTER:
            raise InputError(
                "--leader-election-renew-deadline",
                f"must be more than {JITTER} x the retry period ({self.retry_period * JITTER:g}s), "
                "so a leader gets more than one try to renew",
            )
        if self.lease_duration <= self.renew_deadline:
            raise InputError(
                "--leader-election-lease-duration",
                f"must be more than the renew deadline ({self.renew_deadline:g}s): a leader that "
                "cannot renew must stop before another replica may take over",
            )
        return self


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The Lease's spec; times are epoch seconds (None: unset)."""

    holder: str | None
    lease_duration: float
    acquire_time: float | None = None
    renew_time: float | None = None
    transitions: int = 0


@dataclass(frozen=True, slots=True)
class Observation:
    """The record this replica last saw and when (its own monotonic clock) it first saw it so."""

    record: LeaseRecord
    seen_at: float


class Action(enum.Enum):
    CREATE = "create"  # no Lease yet: create it holding it
    WRITE = "write"  # acquire or renew: update with the Lease's resourceVersion
    WAIT = "wait"  # someone else holds a valid lease


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    record: LeaseRecord | None  # what to write (CREATE, WRITE)
    observed: Observation | None  # what to remember for the next look
    retry_after: float  # seconds until the next look (before jitter)
    reason: str


def decide(
    lease: LeaseRecord | None,
    observed: Observation | None,
    identity: str,
    now: float,
    config: ElectionConfig,
    mono: float | None = None,
) -> Decision:
    """What to do now (client-go's tryAcquireOrRenew). `now` (wall clock) stamps the record;
    `mono` (monotonic; `now` when not given) times observations and expiry. The caller writes
    `record` with optimistic concurrency; a conflict means someone else wrote first, and it is
    simply a failed try."""
    seen = now if mono is None else mono
    if lease is None:
        record = LeaseRecord(identity, config.lease_duration, now, now, 0)
        return Decision(Action.CREATE, record, None, config.retry_period, "no Lease yet")
    if observed is None or observed.record != lease:
        observed = Observation(lease, seen)
    holder = lease.holder or None
    if holder is not None and holder != identity:
        expires = observed.seen_at + lease.lease_duration
        if expires > seen:
            # Polling at retry_period (not at `expires`) matches client-go, and notices a release at once.
            return Decision(
                Action.WAIT,
                None,
                observed,
                config.retry_period,
                f"held by {holder} for another {expires - seen:.1f}s unless renewed",
            )
    if holder == identity:
        record = replace(lease, lease_duration=config.lease_duration, renew_time=now)
        return Decision(Action.WRITE, record, observed, config.retry_period, "renew")
    record = LeaseRecord(identity, config.lease_duration, now, now, lease.transitions + 1)
    why = "released" if holder is None else f"expired (held by {holder})"
    return Decision(Action.WRITE, record, observed, config.retry_period, f"acquire: the lease was {why}")


def lost(last_renewed: float, now: float, config: ElectionConfig) -> bool:
    """A leader that has not renewed for the renew deadline must stop: its lease may expire
    (lease duration after its last renewal) while it keeps acting. Both instants are monotonic."""
    return now - last_renewed >= config.renew_deadline


def release(lease: LeaseRecord, identity: str, now: float) -> LeaseRecord | None:
    """On a clean shutdown, give the lease up so a successor need not wait for it to expire
    (client-go's ReleaseOnCancel); None when it is not ours to release."""
    if lease.holder != identity:
        return None
    return LeaseRecord(None, 1.0, now, now, lease.transitions)
