"""Training plans: the plan rules and a plan's timeline at any instant (pure; time is a parameter).

A plan is a list of reserved capacity blocks. Statuses, per block and for the plan:

- ``Scheduled``: capacity confirmed, the block has not started yet (``t < startTime``).
- ``Active``: ``startTime <= t < endTime``; the block's instances are the queue's capacity.
- ``Expired``: ``t >= endTime``.
- ``Pending``: capacity not yet confirmed. Offline there is no purchase step, so a block is
  Pending only when ``status.blocks[i].status`` says so; if it is still Pending when
  its start time comes, the capacity never arrived and the block is ``Failed``.
- ``Failed``: marked Failed in status, or the block breaks a plan rule (see `block_problem`).
  A Failed block never gives capacity and never changes status again.

The plan is Active while any block is Active; otherwise Scheduled while a confirmed block is
still to come, Pending while only unconfirmed blocks are still to come, Expired when every
usable block has ended, and Failed when every block has failed (Pending if it has no blocks).

Two test-only overrides exist (``spec.testOverrides`` of the TrainingPlan, never set in
production): a shorter termination lead, and block times that skip the 11:30 UTC and whole-day
rules, so an end-to-end test can run a block of a minute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

# --- the plan rules (from the SageMaker training-plans documentation) ---

INSTANCE_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
MIN_DAYS = 1
MAX_DAYS = 182
MAX_HOURS = MAX_DAYS * 24
#: A block may start no sooner than this after the search ("now") ...
MIN_LEAD = timedelta(minutes=30)
#: ... and no later than this.
MAX_LEAD = timedelta(days=56)
#: Every block ends at this time of day, UTC, on its last day.
END_HOUR, END_MINUTE = 11, 30
DAY = timedelta(days=1)

#: Instances per UltraServer for the known types, used when neither the block nor the inventory says.
ULTRA_SERVER_TYPES: Mapping[str, tuple[str, int]] = {
    "ml.u-p6e-gb200x72": ("ml.p6e-gb200.36xlarge", 18),
    "ml.u-p6e-gb200x36": ("ml.p6e-gb200.36xlarge", 9),
}


class TargetResource(StrEnum):
    TRAINING_JOB = "training-job"
    HYPERPOD_CLUSTER = "hyperpod-cluster"


class Status(StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    ACTIVE = "Active"
    EXPIRED = "Expired"
    FAILED = "Failed"


def termination_lead(target: TargetResource) -> timedelta:
    """How long before a block ends the running work on it starts to be terminated."""
    return timedelta(minutes=60) if target is TargetResource.HYPERPOD_CLUSTER else timedelta(minutes=30)


def plan_termination_lead(plan: TrainingPlan) -> timedelta:
    """The plan's lead: the test override when set, else the target's rule."""
    return plan.termination_lead or termination_lead(plan.target_resource)


def is_block_end(t: datetime) -> bool:
    """True when `t` is exactly 11:30:00 UTC, the only time of day a block may end."""
    u = t.astimezone(UTC)
    return (u.hour, u.minute, u.second, u.microsecond) == (END_HOUR, END_MINUTE, 0, 0)


def block_end(start: datetime, days: int) -> datetime:
    """The end of a block of `days` days starting at `start`: the first 11:30 UTC at or after
    ``start + days``. A block so always holds at least `days` full days, and at most one more
    day's worth of hours when it does not start at 11:30 (its last day runs to 11:30)."""
    t = (start + days * DAY).astimezone(UTC)
    end = t.replace(hour=END_HOUR, minute=END_MINUTE, second=0, microsecond=0)
    return end if end >= t else end + DAY


def whole_days(start: datetime, end: datetime) -> int:
    """The number of full 24-hour days in ``[start, end)`` (the block's length in the rules)."""
    return (end - start) // DAY


# --- values ---


@dataclass(frozen=True, slots=True)
class CapacityBlock:
    """One reserved capacity block. For UltraServer blocks `instance_count` is the total number
    of instances (``ultra_server_count x instances per UltraServer``)."""

    instance_type: str
    instance_count: int
    availability_zone: str
    start: datetime
    end: datetime
    ultra_server_type: str | None = None
    ultra_server_count: int | None = None
    #: The status an outside party recorded (only Pending and Failed change the timeline).
    marked: Status | None = None

    @property
    def duration_seconds(self) -> int:
        return int((self.end - self.start).total_seconds())


@dataclass(frozen=True, slots=True)
class TrainingPlan:
    name: str
    target_resource: TargetResource
    blocks: tuple[CapacityBlock, ...]
    cluster_queue: str = ""
    flavor: str = ""
    #: Canonical amounts (`core.resources`: cpu in millicores, others in whole units).
    resources_per_instance: Mapping[str, int] = field(default_factory=dict, hash=False)
    spare_instances_per_ultra_server: int = 1
    #: Test-only: replaces the target's termination lead.
    termination_lead: timedelta | None = None
    #: Test-only: blocks may end at any time and last less than a day.
    any_block_times: bool = False


