"""Training-plan offering search over a capacity inventory (pure; "now" is a parameter).

Interpretation of the request (following SageMaker's SearchTrainingPlanOfferings):

- ``duration_hours`` H is the total asked for. Plans are sold in whole days, so H is rounded up
  to D = ceil(H / 24) days (1 to 182). A block of d days starting at S ends at the first 11:30
  UTC at or after S + d days (`plans.block_end`), so every offering lasts at least H hours.
- Every block starts in ``[max(start_after, now + 30 min rounded up to a minute), now + 56 days]``
  and ends no later than ``end_before``.
- Capacity: a pool (instance type and zone, or UltraServer type and zone) has a fixed number of
  units (instances, or whole UltraServers); a reservation takes units from its pool over
  ``[startTime, endTime)``. A block fits when the units left are at least the request's at every
  instant of the block.
- Candidate start times: the earliest allowed instant and the instants where a reservation ends
  (free capacity only rises there, so if any start fits, the earliest fitting one is among them).
  For each pool the search takes the earliest fitting start; later starts in the same pool finish
  later and are not offered.
- One contiguous block of D days first, one offering per pool where it fits. Only when no pool
  can hold one block: two blocks of d1 + d2 = D days (every split), the first as early as it
  fits, the second at the earliest fitting start at or after the first's end (a gap is allowed);
  then the first block moves as late as it still fits before the second, to close the gap.
  ``hyperpod-cluster``: both blocks in one zone; ``training-job``: zones may differ.
- Ranking, best first: the last block's end (earliest first), then fewer blocks, then less total
  gap, then earlier first start (more hours), then zones, types and block lengths by name/value,
  so the result is deterministic. At most three offerings are returned.
- The offering id is "tpo-" and 16 hex digits of a hash of the offering's content, so the same
  search over the same inventory finds the same id again.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

from gangplugin.core.errors import InputError
from gangplugin.core.plans import (
    INSTANCE_COUNTS,
    MAX_DAYS,
    MAX_HOURS,
    MAX_LEAD,
    MIN_LEAD,
    ULTRA_SERVER_TYPES,
    CapacityBlock,
    Status,
    TargetResource,
    TrainingPlan,
    plan_state,
)
from gangplugin.core.timeutil import format_time, from_seconds, to_seconds

MAX_OFFERINGS = 3
_DAY_S = 86400
_END_OF_DAY_S = 11 * 3600 + 30 * 60
_NEVER = -(2**62)


# --- values ---


@dataclass(frozen=True, slots=True)
class CapacityPool:
    """Capacity that exists: `count` instances, or `count` whole UltraServers of
    `instances_per_ultra_server` instances each when `ultra_server_type` is set."""

    instance_type: str
    availability_zone: str
    count: int
    ultra_server_type: str | None = None
    instances_per_ultra_server: int = 1


@dataclass(frozen=True, slots=True)
class CapacityReservation:
    """Capacity already promised over ``[start, end)``: `count` units of the pool named by
    ``ultra_server_type`` (when set) or by ``instance_type``, in `availability_zone`."""

    availability_zone: str
    count: int
    start: datetime
    end: datetime
    instance_type: str | None = None
    ultra_server_type: str | None = None


@dataclass(frozen=True, slots=True)
class CapacityInventory:
    pools: tuple[CapacityPool, ...]
    reservations: tuple[CapacityReservation, ...] = ()


@dataclass(frozen=True, slots=True)
class OfferingRequest:
    """What to search for: either `instance_type` + `instance_count`, or `ultra_server_type` +
    `ultra_server_count`. Field names in errors are SageMaker's (camelCase)."""

    target_resource: TargetResource
    duration_hours: int
    start_after: datetime
    end_before: datetime
    now: datetime
    instance_type: str | None = None
    instance_count: int | None = None
    ultra_server_type: str | None = None
    ultra_server_count: int | None = None


@dataclass(frozen=True, slots=True)
class TrainingPlanOffering:
    offering_id: str
    target_resource: TargetResource
    blocks: tuple[CapacityBlock, ...]  # as offered: never `marked`

    @property
    def duration_seconds(self) -> int:
        return sum(b.duration_seconds for b in self.blocks)


# --- request checks ---


