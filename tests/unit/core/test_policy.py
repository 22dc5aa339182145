"""GangPolicy rules and the requeue backoff."""

from __future__ import annotations

import pytest

from gangplugin.core.errors import InputError
from gangplugin.core.placement import PlacementPolicy
from gangplugin.core.policy import (
    GangPolicy,
    Requeue,
    backoff_seconds,
    requeue_decision,
    validate_policy,
)


def test_defaults_follow_hyperpod() -> None:
    p = validate_policy(GangPolicy())
    assert (p.ready_timeout, p.recovery_timeout, p.unscheduled_timeout) == (300.0, 300.0, None)
    assert (p.requeue.backoff_base_seconds, p.requeue.backoff_max_seconds) == (60, 3600)
    assert p.requeue.backoff_limit_count is None and not p.sequential


def test_backoff_doubles_and_caps() -> None:
    rq = Requeue(backoff_base_seconds=60, backoff_max_seconds=3600)
    assert [backoff_seconds(rq, n) for n in range(1, 9)] == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert backoff_seconds(rq, 10_000) == 3600
    with pytest.raises(ValueError):
        backoff_seconds(rq, 0)


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (GangPolicy(ready_timeout=0), "spec.readyTimeout"),
        (GangPolicy(unscheduled_timeout=-1), "spec.unscheduledTimeout"),
        (GangPolicy(recovery_timeout=-5), "spec.recoveryTimeout"),
        (GangPolicy(admission="OneByOne"), "spec.admission"),
        (GangPolicy(node_failure="Ignore"), "spec.nodeFailure"),
        (GangPolicy(requeue=Requeue(timestamp="Now")), "spec.requeue.timestamp"),
        (GangPolicy(requeue=Requeue(backoff_base_seconds=0)), "spec.requeue.backoffBaseSeconds"),
        (
            GangPolicy(requeue=Requeue(backoff_base_seconds=60, backoff_max_seconds=30)),
            "spec.requeue.backoffMaxSeconds",
        ),
        (GangPolicy(requeue=Requeue(backoff_limit_count=-1)), "spec.requeue.backoffLimitCount"),
        (GangPolicy(placement=PlacementPolicy(-1)), "spec.sparesPerUltraServer"),
    ],
)
def test_bad_values_name_the_field(policy: GangPolicy, field: str) -> None:
    with pytest.raises(InputError) as err:
        validate_policy(policy)
    assert err.value.field == field


def test_retry_then_reject_past_the_limit() -> None:
    p = GangPolicy(requeue=Requeue(backoff_base_seconds=10, backoff_max_seconds=25, backoff_limit_count=3))
    decisions = [requeue_decision(p, n, "timed out", now=1000.0, created_at=0.0) for n in range(4)]
    assert [d.state for d in decisions] == ["Retry", "Retry", "Retry", "Rejected"]
    assert [d.requeue_after_seconds for d in decisions] == [10, 20, 25, None]
    assert "retry 2/3" in decisions[1].message and "timed out" in decisions[1].message
    assert "backoffLimitCount 3" in decisions[3].message


def test_limit_zero_rejects_the_first_timeout() -> None:
    p = GangPolicy(requeue=Requeue(backoff_limit_count=0))
    assert requeue_decision(p, 0, "x", 0.0, 0.0).state == "Rejected"


def test_creation_timestamp_counts_backoff_from_creation() -> None:
    p = GangPolicy(requeue=Requeue(timestamp="Creation", backoff_base_seconds=100))
    assert requeue_decision(p, 0, "x", now=1030.0, created_at=1000.0).requeue_after_seconds == 70
    # a Workload older than its backoff goes again at once
    assert requeue_decision(p, 0, "x", now=5000.0, created_at=1000.0).requeue_after_seconds == 0
    eviction = GangPolicy(requeue=Requeue(backoff_base_seconds=100))
    assert requeue_decision(eviction, 0, "x", now=5000.0, created_at=1000.0).requeue_after_seconds == 100
