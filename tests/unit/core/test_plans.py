"""Plan rules and the plan timeline at boundaries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gangplugin.core.errors import InputError
from gangplugin.core.plans import (
    CapacityBlock,
    Status,
    TargetResource,
    TrainingPlan,
    block_end,
    block_problem,
    is_block_end,
    plan_state,
    termination_lead,
    whole_days,
)
from gangplugin.core.timeutil import format_time, parse_time


def t(text: str) -> datetime:
    return parse_time(text, "t")


def block(start: str, end: str, count: int = 16, **kw: object) -> CapacityBlock:
    return CapacityBlock("ml.p5.48xlarge", count, "us-east-1a", t(start), t(end), **kw)  # type: ignore[arg-type]


def plan(*blocks: CapacityBlock, target: TargetResource = TargetResource.TRAINING_JOB) -> TrainingPlan:
    return TrainingPlan("p", target, blocks)


B0 = block("2026-12-01T11:30:00Z", "2026-12-03T11:30:00Z", 16)
B1 = block("2026-12-05T11:30:00Z", "2026-12-06T11:30:00Z", 32)
TWO = plan(B0, B1)


# --- time helpers ---


def test_parse_and_format_round_trip() -> None:
    assert format_time(t("2026-12-01T11:30:00Z")) == "2026-12-01T11:30:00Z"
    assert format_time(t("2026-12-01T12:30:00+01:00")) == "2026-12-01T11:30:00Z"
    assert format_time(t("2026-12-01t11:30:00.25z")) == "2026-12-01T11:30:00.25Z"


@pytest.mark.parametrize("bad", ["2026-12-01", "2026-12-01T11:30:00", "soon", "", None, 5])
def test_parse_refuses_non_rfc3339(bad: object) -> None:
    with pytest.raises(InputError) as err:
        parse_time(bad, "spec.x")
    assert err.value.field == "spec.x"


def test_parse_accepts_yaml_datetimes() -> None:
    assert parse_time(datetime(2026, 12, 1, 11, 30, tzinfo=UTC), "x") == t("2026-12-01T11:30:00Z")
    with pytest.raises(InputError, match="no time zone"):
        parse_time(datetime(2026, 12, 1, 11, 30), "x")


# --- rules ---


def test_block_end_is_first_1130_after_whole_days() -> None:
    assert block_end(t("2026-12-01T11:30:00Z"), 2) == t("2026-12-03T11:30:00Z")
    assert block_end(t("2026-12-01T00:00:00Z"), 1) == t("2026-12-02T11:30:00Z")
    assert block_end(t("2026-12-01T12:00:00Z"), 1) == t("2026-12-03T11:30:00Z")


@given(st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)))
def test_block_end_properties(start: datetime) -> None:
    for days in (1, 7, 182):
        end = block_end(start, days)
        assert is_block_end(end)
        assert timedelta(days=days) <= end - start < timedelta(days=days + 1)
        assert whole_days(start, end) == days


@pytest.mark.parametrize(
    ("blk", "problem"),
    [
        (block("2026-12-01T11:30:00Z", "2026-12-02T11:30:00Z", 3), "not one of 1, 2, 4, 8, 16, 32, 64"),
        (block("2026-12-01T11:30:00Z", "2026-12-02T12:00:00Z"), "not at 11:30 UTC"),
        (block("2026-12-01T14:00:00Z", "2026-12-02T11:30:00Z"), "0 whole days"),
        (block("2026-01-01T11:30:00Z", "2026-07-03T11:30:00Z"), "183 whole days"),
        (block("2026-12-02T11:30:00Z", "2026-12-01T11:30:00Z"), "not after startTime"),
    ],
)
def test_block_problems(blk: CapacityBlock, problem: str) -> None:
    found = block_problem(blk)
    assert found is not None and problem in found


def test_valid_blocks_have_no_problem() -> None:
    assert block_problem(B0) is None
    assert block_problem(block("2026-01-01T11:30:00Z", "2026-07-02T11:30:00Z")) is None  # 182 days
    ultra = CapacityBlock(
        "ml.p6e-gb200.36xlarge", 36, "az", B0.start, B0.end, "ml.u-p6e-gb200x72", ultra_server_count=2
    )
    assert block_problem(ultra) is None
    zero = CapacityBlock("ml.p6e-gb200.36xlarge", 0, "az", B0.start, B0.end, "ml.u-p6e-gb200x72", 0)
    assert "whole units" in (block_problem(zero) or "")


def test_termination_lead_per_target() -> None:
    assert termination_lead(TargetResource.TRAINING_JOB) == timedelta(minutes=30)
    assert termination_lead(TargetResource.HYPERPOD_CLUSTER) == timedelta(minutes=60)


# --- timeline ---


def test_before_first_block_is_scheduled() -> None:
    s = plan_state(TWO, t("2026-11-30T00:00:00Z"))
    assert s.status is Status.SCHEDULED
    assert [b.status for b in s.blocks] == [Status.SCHEDULED, Status.SCHEDULED]
    assert s.current_block is None and s.active_instance_count == 0
    assert s.next_transition == B0.start


def test_exactly_start_is_active() -> None:
    s = plan_state(TWO, B0.start)
    assert s.status is Status.ACTIVE
    assert s.blocks[0].status is Status.ACTIVE
    assert s.current_block == 0 and s.active_instance_count == 16
    assert s.next_transition == B0.end


def test_just_before_end_is_active_and_draining() -> None:
    s = plan_state(TWO, B0.end - timedelta(microseconds=1))
    assert s.blocks[0].status is Status.ACTIVE and s.draining


def test_exactly_end_is_expired_and_plan_scheduled_in_the_gap() -> None:
    s = plan_state(TWO, B0.end)
    assert s.blocks[0].status is Status.EXPIRED
    assert s.blocks[1].status is Status.SCHEDULED
    assert s.status is Status.SCHEDULED
    assert s.current_block is None and s.active_instance_count == 0
    assert s.next_transition == B1.start


def test_second_block_active_then_plan_expired() -> None:
    s = plan_state(TWO, B1.start)
    assert s.current_block == 1 and s.active_instance_count == 32 and s.status is Status.ACTIVE
    end = plan_state(TWO, B1.end)
    assert end.status is Status.EXPIRED and end.next_transition is None
    assert end.current_block is None and end.active_instance_count == 0


@pytest.mark.parametrize(
    ("target", "lead"), [(TargetResource.TRAINING_JOB, 30), (TargetResource.HYPERPOD_CLUSTER, 60)]
)
def test_termination_start_per_block(target: TargetResource, lead: int) -> None:
    s = plan_state(plan(B0, B1, target=target), B0.start)
    assert [b.termination_starts_at for b in s.blocks] == [
        B0.end - timedelta(minutes=lead),
        B1.end - timedelta(minutes=lead),
    ]
    assert not s.draining
    assert plan_state(plan(B0, target=target), B0.end - timedelta(minutes=lead)).draining
    assert not plan_state(plan(B0, target=target), B0.end - timedelta(minutes=lead, seconds=1)).draining


def test_marked_failed_block_gives_no_capacity() -> None:
    failed = block("2026-12-01T11:30:00Z", "2026-12-03T11:30:00Z", marked=Status.FAILED)
    s = plan_state(plan(failed, B1), B0.start)
    assert s.blocks[0].status is Status.FAILED and s.blocks[0].termination_starts_at is None
    assert s.status is Status.SCHEDULED and s.active_instance_count == 0
    assert s.next_transition == B1.start


def test_invalid_block_is_failed_and_all_failed_plan_is_failed() -> None:
    bad = block("2026-12-01T11:30:00Z", "2026-12-03T11:30:00Z", 3)
    s = plan_state(plan(bad), B0.start)
    assert s.blocks[0].status is Status.FAILED and s.status is Status.FAILED
    assert s.blocks[0].reason is not None and "instanceCount 3" in s.blocks[0].reason
    assert s.next_transition is None


def test_pending_block_until_start_then_failed() -> None:
    pending = block("2026-12-01T11:30:00Z", "2026-12-03T11:30:00Z", marked=Status.PENDING)
    before = plan_state(plan(pending), B0.start - timedelta(seconds=1))
    assert before.status is Status.PENDING and before.next_transition == B0.start
    at = plan_state(plan(pending), B0.start)
    assert at.status is Status.FAILED and at.active_instance_count == 0


def test_overlapping_blocks_add_capacity() -> None:
    other = CapacityBlock("ml.p5.48xlarge", 8, "us-east-1b", B0.start, B0.end)
    s = plan_state(plan(B0, other), B0.start)
    assert s.active_instance_count == 24 and s.current_block == 0


def test_plan_without_blocks_is_pending() -> None:
    assert plan_state(plan(), B0.start).status is Status.PENDING
