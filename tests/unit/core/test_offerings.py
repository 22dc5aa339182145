"""Offering search: one block first, else two; zones per target; whole UltraServers; ranking."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangplugin.core.errors import InputError
from gangplugin.core.offerings import (
    CapacityInventory,
    CapacityPool,
    CapacityReservation,
    OfferingRequest,
    TrainingPlanOffering,
    search_offerings,
)
from gangplugin.core.plans import INSTANCE_COUNTS, TargetResource, block_end, is_block_end
from gangplugin.core.timeutil import parse_time

P5 = "ml.p5.48xlarge"
GB = "ml.u-p6e-gb200x72"
NOW = parse_time("2026-11-20T10:07:00Z", "now")
TJ, HP = TargetResource.TRAINING_JOB, TargetResource.HYPERPOD_CLUSTER


def t(text: str) -> datetime:
    return parse_time(text, "t")


def res(zone: str, count: int, start: str, end: str, itype: str = P5) -> CapacityReservation:
    return CapacityReservation(zone, count, t(start), t(end), instance_type=itype)


def req(
    hours: int = 48,
    count: int = 16,
    target: TargetResource = TJ,
    after: str = "2026-12-01T11:30:00Z",
    before: str = "2026-12-20T11:30:00Z",
    **kw: object,
) -> OfferingRequest:
    base: dict[str, object] = {"instance_type": P5, "instance_count": count}
    base.update(kw)
    return OfferingRequest(target, hours, t(after), t(before), NOW, **base)  # type: ignore[arg-type]


def spans(o: TrainingPlanOffering) -> list[tuple[str, str, str]]:
    return [(b.availability_zone, b.start.isoformat()[:16], b.end.isoformat()[:16]) for b in o.blocks]


A = CapacityPool(P5, "us-east-1a", 16)
B = CapacityPool(P5, "us-east-1b", 16)


def test_single_block_when_free() -> None:
    found = search_offerings(CapacityInventory((A,)), req())
    assert len(found) == 1
    (o,) = found
    assert spans(o) == [("us-east-1a", "2026-12-01T11:30", "2026-12-03T11:30")]
    assert o.duration_seconds == 48 * 3600 and o.offering_id.startswith("tpo-")
    assert o.blocks[0].instance_count == 16 and o.blocks[0].ultra_server_type is None


def test_single_block_starts_after_a_reservation_ends() -> None:
    inv = CapacityInventory((A,), (res("us-east-1a", 8, "2026-11-01T00:00:00Z", "2026-12-02T15:00:00Z"),))
    (o,) = search_offerings(inv, req())
    assert spans(o) == [("us-east-1a", "2026-12-02T15:00", "2026-12-05T11:30")]


def test_two_blocks_around_a_reservation_in_the_middle() -> None:
    # Free Dec 1-3 and from Dec 4; the window ends Dec 6: no 3-day block fits, two blocks do.
    inv = CapacityInventory((A,), (res("us-east-1a", 16, "2026-12-03T11:30:00Z", "2026-12-04T11:30:00Z"),))
    found = search_offerings(inv, req(hours=72, before="2026-12-06T11:30:00Z"))
    assert [spans(o) for o in found] == [
        [
            ("us-east-1a", "2026-12-01T11:30", "2026-12-03T11:30"),
            ("us-east-1a", "2026-12-04T11:30", "2026-12-05T11:30"),
        ],
        # The 1-day first block moves from Dec 1 to Dec 2: same end, one day less gap.
        [
            ("us-east-1a", "2026-12-02T11:30", "2026-12-03T11:30"),
            ("us-east-1a", "2026-12-04T11:30", "2026-12-06T11:30"),
        ],
    ]
    assert all(o.duration_seconds == 72 * 3600 for o in found)


def _staggered() -> CapacityInventory:
    # Zone a is free until Dec 3, zone b only from Dec 3; the window is Dec 1-5 (4 days).
    return CapacityInventory(
        (A, B),
        (
            res("us-east-1a", 16, "2026-12-03T11:30:00Z", "2027-01-01T11:30:00Z"),
            res("us-east-1b", 16, "2026-11-01T11:30:00Z", "2026-12-03T11:30:00Z"),
        ),
    )


def test_training_job_may_change_zone_between_blocks() -> None:
    found = search_offerings(_staggered(), req(hours=96, before="2026-12-05T11:30:00Z"))
    assert [spans(o) for o in found] == [
        [
            ("us-east-1a", "2026-12-01T11:30", "2026-12-03T11:30"),
            ("us-east-1b", "2026-12-03T11:30", "2026-12-05T11:30"),
        ]
    ]


def test_hyperpod_cluster_keeps_one_zone() -> None:
    assert search_offerings(_staggered(), req(hours=96, target=HP, before="2026-12-05T11:30:00Z")) == ()
    # With room in zone a after a gap, hyperpod gets a same-zone split.
    inv = CapacityInventory(
        (A, B),
        (
            *_staggered().reservations[1:],
            res("us-east-1a", 16, "2026-12-03T11:30:00Z", "2026-12-04T11:30:00Z"),
        ),
    )
    found = search_offerings(inv, req(hours=96, target=HP, before="2026-12-07T11:30:00Z"))
    assert found
    for o in found:
        assert len({b.availability_zone for b in o.blocks}) == 1


def test_ultra_servers_whole_units() -> None:
    pool = CapacityPool("ml.p6e-gb200.36xlarge", "us-east-1-dfw-2a", 4, GB, 18)
    taken = CapacityReservation(
        "us-east-1-dfw-2a", 3, t("2026-12-01T11:30:00Z"), t("2026-12-02T11:30:00Z"), ultra_server_type=GB
    )
    inv = CapacityInventory((pool, A), (taken,))
    ask = req(hours=24, instance_type=None, instance_count=None, ultra_server_type=GB, ultra_server_count=2)
    (o,) = search_offerings(inv, ask)
    (b,) = o.blocks
    assert (b.ultra_server_type, b.ultra_server_count, b.instance_count) == (GB, 2, 36)
    assert b.instance_type == "ml.p6e-gb200.36xlarge"
    assert b.start == t("2026-12-02T11:30:00Z")  # only 1 UltraServer free on Dec 1
    # An instance request never takes instances out of an UltraServer pool: it is told to ask for one.
    with pytest.raises(InputError, match="comes only in whole UltraServers here: ask for ultraServerType"):
        search_offerings(inv, req(instance_type="ml.p6e-gb200.36xlarge", count=1))
    with pytest.raises(InputError) as err:
        search_offerings(
            inv, req(instance_type=None, instance_count=None, ultra_server_type=GB, ultra_server_count=0)
        )
    assert err.value.field == "ultraServerCount"


def test_nothing_fits_is_an_empty_answer() -> None:
    assert search_offerings(CapacityInventory((A,)), req(count=32)) == ()
    assert search_offerings(CapacityInventory((A,)), req(before="2026-12-02T11:30:00Z")) == ()


def test_a_type_the_inventory_lacks_is_refused_naming_the_closest() -> None:
    with pytest.raises(InputError) as err:
        search_offerings(CapacityInventory((A,)), req(instance_type="ml.p5.48xlarg"))
    assert (err.value.field, err.value.problem) == (
        "instanceType",
        "'ml.p5.48xlarg' is not in the inventory; did you mean ml.p5.48xlarge?",
    )
    with pytest.raises(InputError, match=r"'ml\.p5\.48xlarge' is not in the inventory; it has none"):
        search_offerings(CapacityInventory(()), req())
    ask = req(
        instance_type=None, instance_count=None, ultra_server_type="ml.u-p6e-gb200x7", ultra_server_count=1
    )
    with pytest.raises(InputError) as err:
        search_offerings(CapacityInventory((A,)), ask)
    assert err.value.field == "ultraServerType" and "it has none" in err.value.problem


def test_at_most_three_ranked_and_deterministic() -> None:
    zones = [CapacityPool(P5, f"us-east-1{z}", 16) for z in "edcba"]
    # Each zone frees up one day later than the previous one.
    inv = CapacityInventory(
        tuple(zones),
        tuple(
            res(p.availability_zone, 16, "2026-11-01T11:30:00Z", f"2026-12-0{i + 1}T11:30:00Z")
            for i, p in enumerate(sorted(zones, key=lambda p: p.availability_zone))
        ),
    )
    found = search_offerings(inv, req())
    assert [o.blocks[0].availability_zone for o in found] == ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert search_offerings(inv, req()) == found
    assert len({o.offering_id for o in found}) == 3
    shuffled = CapacityInventory(tuple(reversed(inv.pools)), tuple(reversed(inv.reservations)))
    assert search_offerings(shuffled, req()) == found


def test_ties_on_end_prefer_fewer_blocks_then_less_gap() -> None:
    # Zone a is free all along but for one day; zone b frees later. Single blocks win.
    found = search_offerings(
        CapacityInventory((A, B), (res("us-east-1b", 16, "2026-11-01T11:30:00Z", "2026-12-02T11:30:00Z"),)),
        req(),
    )
    assert [len(o.blocks) for o in found] == [1, 1]
    assert [o.blocks[0].availability_zone for o in found] == ["us-east-1a", "us-east-1b"]


def test_start_respects_lead_time_and_window() -> None:
    # start-after in the past: the earliest start is now + 30 minutes, rounded up to a minute.
    (o,) = search_offerings(CapacityInventory((A,)), req(hours=24, after="2026-11-01T00:00:00Z"))
    assert o.blocks[0].start == t("2026-11-20T10:37:00Z")
    assert o.blocks[0].end == t("2026-11-21T11:30:00Z")
    # Nothing may start more than 56 days ahead.
    late = req(after="2027-01-16T10:08:00Z", before="2027-03-01T11:30:00Z")
    assert search_offerings(CapacityInventory((A,)), late) == ()


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"count": 3}, "instanceCount"),
        ({"hours": 0}, "durationHours"),
        ({"hours": 182 * 24 + 1}, "durationHours"),
        ({"before": "2026-11-30T11:30:00Z"}, "endTimeBefore"),
        ({"instance_type": None}, "instanceType"),
        ({"ultra_server_type": GB}, "instanceType"),
    ],
)
def test_bad_requests(kw: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as err:
        search_offerings(CapacityInventory((A,)), req(**kw))  # type: ignore[arg-type]
    assert err.value.field == field


# --- properties ---

_BASE = t("2026-12-01T00:00:00Z")
_ZONES = ("us-east-1a", "us-east-1b")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[CapacityInventory, OfferingRequest]:
    pools = tuple(CapacityPool(P5, z, draw(st.sampled_from([8, 16, 32, 64]))) for z in _ZONES)
    reservations = []
    for _ in range(draw(st.integers(0, 12))):
        zone = draw(st.sampled_from(_ZONES))
        start = _BASE + timedelta(hours=draw(st.integers(-48, 24 * 20)))
        length = timedelta(hours=draw(st.integers(1, 24 * 6)))
        reservations.append(CapacityReservation(zone, draw(st.integers(1, 32)), start, start + length, P5))
    after = _BASE + timedelta(minutes=draw(st.integers(-60 * 24, 60 * 24 * 10)))
    before = after + timedelta(hours=draw(st.integers(24, 24 * 25)))
    hours = draw(st.integers(1, 24 * 6))
    if draw(st.booleans()):
        # A day when every zone is full, inside the first span of the request's length, so that
        # one block often cannot fit and two blocks around it can.
        wall = after + timedelta(hours=draw(st.integers(0, hours + 24)))
        for zone in _ZONES:
            reservations.append(CapacityReservation(zone, 64, wall, wall + timedelta(days=1), P5))
        before = after + timedelta(hours=hours + draw(st.integers(24, 24 * 4)))
    request = OfferingRequest(
        target_resource=draw(st.sampled_from([TJ, HP])),
        duration_hours=hours,
        start_after=after,
        end_before=before,
        now=_BASE - timedelta(minutes=draw(st.integers(0, 60 * 24 * 3))),
        instance_type=P5,
        instance_count=draw(st.sampled_from(INSTANCE_COUNTS[2:6])),
    )
    return CapacityInventory(pools, tuple(reservations)), request


def _free(inv: CapacityInventory, zone: str, at: datetime) -> int:
    pool = next(p for p in inv.pools if p.availability_zone == zone)
    used = sum(r.count for r in inv.reservations if r.availability_zone == zone and r.start <= at < r.end)
    return pool.count - used


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_offering_keeps_the_rules(scenario: tuple[CapacityInventory, OfferingRequest]) -> None:
    inv, rq = scenario
    found = search_offerings(inv, rq)
    assert len(found) <= 3
    assert len({o.offering_id for o in found}) == len(found)
    earliest = max(rq.start_after, rq.now + timedelta(minutes=30))
    ends = [o.blocks[-1].end for o in found]
    assert ends == sorted(ends)
    for o in found:
        assert 1 <= len(o.blocks) <= 2
        assert len({len(x.blocks) for x in found}) == 1  # one block first, else two
        assert o.duration_seconds >= rq.duration_hours * 3600
        if rq.target_resource is HP:
            assert len({b.availability_zone for b in o.blocks}) == 1
        for first, second in zip(o.blocks, o.blocks[1:], strict=False):
            assert first.end <= second.start
        for b in o.blocks:
            assert b.instance_count == rq.instance_count and b.instance_type == P5
            assert is_block_end(b.end)
            assert earliest <= b.start <= rq.now + timedelta(days=56)
            assert b.end <= rq.end_before
            # Free capacity changes only where reservations start: check those and the start.
            moments = [b.start] + [r.start for r in inv.reservations if b.start < r.start < b.end]
            for m in moments:
                assert _free(inv, b.availability_zone, m) >= b.instance_count


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_single_block_is_the_earliest_candidate(scenario: tuple[CapacityInventory, OfferingRequest]) -> None:
    """Brute force over the documented candidate starts agrees with the search."""
    inv, rq = scenario
    days = -(-rq.duration_hours // 24)
    lo = max(rq.start_after, rq.now + timedelta(minutes=30))
    lo = lo + (-lo.timestamp() % 60) * timedelta(seconds=1)
    best: dict[str, datetime] = {}
    for zone in _ZONES:
        candidates = sorted(
            {lo} | {r.end for r in inv.reservations if r.availability_zone == zone and r.end > lo}
        )
        for s in candidates:
            e = block_end(s, days)
            if s > rq.now + timedelta(days=56) or e > rq.end_before:
                break
            points = [s] + [r.start for r in inv.reservations if s < r.start < e]
            if all(_free(inv, zone, p) >= (rq.instance_count or 0) for p in points):
                best[zone] = s
                break
    found = search_offerings(inv, rq)
    singles = {o.blocks[0].availability_zone: o.blocks[0].start for o in found if len(o.blocks) == 1}
    assert singles == best