def validate_request(req: OfferingRequest) -> int:
    """Check the request against the plan rules; the number of days D it asks for."""
    if (req.instance_type is None) == (req.ultra_server_type is None):
        raise InputError("instanceType", "give either instanceType or ultraServerType (one of them)")
    if req.instance_type is not None:
        if req.instance_count is None:
            raise InputError("instanceCount", "is required with instanceType")
        if req.instance_count not in INSTANCE_COUNTS:
            counts = ", ".join(str(c) for c in INSTANCE_COUNTS)
            raise InputError("instanceCount", f"{req.instance_count} is not one of {counts}")
    elif req.ultra_server_count is None or req.ultra_server_count < 1:
        raise InputError(
            "ultraServerCount",
            f"{req.ultra_server_count} is not a whole number of UltraServers (1 or more)",
        )
    if not 1 <= req.duration_hours <= MAX_HOURS:
        raise InputError(
            "durationHours",
            f"{req.duration_hours} is outside 1..{MAX_HOURS} (plans last 1 to {MAX_DAYS} whole days)",
        )
    if req.end_before <= req.start_after:
        raise InputError(
            "endTimeBefore",
            f"{format_time(req.end_before)} is not after startTimeAfter {format_time(req.start_after)}",
        )
    return -(-req.duration_hours // 24)


def check_known(inv: CapacityInventory, req: OfferingRequest) -> None:
    """A type the inventory does not have is a typo, not a question with no answer: refuse it,
    naming the closest type there is."""
    if req.ultra_server_type is not None:
        known = sorted({p.ultra_server_type for p in inv.pools if p.ultra_server_type})
        if req.ultra_server_type not in known:
            raise InputError("ultraServerType", _unknown(req.ultra_server_type, known))
        return
    assert req.instance_type is not None
    known = sorted({p.instance_type for p in inv.pools if p.ultra_server_type is None})
    if req.instance_type in known:
        return
    in_ultra = {p.instance_type: p.ultra_server_type for p in inv.pools if p.ultra_server_type}
    if req.instance_type in in_ultra:
        raise InputError(
            "instanceType",
            f"{req.instance_type} comes only in whole UltraServers here: "
            f"ask for ultraServerType {in_ultra[req.instance_type]}",
        )
    raise InputError("instanceType", _unknown(req.instance_type, sorted({*known, *in_ultra})))


def _unknown(asked: str, known: list[str]) -> str:
    close = difflib.get_close_matches(asked, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else f"it has {', '.join(known) or 'none'}"
    return f"{asked!r} is not in the inventory; {hint}"


# --- free capacity of one pool over time ---


def _block_end_s(start: int, days: int) -> int:
    t = start + days * _DAY_S
    return t + (_END_OF_DAY_S - t) % _DAY_S


class _Timeline:
    """Free units of one pool as a step function: ``free[i]`` holds on ``[times[i], times[i+1])``.

    ``last_bad[i]`` is the last segment ``j <= i`` with fewer free units than needed (-1 if none),
    so "does [s, e) fit?" is two bisections and one lookup, and a failed try tells where the
    next possible start is (the end of that last bad segment)."""

    __slots__ = ("last_bad", "pool", "times")

    def __init__(self, pool: CapacityPool, reservations: Iterable[CapacityReservation], need: int) -> None:
        self.pool = pool
        delta: dict[int, int] = {}
        for r in reservations:
            s, e = to_seconds(r.start), -(-_micro_s(r.end) // 1_000_000)  # end rounded up
            if e <= s:
                continue
            delta[s] = delta.get(s, 0) - r.count
            delta[e] = delta.get(e, 0) + r.count
        self.times = [_NEVER]
        last_bad, free = [-1 if pool.count >= need else 0], pool.count
        for t in sorted(delta):
            free += delta[t]
            self.times.append(t)
            last_bad.append(len(last_bad) if free < need else last_bad[-1])
        self.last_bad = last_bad

    def earliest_fit(self, lo: int, days: int, latest_start: int, end_before: int) -> tuple[int, int] | None:
        """The earliest block ``(start, end)`` of `days` days with ``lo <= start <= latest_start``
        and ``end <= end_before`` that fits, or None."""
        times, last_bad = self.times, self.last_bad
        s = lo
        while s <= latest_start:
            e = _block_end_s(s, days)
            if e > end_before:
                return None  # the end only moves later with the start
            i_s = bisect_right(times, s) - 1
            j = last_bad[bisect_left(times, e) - 1]
            if j < i_s:
                return s, e
            if j + 1 == len(times):
                return None  # short of capacity for ever after
            s = times[j + 1]
        return None

    def latest_fit(self, lo: int, days: int, latest_start: int, end_limit: int) -> tuple[int, int] | None:
        """The latest block ``(start, end)`` of `days` days with ``lo <= start <= latest_start``
        and ``end <= end_limit`` that fits, or None (used to close the gap before a second block)."""
        times, last_bad = self.times, self.last_bad
        end = _last_day_end_s(end_limit)
        while True:
            s = min(end - days * _DAY_S, latest_start)
            if s < lo:
                return None
            e = _block_end_s(s, days)
            if e < end:  # capped by latest_start: the block ends earlier
                end = e
                continue
            j = last_bad[bisect_left(times, e) - 1]
            if j < bisect_right(times, s) - 1:
                return s, e
            if j == 0:
                return None
            end = _last_day_end_s(times[j])  # end before the short segment begins


def _last_day_end_s(t: int) -> int:
    """The latest 11:30 UTC at or before `t`."""
    return t - (t - _END_OF_DAY_S) % _DAY_S


def _micro_s(t: datetime) -> int:
    return to_seconds(t) * 1_000_000 + t.microsecond


# --- search ---


@dataclass(frozen=True, slots=True)
class _Block:
    tl: _Timeline
    start: int
    end: int


def _matching_pools(inv: CapacityInventory, req: OfferingRequest) -> list[CapacityPool]:
    """Pools that can serve the request, one per (type, zone) (duplicates add up)."""
    merged: dict[tuple[str, str], CapacityPool] = {}
    for p in inv.pools:
        if req.ultra_server_type is not None:
            if p.ultra_server_type != req.ultra_server_type:
                continue
            key = (p.ultra_server_type, p.availability_zone)
        else:
            if p.ultra_server_type is not None or p.instance_type != req.instance_type:
                continue
            key = (p.instance_type, p.availability_zone)
        prev = merged.get(key)
        merged[key] = p if prev is None else _add(prev, p)
    return [merged[k] for k in sorted(merged)]


def _add(a: CapacityPool, b: CapacityPool) -> CapacityPool:
    return CapacityPool(
        a.instance_type,
        a.availability_zone,
        a.count + b.count,
        a.ultra_server_type,
        a.instances_per_ultra_server,
    )


def _reservations_of(pool: CapacityPool, inv: CapacityInventory) -> list[CapacityReservation]:
    if pool.ultra_server_type is not None:
        return [
            r
            for r in inv.reservations
            if r.ultra_server_type == pool.ultra_server_type and r.availability_zone == pool.availability_zone
        ]
    return [
        r
        for r in inv.reservations
        if r.ultra_server_type is None
        and r.instance_type == pool.instance_type
        and r.availability_zone == pool.availability_zone
    ]


def search_offerings(inv: CapacityInventory, req: OfferingRequest) -> tuple[TrainingPlanOffering, ...]:
    """Up to three offerings for `req` over `inv`, best first (empty when nothing fits)."""
    days = validate_request(req)
    check_known(inv, req)
    need = req.ultra_server_count if req.ultra_server_type is not None else req.instance_count
    assert need is not None  # validate_request checked it
    now = to_seconds(req.now)
    lo = max(-(-_micro_s(req.start_after) // 1_000_000), now + int(MIN_LEAD.total_seconds()))
    lo = -(-lo // 60) * 60  # offered starts are whole minutes
    latest_start = now + int(MAX_LEAD.total_seconds())
    end_before = to_seconds(req.end_before)
    timelines = [
        _Timeline(p, _reservations_of(p, inv), need) for p in _matching_pools(inv, req) if p.count >= need
    ]

    def fit(tl: _Timeline, after: int, d: int) -> _Block | None:
        found = tl.earliest_fit(after, d, latest_start, end_before)
        return None if found is None else _Block(tl, *found)

    plans: list[tuple[_Block, ...]] = []
    for tl in timelines:
        one = fit(tl, lo, days)
        if one is not None:
            plans.append((one,))
    if not plans:
        same_zone = req.target_resource is TargetResource.HYPERPOD_CLUSTER
        for d1 in range(1, days):
            for tl1 in timelines:
                first = fit(tl1, lo, d1)
                if first is None:
                    continue
                for tl2 in timelines:
                    if same_zone and tl2.pool.availability_zone != tl1.pool.availability_zone:
                        continue
                    second = fit(tl2, first.end, days - d1)
                    if second is None:
                        continue
                    # Same end, less gap: start the first block as late as still fits.
                    closer = tl1.latest_fit(lo, d1, latest_start, second.start)
                    plans.append((first if closer is None else _Block(tl1, *closer), second))
    plans.sort(key=_rank)
    offerings: list[TrainingPlanOffering] = []
    for blocks in plans:
        offering = _offering(req, need, blocks)
        if offering not in offerings:
            offerings.append(offering)
        if len(offerings) == MAX_OFFERINGS:
            break
    return tuple(offerings)


def _rank(blocks: tuple[_Block, ...]) -> tuple[object, ...]:
    gap = sum(b.start - a.end for a, b in pairwise(blocks))
    return (
        blocks[-1].end,
        len(blocks),
        gap,
        blocks[0].start,
        tuple((b.tl.pool.availability_zone, b.tl.pool.instance_type, b.end - b.start) for b in blocks),
    )


def _offering(req: OfferingRequest, need: int, blocks: tuple[_Block, ...]) -> TrainingPlanOffering:
    out: list[CapacityBlock] = []
    for b in blocks:
        pool = b.tl.pool
        ultra = pool.ultra_server_type is not None
        out.append(
            CapacityBlock(
                instance_type=pool.instance_type,
                instance_count=need * pool.instances_per_ultra_server if ultra else need,
                availability_zone=pool.availability_zone,
                start=from_seconds(b.start),
                end=from_seconds(b.end),
                ultra_server_type=pool.ultra_server_type,
                ultra_server_count=need if ultra else None,
            )
        )
    return TrainingPlanOffering(offering_id(req.target_resource, out), req.target_resource, tuple(out))


def offering_id(target: TargetResource, blocks: Iterable[CapacityBlock]) -> str:
    """A stable id from the offering's content: the same offering always gets the same id."""
    content = [
        str(target),
        [
            [
                b.instance_type,
                b.instance_count,
                b.availability_zone,
                format_time(b.start),
                format_time(b.end),
                b.ultra_server_type,
                b.ultra_server_count,
            ]
            for b in blocks
        ],
    ]
    digest = hashlib.sha256(json.dumps(content, separators=(",", ":")).encode()).hexdigest()
    return "tpo-" + digest[:16]


# --- the inventory of a cluster ---


@dataclass(frozen=True, slots=True)
class FleetNode:
    """What a Node says about the capacity it is: its instance type, zone and UltraServer."""

    instance_type: str
    availability_zone: str
    ultra_server_id: str | None = None


def _ultra_type(instance_type: str, per: int) -> str:
    """The UltraServer type of `per` instances of `instance_type` (a name made up when unknown)."""
    for utype, (itype, size) in sorted(ULTRA_SERVER_TYPES.items()):
        if itype == instance_type and size == per:
            return utype
    return f"{instance_type}-x{per}"


def fleet_inventory(
    nodes: Iterable[FleetNode], plans: Iterable[TrainingPlan], at: datetime
) -> CapacityInventory:
    """The capacity of a cluster at `at`: a pool per (instance type, zone) of the Nodes without an
    UltraServer, a pool of whole UltraServers per (type, zone) for the others (an UltraServer's
    size is its largest node count, so one missing node does not shrink the pool), and one
    reservation per block of every plan that is not Failed and has not ended."""
    singles: dict[tuple[str, str], int] = {}
    ultras: dict[tuple[str, str], dict[str, int]] = {}
    for n in nodes:
        if n.ultra_server_id is None:
            singles[(n.instance_type, n.availability_zone)] = (
                singles.get((n.instance_type, n.availability_zone), 0) + 1
            )
        else:
            members = ultras.setdefault((n.instance_type, n.availability_zone), {})
            members[n.ultra_server_id] = members.get(n.ultra_server_id, 0) + 1
    pools = [CapacityPool(t, z, c) for (t, z), c in sorted(singles.items())]
    for (itype, zone), members in sorted(ultras.items()):
        per = max(members.values())
        pools.append(CapacityPool(itype, zone, len(members), _ultra_type(itype, per), per))
    reservations: list[CapacityReservation] = []
    for plan in plans:
        for block, state in zip(plan.blocks, plan_state(plan, at).blocks, strict=True):
            if state.status in (Status.FAILED, Status.EXPIRED):
                continue
            if block.ultra_server_type is not None and block.ultra_server_count:
                reservations.append(
                    CapacityReservation(
                        block.availability_zone,
                        block.ultra_server_count,
                        block.start,
                        block.end,
                        ultra_server_type=block.ultra_server_type,
                    )
                )
            else:
                reservations.append(
                    CapacityReservation(
                        block.availability_zone,
                        block.instance_count,
                        block.start,
                        block.end,
                        instance_type=block.instance_type,
                    )
                )
    return CapacityInventory(tuple(pools), tuple(reservations))
