"""Gang phase, domain and explanation: the core decisions behind GangService and gangctl."""

from __future__ import annotations

import pytest

from gangplugin.core.gangs import (
    Evaluation,
    Phase,
    Pods,
    WorkloadState,
    explain,
    gang_domain,
    pod_gang_phase,
    workload_phase,
)
from gangplugin.core.states import CheckState
from gangplugin.core.topology import DEFAULT_LEVELS, HOSTNAME_LABEL, ULTRASERVER_LABEL, ZONE_LABEL

RESERVED = WorkloadState(quota_reserved=True, check_state=CheckState.PENDING)
ADMITTED = WorkloadState(quota_reserved=True, admitted=True, check_state=CheckState.READY)


@pytest.mark.parametrize(
    ("state", "pods", "phase"),
    [
        (WorkloadState(), Pods(8), Phase.QUEUED),
        (RESERVED, Pods(8), Phase.PENDING),
        (ADMITTED, Pods(8, 8, 7), Phase.ADMITTED),
        (ADMITTED, Pods(8, 8, 8), Phase.RUNNING),
        (WorkloadState(evicted=True, check_state=CheckState.RETRY), Pods(8), Phase.EVICTED),
        # The check asked for a retry; Kueue has not evicted yet: already on its way out.
        (
            WorkloadState(quota_reserved=True, admitted=True, check_state=CheckState.RETRY),
            Pods(8, 8, 8),
            Phase.EVICTED,
        ),
        (WorkloadState(active=False, evicted=True), Pods(8), Phase.DEACTIVATED),
        (WorkloadState(quota_reserved=True, check_state=CheckState.REJECTED), Pods(8), Phase.REJECTED),
        (WorkloadState(finished=True, admitted=True), Pods(8, 8, 8), Phase.FINISHED),
        (ADMITTED, Pods(0), Phase.ADMITTED),  # no pods at all is never "all Ready"
    ],
)
def test_workload_phase(state: WorkloadState, pods: Pods, phase: Phase) -> None:
    assert workload_phase(state, pods) is phase


def test_pod_gang_phase_waits_whole() -> None:
    assert pod_gang_phase(Pods(4, 3, 3)) is Phase.PENDING
    assert pod_gang_phase(Pods(4, 4, 2)) is Phase.ADMITTED
    assert pod_gang_phase(Pods(4, 4, 4)) is Phase.RUNNING


def node(zone: str, us: str, host: str) -> dict[str, str]:
    return {ZONE_LABEL: zone, ULTRASERVER_LABEL: us, HOSTNAME_LABEL: host}


def test_domain_pinned_by_the_check_wins() -> None:
    pinned = {ULTRASERVER_LABEL: "us-2", "node.kubernetes.io/instance-type": "x"}
    assert gang_domain(pinned, [node("z", "us-1", "h1")], DEFAULT_LEVELS) == (ULTRASERVER_LABEL, "us-2")


def test_domain_is_the_narrowest_level_all_bound_nodes_share() -> None:
    same_us = [node("z", "us-1", "h1"), node("z", "us-1", "h2")]
    assert gang_domain({}, same_us, DEFAULT_LEVELS) == (ULTRASERVER_LABEL, "us-1")
    spread = [node("z", "us-1", "h1"), node("z", "us-2", "h2")]
    assert gang_domain({}, spread, DEFAULT_LEVELS) == (ZONE_LABEL, "z")
    assert gang_domain({}, [node("z", "us-1", "h1")], DEFAULT_LEVELS) == (HOSTNAME_LABEL, "h1")
    assert gang_domain({}, [{}, {}], DEFAULT_LEVELS) is None
    assert gang_domain({}, [], DEFAULT_LEVELS) is None


def test_explain_a_waiting_gang_says_what_the_engine_says_now() -> None:
    text = explain(
        Phase.PENDING,
        Pods(20),
        check_message="gang does not fit now: best is us-2 with room for 18",
        retry_count=2,
        evaluation=Evaluation(False, "needs 20 pods in one ultraserver-id; best is us-2 with room for 18"),
    )
    lines = text.splitlines()
    assert lines[0].startswith("Quota is reserved")
    assert "Gang check: gang does not fit now" in text
    assert "Retried 2 times" in text
    assert (
        lines[-1]
        == "Now: it does not fit: needs 20 pods in one ultraserver-id; best is us-2 with room for 18"
    )


def test_explain_fit_sequential_and_running() -> None:
    fits = explain(
        Phase.PENDING, Pods(4), evaluation=Evaluation(True, "best fit", ULTRASERVER_LABEL, ("us-3",))
    )
    assert f"it would fit in {ULTRASERVER_LABEL}=us-3" in fits
    blocked = explain(Phase.PENDING, Pods(4), evaluation=Evaluation(False, "", blocked_by="team-a/first"))
    assert "sequential admission waits for gang team-a/first" in blocked
    running = explain(Phase.RUNNING, Pods(4, 4, 4), domain=(ULTRASERVER_LABEL, "us-1"))
    assert running == f"Running in {ULTRASERVER_LABEL}=us-1: all 4 pods Ready."
    queued = explain(Phase.QUEUED, Pods(4), queue="training")
    assert "quota in ClusterQueue training" in queued