@dataclass(frozen=True, slots=True)
class BlockState:
    index: int
    status: Status
    start: datetime
    end: datetime
    #: When running work starts to be terminated; None for a Failed block (nothing runs on it).
    termination_starts_at: datetime | None
    #: Why the block is Failed, when it is.
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class PlanState:
    at: datetime
    status: Status
    blocks: tuple[BlockState, ...]
    current_block: int | None
    active_instance_count: int
    #: The next instant after `at` when the plan's or a block's status changes.
    next_transition: datetime | None
    #: True between the current block's termination start and its end.
    draining: bool


# --- rules applied to one block ---


def block_problem(block: CapacityBlock, any_times: bool = False) -> str | None:
    """The plan rule this block breaks, or None. Lead-time rules (30 minutes, 56 days) concern
    the moment of purchase and are checked by the offering search, not here. `any_times` (a
    test-only override) skips the 11:30 UTC end and whole-day rules."""
    if block.ultra_server_type is not None:
        if block.ultra_server_count is None or block.ultra_server_count < 1:
            return "UltraServers are reserved only as whole units (ultraServerCount >= 1)"
    elif block.instance_count not in INSTANCE_COUNTS:
        return f"instanceCount {block.instance_count} is not one of {_counts_text()}"
    if block.end <= block.start:
        return "endTime is not after startTime"
    if any_times:
        return None
    if not is_block_end(block.end):
        return "endTime is not at 11:30 UTC"
    days = whole_days(block.start, block.end)
    if not MIN_DAYS <= days <= MAX_DAYS:
        return f"lasts {days} whole days; a block lasts {MIN_DAYS} to {MAX_DAYS} days"
    return None


def _counts_text() -> str:
    return ", ".join(str(c) for c in INSTANCE_COUNTS)


def block_status(block: CapacityBlock, at: datetime, any_times: bool = False) -> tuple[Status, str | None]:
    """The block's status at `at` and, when Failed, why."""
    if block.marked is Status.FAILED:
        return Status.FAILED, "marked Failed in status"
    problem = block_problem(block, any_times)
    if problem is not None:
        return Status.FAILED, problem
    if at < block.start:
        return (Status.PENDING if block.marked is Status.PENDING else Status.SCHEDULED), None
    if block.marked is Status.PENDING:
        return Status.FAILED, "capacity was not confirmed by startTime"
    return (Status.ACTIVE if at < block.end else Status.EXPIRED), None


def _transitions(block: CapacityBlock, any_times: bool) -> tuple[datetime, ...]:
    """Instants at which the block's status changes (a Failed block never changes again)."""
    if block.marked is Status.FAILED or block_problem(block, any_times) is not None:
        return ()
    if block.marked is Status.PENDING:
        return (block.start,)
    return (block.start, block.end)


def plan_status(block_statuses: list[Status]) -> Status:
    if not block_statuses:
        return Status.PENDING
    usable = [s for s in block_statuses if s is not Status.FAILED]
    if not usable:
        return Status.FAILED
    for s in (Status.ACTIVE, Status.SCHEDULED, Status.PENDING):
        if s in usable:
            return s
    return Status.EXPIRED


def plan_state(plan: TrainingPlan, at: datetime) -> PlanState:
    """Everything about `plan` at instant `at`: statuses, capacity, what happens next."""
    lead = plan_termination_lead(plan)
    states: list[BlockState] = []
    for i, block in enumerate(plan.blocks):
        status, reason = block_status(block, at, plan.any_block_times)
        term = None if status is Status.FAILED else block.end - lead
        states.append(BlockState(i, status, block.start, block.end, term, reason))
    active = [s for s in states if s.status is Status.ACTIVE]
    current = active[0] if active else None
    later = [t for b in plan.blocks for t in _transitions(b, plan.any_block_times) if t > at]
    draining = any(s.termination_starts_at is not None and s.termination_starts_at <= at for s in active)
    return PlanState(
        at=at,
        status=plan_status([s.status for s in states]),
        blocks=tuple(states),
        current_block=current.index if current else None,
        active_instance_count=sum(plan.blocks[s.index].instance_count for s in active),
        next_transition=min(later) if later else None,
        draining=draining,
    )


def active_instance_count(plan: TrainingPlan, at: datetime) -> int:
    """The plan's capacity (instances) at `at`: the sum over its Active blocks."""
    return plan_state(plan, at).active_instance_count


def usable_instances(plan: TrainingPlan, block: CapacityBlock) -> int:
    """Instances of `block` that become quota: UltraServer blocks keep the plan's spares free in
    each UltraServer (for recovery), so they give ``count x (per UltraServer - spares)``."""
    if block.ultra_server_type is None or not block.ultra_server_count:
        return block.instance_count
    spares = plan.spare_instances_per_ultra_server * block.ultra_server_count
    return max(block.instance_count - spares, 0)
