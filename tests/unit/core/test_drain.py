"""Draining before plan capacity ends: admission, eviction and the block end to annotate."""

from __future__ import annotations

from datetime import datetime, timedelta

from gangplugin.core.drain import capacity_drop, drain_decision, gang_drain, termination_start
from gangplugin.core.plans import CapacityBlock, TargetResource, TrainingPlan
from gangplugin.core.timeutil import parse_time

H = timedelta(hours=1)


def t(text: str) -> datetime:
    return parse_time(text, "t")


def blk(start: str, end: str, count: int = 4) -> CapacityBlock:
    return CapacityBlock("ml.p5.48xlarge", count, "us-east-1b", t(start), t(end))


def plan(
    *blocks: CapacityBlock,
    target: TargetResource = TargetResource.TRAINING_JOB,
    cq: str = "training",
    flavor: str = "p5",
    lead: timedelta | None = None,
) -> TrainingPlan:
    return TrainingPlan("p", target, blocks, cq, flavor, {"nvidia.com/gpu": 8}, termination_lead=lead)


END = t("2026-12-03T11:30:00Z")
TERM = t("2026-12-03T11:00:00Z")
P = plan(
    blk("2026-12-01T11:30:00Z", "2026-12-03T11:30:00Z"), blk("2026-12-05T11:30:00Z", "2026-12-06T11:30:00Z")
)


def test_no_plan_no_opinion() -> None:
    d = drain_decision([], "training", "p5", t("2026-12-02T00:00:00Z"), None)
    assert d.admit and not d.evict and d.block_end is None and d.evict_at is None


def test_before_termination_start_admit_and_tell_when_to_drain() -> None:
    d = drain_decision([P], "training", "p5", t("2026-12-02T00:00:00Z"), None)
    assert d.admit and not d.evict
    assert d.block_end == END and d.evict_at == TERM


def test_from_termination_start_long_or_unknown_gangs_wait() -> None:
    assert not drain_decision([P], "training", "p5", TERM, None).admit
    d = drain_decision([P], "training", "p5", TERM + timedelta(minutes=5), 2 * H)
    assert not d.admit and "max runtime" in d.reason
    short = drain_decision([P], "training", "p5", TERM + timedelta(minutes=5), timedelta(minutes=20))
    assert short.admit and short.evict_at is None and short.block_end == END


def test_running_gang_is_evicted_at_termination_start() -> None:
    admitted = t("2026-12-02T00:00:00Z")
    before = drain_decision([P], "training", "p5", TERM - timedelta(seconds=1), None, admitted)
    assert not before.evict and before.evict_at == TERM
    at = drain_decision([P], "training", "p5", TERM, None, admitted)
    assert at.evict and at.evict_at == TERM and "still running" in at.reason
    # A gang whose max runtime ends before the block end keeps running.
    ok = drain_decision([P], "training", "p5", TERM, timedelta(hours=30), admitted)
    assert not ok.evict and ok.evict_at is None


def test_hyperpod_cluster_drains_an_hour_ahead() -> None:
    hp = plan(*P.blocks, target=TargetResource.HYPERPOD_CLUSTER)
    assert drain_decision([hp], "training", "p5", t("2026-12-02T00:00:00Z"), None).evict_at == END - H


def test_test_override_shortens_the_lead() -> None:
    short = plan(*P.blocks, lead=timedelta(seconds=10))
    assert termination_start([short], "training", END) == END - timedelta(seconds=10)


def test_between_blocks_nothing_drains_and_next_block_counts() -> None:
    gap = drain_decision([P], "training", "p5", t("2026-12-04T00:00:00Z"), None, t("2026-12-03T12:00:00Z"))
    assert gap.admit and not gap.evict and gap.block_end is None
    second = drain_decision([P], "training", "p5", t("2026-12-05T12:00:00Z"), None)
    assert second.block_end == t("2026-12-06T11:30:00Z")


def test_back_to_back_blocks_are_one_stretch() -> None:
    a = plan(
        blk("2026-12-01T11:30:00Z", "2026-12-03T11:30:00Z"),
        blk("2026-12-03T11:30:00Z", "2026-12-05T11:30:00Z"),
    )
    assert capacity_drop([a], "training", t("2026-12-02T00:00:00Z")) == t("2026-12-05T11:30:00Z")
    d = drain_decision([a], "training", "p5", TERM, None, t("2026-12-02T00:00:00Z"))
    assert not d.evict and d.evict_at == t("2026-12-05T11:00:00Z")


def test_a_partial_drop_drains_and_other_queues_do_not_count() -> None:
    big = plan(blk("2026-12-01T11:30:00Z", "2026-12-04T11:30:00Z", 8))
    elsewhere = plan(blk("2026-12-01T11:30:00Z", "2026-12-02T11:30:00Z", 8), cq="other")
    assert capacity_drop([P, big, elsewhere], "training", t("2026-12-02T00:00:00Z")) == END
    other_flavor = plan(blk("2026-12-01T11:30:00Z", "2026-12-02T11:30:00Z"), flavor="gb200")
    d = drain_decision([P, other_flavor], "training", "p5", t("2026-12-01T12:00:00Z"), None)
    assert d.block_end == END


def test_gang_drain_ignores_queues_and_flavors_no_plan_feeds() -> None:
    at = t("2026-12-02T00:00:00Z")
    assert gang_drain([P], "training", ["other-flavor"], at, None) is None
    assert gang_drain([P], "other-queue", ["p5"], at, None) is None
    d = gang_drain([P], "training", ["p5", "cpu-only"], at, None)
    assert d is not None and d.admit and d.block_end == END and d.evict_at == TERM


def test_gang_drain_strictest_flavor_wins() -> None:
    # Flavor "a" ends its capacity earlier than flavor "b": the gang holds both until it ends.
    early = plan(blk("2026-12-01T11:30:00Z", "2026-12-02T11:30:00Z"), flavor="a")
    late = plan(blk("2026-12-01T11:30:00Z", "2026-12-03T11:30:00Z"), flavor="b")
    at = t("2026-12-02T11:10:00Z")  # past a's termination start, well before b's
    waiting = gang_drain([early, late], "training", ["a", "b"], at, 2 * H)
    assert waiting is not None and not waiting.admit
    assert waiting.block_end == t("2026-12-02T11:30:00Z") and "2026-12-02T11:30:00Z" in waiting.reason
    running = gang_drain([early, late], "training", ["b", "a"], at, None, t("2026-12-01T12:00:00Z"))
    assert running is not None and running.evict and running.admit
    assert running.evict_at == t("2026-12-02T11:00:00Z")
    only_b = gang_drain([early, late], "training", ["b"], at, None, t("2026-12-01T12:00:00Z"))
    assert only_b is not None and not only_b.evict and only_b.block_end == END


def test_gang_drain_holds_a_waiting_gang_between_blocks() -> None:
    gap = t("2026-12-04T00:00:00Z")
    waiting = gang_drain([P], "training", ["p5"], gap, timedelta(minutes=5))
    assert waiting is not None and not waiting.admit and "no plan capacity" in waiting.reason
    # One that runs (admitted in the block before) is left alone: it was drained at its end if needed.
    running = gang_drain([P], "training", ["p5"], gap, None, t("2026-12-03T12:00:00Z"))
    assert running is not None and running.admit and not running.evict
    next_block = gang_drain([P], "training", ["p5"], t("2026-12-05T12:00:00Z"), None)
    assert next_block is not None and next_block.admit
