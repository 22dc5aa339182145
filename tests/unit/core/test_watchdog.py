"""The readiness watchdog's verdicts over observed gang states and `now`."""

from __future__ import annotations

import pytest

from gangplugin.core.policy import GangPolicy
from gangplugin.core.watchdog import FAILURE_WINDOW, GangObservation, watch

POLICY = GangPolicy(ready_timeout=300, unscheduled_timeout=60, recovery_timeout=120)


def obs(**kw: object) -> GangObservation:
    base: dict[str, object] = {"size": 8, "bound": 8, "ready": 8, "admitted_at": 1000.0}
    base.update(kw)
    return GangObservation(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("observed", "before", "phase", "deadline", "says"),
    [
        pytest.param(
            obs(bound=5, ready=3),
            1030.0,
            "Scheduling",
            1060.0,
            ("5/8 pods bound", "unscheduledTimeout 1m"),
            id="unbound-gang-times-out-on-unscheduled-timeout-first",
        ),
        pytest.param(
            obs(ready=6),
            1100.0,
            "Starting",
            1300.0,
            ("6/8 pods Ready", "readyTimeout 5m"),
            id="bound-but-not-ready-waits-for-ready-timeout",
        ),
        pytest.param(
            obs(ever_ready=True, ready=7, degraded_since=5000.0, failed_nodes=("n1",)),
            5100.0,
            "Recovering",
            5120.0,
            ("n1 NotReady", "recoveryTimeout 2m"),
            id="degraded-gang-gets-recovery-timeout",
        ),
    ],
)
def test_a_gang_expires_at_its_phases_timeout_and_is_rechecked_then(
    observed: GangObservation, before: float, phase: str, deadline: float, says: tuple[str, ...]
) -> None:
    v = watch(POLICY, observed, before)
    assert (v.phase, v.expired, v.recheck_at) == (phase, False, deadline)
    v = watch(POLICY, observed, deadline)
    assert v.expired and all(words in v.reason for words in says), v.reason


def test_without_unscheduled_timeout_only_ready_timeout_counts() -> None:
    v = watch(GangPolicy(ready_timeout=300), obs(bound=0, ready=0), 1200.0)
    assert not v.expired and v.recheck_at == 1300.0


def test_running_gang_has_no_deadline() -> None:
    v = watch(POLICY, obs(ever_ready=True), 99_999.0)
    assert (v.phase, v.expired, v.recheck_at) == ("Running", False, None)


def test_recovery_timeout_zero_never_evicts() -> None:
    p = GangPolicy(recovery_timeout=0)
    v = watch(p, obs(ever_ready=True, ready=2, degraded_since=0.0), 1e9)
    assert not v.expired and v.recheck_at is None and "off" in v.reason


def test_more_failed_nodes_than_max_replaced_requeue_the_gang_at_once() -> None:
    policy = GangPolicy(recovery_timeout=600, node_failure="ReplaceFromSpare", max_replaced_nodes=2)
    two = obs(ready=6, ever_ready=True, degraded_since=1000.0, failed_nodes=("n1", "n2"))
    assert not watch(policy, two, 1001.0).expired
    three = obs(ready=5, ever_ready=True, degraded_since=1000.0, failed_nodes=("n1", "n2", "n3"))
    v = watch(policy, three, 1001.0)
    assert v.expired and v.phase == "Recovering"
    assert v.reason.startswith(
        "3 nodes NotReady under the gang at once (n1, n2, n3), more than maxReplacedNodes 2"
    )
    # no limit, or nodeFailure Requeue: the recovery timeout decides
    assert not watch(GangPolicy(recovery_timeout=600, node_failure="ReplaceFromSpare"), three, 1001.0).expired
    assert not watch(GangPolicy(recovery_timeout=600, max_replaced_nodes=0), three, 1001.0).expired


def test_max_replaced_nodes_zero_requeues_a_starting_gang_on_any_failed_node() -> None:
    policy = GangPolicy(node_failure="ReplaceFromSpare", max_replaced_nodes=0)
    v = watch(policy, obs(ready=2, failed_nodes=("n1",)), 1001.0)
    assert v.expired and v.phase == "Starting" and "maxReplacedNodes 0" in v.reason


def test_failed_nodes_of_a_running_gang_are_replaced_after_the_failure_window() -> None:
    policy = GangPolicy(recovery_timeout=600, node_failure="ReplaceFromSpare")
    down = obs(ready=7, ever_ready=True, degraded_since=1000.0, failed_nodes=("n1",))
    early = watch(policy, down, 1001.0)
    assert not early.replace and not early.expired and early.recheck_at == 1000.0 + FAILURE_WINDOW
    later = watch(policy, down, 1000.0 + FAILURE_WINDOW)
    assert later.replace and later.recheck_at == 1600.0
    # a gang that never ran is replaced at once; nodeFailure Requeue never replaces
    assert watch(policy, obs(ready=2, failed_nodes=("n1",)), 1001.0).replace
    assert not watch(GangPolicy(recovery_timeout=600), down, 1100.0).replace
