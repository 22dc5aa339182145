"""Leader election decisions: acquire, renew, wait, take over, lose, release."""

from __future__ import annotations

import pytest

from gangplugin.core.errors import InputError
from gangplugin.core.leader import (
    Action,
    ElectionConfig,
    LeaseRecord,
    Observation,
    decide,
    lost,
    release,
)

CFG = ElectionConfig()


def test_no_lease_is_created_held_by_me() -> None:
    d = decide(None, None, "a", 100.0, CFG)
    assert d.action is Action.CREATE
    assert d.record == LeaseRecord("a", 15.0, 100.0, 100.0, 0)


def test_my_lease_is_renewed_keeping_acquire_time_and_transitions() -> None:
    lease = LeaseRecord("a", 15.0, 50.0, 98.0, 3)
    d = decide(lease, Observation(lease, 98.0), "a", 100.0, CFG)
    assert d.action is Action.WRITE
    assert d.record == LeaseRecord("a", 15.0, 50.0, 100.0, 3)
    assert d.retry_after == CFG.retry_period


def test_a_restarted_replica_with_the_same_identity_renews_at_once() -> None:
    lease = LeaseRecord("a", 15.0, 50.0, 98.0, 3)
    d = decide(lease, None, "a", 99.0, CFG)
    assert d.action is Action.WRITE and d.record is not None and d.record.holder == "a"


def test_anothers_fresh_lease_makes_me_wait_and_remember_when_i_saw_it() -> None:
    lease = LeaseRecord("b", 15.0, 10.0, 10.0, 0)
    d = decide(lease, None, "a", 100.0, CFG)
    assert d.action is Action.WAIT and d.record is None
    assert d.observed == Observation(lease, 100.0)
    assert "held by b" in d.reason


def test_expiry_runs_from_my_observation_not_the_holders_clock() -> None:
    # renewTime far in the past by my clock (skewed machines) does not make it expired.
    lease = LeaseRecord("b", 15.0, 10.0, 10.0, 0)
    first = decide(lease, None, "a", 1000.0, CFG)
    assert first.action is Action.WAIT
    still = decide(lease, first.observed, "a", 1014.9, CFG)
    assert still.action is Action.WAIT
    taken = decide(lease, still.observed, "a", 1015.0, CFG)
    assert taken.action is Action.WRITE
    assert taken.record == LeaseRecord("a", 15.0, 1015.0, 1015.0, 1)


def test_a_renewal_seen_restarts_the_expiry_clock() -> None:
    lease = LeaseRecord("b", 15.0, 10.0, 10.0, 0)
    d = decide(lease, None, "a", 0.0, CFG)
    renewed = LeaseRecord("b", 15.0, 10.0, 12.0, 0)
    d = decide(renewed, d.observed, "a", 14.0, CFG)
    assert d.observed == Observation(renewed, 14.0)
    assert decide(renewed, d.observed, "a", 28.0, CFG).action is Action.WAIT
    assert decide(renewed, d.observed, "a", 29.0, CFG).action is Action.WRITE


def test_a_released_lease_is_taken_at_once() -> None:
    lease = LeaseRecord(None, 1.0, 10.0, 10.0, 4)
    d = decide(lease, None, "a", 10.5, CFG)
    assert d.action is Action.WRITE
    assert d.record == LeaseRecord("a", 15.0, 10.5, 10.5, 5)


def test_lost_after_the_renew_deadline_and_before_the_lease_expires() -> None:
    assert not lost(100.0, 109.9, CFG)
    assert lost(100.0, 110.0, CFG)
    # The contract that makes two leaders impossible: a leader stops before others may take over.
    assert CFG.renew_deadline < CFG.lease_duration


def test_release_only_my_own_lease() -> None:
    mine = LeaseRecord("a", 15.0, 1.0, 5.0, 2)
    assert release(mine, "a", 6.0) == LeaseRecord(None, 1.0, 6.0, 6.0, 2)
    assert release(mine, "b", 6.0) is None


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        (ElectionConfig(10.0, 10.0, 2.0), "--leader-election-lease-duration"),
        (ElectionConfig(15.0, 2.0, 2.0), "--leader-election-renew-deadline"),
        (ElectionConfig(15.0, 10.0, 0.0), "--leader-election-retry-period"),
    ],
)
def test_bad_timings_name_the_option(cfg: ElectionConfig, field: str) -> None:
    with pytest.raises(InputError) as err:
        cfg.validate()
    assert err.value.field == field


def test_defaults_are_valid() -> None:
    assert CFG.validate() is CFG
