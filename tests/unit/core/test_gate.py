"""The admission gate (`core.gate`) over plain facts: each step in its order, the rejections,
holds and preemption, and the pass's shared preemption state."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from gangplugin.core.drain import DrainDecision
from gangplugin.core.errors import InputError
from gangplugin.core.gate import (
    ORDER,
    Backoff,
    GangFacts,
    PreemptionState,
    WaitingReason,
    gate,
    resume,
    waiting_reason,
)
from gangplugin.core.keys import UnknownKey
from gangplugin.core.names import BLOCK_END_ANNOTATION
from gangplugin.core.placement import Gang
from gangplugin.core.policy import GangPolicy, ReservationPolicy
from gangplugin.core.preemption import (
    ClusterQueueState,
    Contender,
    Hold,
    QueuePreemption,
    RunningGang,
)
from gangplugin.core.reservation import Reservations
from gangplugin.core.topology import ULTRASERVER_LABEL, BoundPod, Snapshot, build_snapshot
from tests.support.core import GPU, LEVELS, gang, node, ultraservers

US = ULTRASERVER_LABEL
LOWER = {"q": ClusterQueueState("q", preemption=QueuePreemption(within_cluster_queue="LowerPriority"))}


def pods(key: str, nodes: list[str]) -> list[BoundPod]:
    return [BoundPod("ns", f"{key}-{i}", n, {GPU: 4, "cpu": 1000}) for i, n in enumerate(nodes)]


def running(key: str, nodes: list[str], priority: int = 0, started: float = 0.0) -> RunningGang:
    return RunningGang(
        key,
        priority,
        "q",
        0.0,
        started,
        4 * len(nodes),
        tuple(("ns", f"{key}-{i}") for i in range(len(nodes))),
    )


def busy() -> tuple[Snapshot, list[RunningGang]]:
    """Two UltraServers of 4 nodes: us-1 runs "low" on 2 nodes, us-2 "mid" on 3 (priority 10)."""
    low = [f"us1-n0{i}" for i in range(2)]
    mid = [f"us2-n0{i}" for i in range(3)]
    snap = build_snapshot(ultraservers(2, 4), pods("ns/low", low) + pods("ns/mid", mid), LEVELS)
    return snap, [running("ns/low", low, 10, 1.0), running("ns/mid", mid, 10, 2.0)]


def facts(g: Gang | InputError, snap: Snapshot | None = None, **kw: object) -> GangFacts:
    snap = snap if snap is not None else build_snapshot(ultraservers(2, 4), levels=LEVELS)
    base = GangFacts(Contender("ns/g", 1000, "q", 0.0), GangPolicy(), g, snap, now=100.0)
    return replace(base, **kw)  # type: ignore[arg-type]


def named(g: Gang, name: str = "g") -> Gang:
    return Gang(g.podsets, name)


def state(snap: Snapshot, gangs: list[RunningGang], holds: dict[str, Hold] | None = None) -> PreemptionState:
    return PreemptionState(holds or {}, lambda: gangs, lambda: LOWER)


def test_the_order_is_one_sequence_of_named_steps() -> None:
    assert [s.name for s in ORDER] == [
        "policy",
        "pods",
        "keys",
        "backoff",
        "sequential",
        "drain",
        "placement",
        "whole",
        "preemption",
        "reservation",
    ]


def test_a_gang_that_fits_is_admitted_with_its_pods_stamped() -> None:
    v = gate(facts(named(gang(3, required=US))))
    assert v.step == "placement" and v.decision is not None and v.decision.ready
    assert v.decision.domain == {US: "us-1"} and v.message.startswith("gang admitted")


def test_an_unusable_policy_holds_the_gang_before_anything_else() -> None:
    err = InputError("spec.readyTimeout", "must be longer than 0s")
    v = gate(facts(InputError("podSets", "broken"), policy=err, snapshot=None, backoff=Backoff(1e9, "later")))
    assert (v.step, v.rejected, v.decision) == ("policy", False, None)
    assert v.message == f"waiting: {err}"


def test_the_backoff_holds_the_gang_until_its_end_with_one_message() -> None:
    b = Backoff(150.0, "2026-11-30T12:01:00Z")
    v = gate(facts(named(gang(1)), backoff=b))
    assert (v.step, v.wake_at, v.decision) == ("backoff", 150.0, None)
    assert v.message == "requeued whole after a timeout: backoff until 2026-11-30T12:01:00Z"
    assert gate(facts(named(gang(1)), backoff=b, now=140.0)) == v  # no countdown: written once
    assert gate(facts(named(gang(1)), backoff=b, now=150.0)).step == "placement"


def test_sequential_waits_for_the_admitted_gang_not_ready_yet() -> None:
    seq = GangPolicy(admission="Sequential")
    v = gate(facts(named(gang(1)), policy=seq, unready=("ns/b", "ns/a")))
    assert (v.step, v.blocked_by) == ("sequential", "ns/a")
    assert v.message == "Sequential admission: waiting for gang ns/a to be Ready"
    assert gate(facts(named(gang(1)), policy=seq, unready=("ns/g",))).step == "placement"
    assert gate(facts(named(gang(1)), unready=("ns/a",))).step == "placement"  # Parallel


def test_the_plans_hold_a_gang_back_or_stamp_their_block_end() -> None:
    no = DrainDecision(False, False, None, None, "it would outlive the block")
    v = gate(facts(named(gang(1)), drain=no, next_quota_change=7200.0))
    assert (v.step, v.wake_at) == ("drain", 7200.0)
    assert v.message == "waiting for the next block: it would outlive the block"
    end = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)
    ok = gate(facts(named(gang(1)), drain=DrainDecision(True, False, None, end)))
    assert ok.decision is not None and ok.decision.ready
    assert ok.decision.pod_set_updates[0].annotations[BLOCK_END_ANNOTATION] == "2026-12-01T11:30:00Z"


def test_a_workload_that_cannot_be_read_is_rejected_by_the_step_that_needs_it() -> None:
    bad = InputError("spec.podSets[0]...max-runtime", "'soon' is not a duration")
    v = gate(facts(named(gang(1)), drain=bad))
    assert (v.step, v.rejected) == ("drain", True) and v.message == f"the Workload cannot be used: {bad}"
    v = gate(facts(InputError("spec.podSets", "missing")))
    assert (v.step, v.rejected) == ("placement", True)
    # placement itself refuses what it cannot read: a count below 1
    v = gate(facts(named(gang(0))))
    assert (v.step, v.rejected) == ("placement", True) and "podSets[0].count" in v.message


def test_a_gang_that_does_not_fit_preempts_the_cheapest_gangs_and_holds_their_domain() -> None:
    snap, gangs = busy()
    v = gate(facts(named(gang(4, required=US)), snap, quota_reserved_at=50.0), state(snap, gangs))
    assert v.step == "preemption" and v.preemption is not None and v.hold is not None
    assert [x.key for x in v.preemption.victims] == ["ns/low"]  # 8 GPUs, not mid's 12
    assert (v.hold.level, v.hold.domain, v.hold.quota_reserved_at, v.hold.at) == (US, "us-1", 50.0, 100.0)
    assert v.message.startswith("preempting ns/low (8 GPUs) to free topology.k8s.aws/ultraserver-id=us-1")


def test_no_preemption_under_policy_never_nor_without_a_preemption_state() -> None:
    snap, gangs = busy()
    never = GangPolicy(preemption="Never")
    for v in (
        gate(facts(named(gang(4, required=US)), snap, policy=never), state(snap, gangs)),
        gate(facts(named(gang(4, required=US)), snap)),
    ):
        assert v.step == "placement" and v.preemption is None
        assert v.message.startswith("gang does not fit now")


def test_equal_priorities_are_protected_and_the_reason_says_so() -> None:
    snap, gangs = busy()
    v = gate(
        facts(named(gang(4, required=US)), snap, contender=Contender("ns/g", 10, "q", 0.0)),
        state(snap, gangs),
    )
    assert v.step == "preemption" and v.preemption is not None and not v.preemption.preempts
    assert "; preemption: no preemptible set" in v.message and "priority 10 >= 10" in v.message


def test_a_domain_held_for_another_gang_is_kept_off_and_the_holder_resumes() -> None:
    snap = build_snapshot(ultraservers(2, 4), levels=LEVELS)
    other = Hold(US, "us-1", (), ("ns/low",), 0.0, 90.0)
    v = gate(facts(named(gang(2, required=US)), snap), state(snap, [], {"ns/other": other}))
    assert v.decision is not None and v.decision.domain == {US: "us-2"}
    full = gate(
        facts(named(gang(3, required=US)), snap),
        state(snap, [], {"ns/other": other, "ns/x": replace(other, domain="us-2")}),
    )
    assert full.decision is not None and not full.decision.ready
    # its own hold is no obstacle to the holder; one not yet freed is resumed, not searched again
    mine = gate(facts(named(gang(4, required=US)), snap), state(snap, [], {"ns/g": other}))
    assert mine.decision is not None and mine.decision.domain == {US: "us-1"}
    busy_snap, gangs = busy()
    again = gate(facts(named(gang(4, required=US)), busy_snap), state(busy_snap, gangs, {"ns/g": other}))
    assert again.preemption is not None and again.hold is None
    assert again.message == f"preempting ns/low: evicting the rest {US}=us-1 (held for this gang)"


def test_resume_waits_for_victims_being_evicted_and_forgets_gangs_started_since() -> None:
    hold = Hold(US, "us-1", (), ("ns/a", "ns/b", "ns/c"), 0.0, 50.0)
    gangs = [running("ns/a", ["n"], started=10.0), running("ns/b", ["n"], started=60.0)]
    gangs.append(replace(running("ns/c", ["n"], started=20.0), evicting=True))
    plan = resume(hold, gangs)
    assert [v.key for v in plan.victims] == ["ns/a"] and plan.waiting_for == ("ns/c",)


def test_one_index_per_snapshot_for_the_whole_pass() -> None:
    nodes = [node("n0")]
    snap = build_snapshot(nodes, [BoundPod("ns", "a-0", "n0", {GPU: 4})])
    other = build_snapshot(nodes)
    reads: list[int] = []

    def read() -> list[RunningGang]:
        reads.append(1)
        return [RunningGang("ns/a", 0, "q", 0.0, 0.0, 4, (("ns", "a-0"),))]

    st = PreemptionState({}, read, dict)
    index = st.index(snap)
    hold = Hold(None, None, ("n0",), ("ns/a",), 0.0, 0.0)
    st.started("ns/p", replace(resume(hold, []), victims=()), hold)
    assert st.holds == {"ns/p": hold}
    assert st.index(snap) is index and index.covers(snap, st.running)
    assert st.index(other) is not index and st.index(other).snapshot is other
    assert len(reads) == 1  # the admitted gangs are read once per pass


def test_victims_chosen_earlier_in_the_pass_are_being_evicted_for_the_gangs_after() -> None:
    snap, gangs = busy()
    st = state(snap, gangs)
    first = gate(facts(named(gang(4, required=US)), snap), st)
    assert first.preemption is not None
    st.started("ns/g", first.preemption, first.hold)
    assert [g.key for g in st.running if g.evicting] == ["ns/low"]
    # the next gang is kept off us-1 and finds mid's us-2 the only way left
    second = gate(
        facts(named(gang(4, required=US), "h"), snap, contender=Contender("ns/h", 1000, "q", 1.0)), st
    )
    assert second.preemption is not None and [v.key for v in second.preemption.victims] == ["ns/mid"]


def test_a_gate_order_without_placement_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import gangplugin.core.gate as gate_module

    monkeypatch.setattr(gate_module, "ORDER", tuple(s for s in ORDER if s.name != "placement"))
    with pytest.raises(ValueError, match="no placement step"):
        gate(facts(named(gang(1))))


def test_why_a_gang_waits_is_the_step_that_held_it_back() -> None:
    """The label of gangplugin_waiting_gangs: the step that held the gang back."""
    broken = InputError("spec.readyTimeout", "must be longer than 0s")
    no = DrainDecision(False, False, None, None, "it would outlive the block")
    seq = GangPolicy(admission="Sequential")
    held = {
        "PolicyUnusable": facts(named(gang(1)), policy=broken),
        "Backoff": facts(named(gang(1)), backoff=Backoff(150.0, "2026-11-30T12:01:00Z")),
        "Sequential": facts(named(gang(1)), policy=seq, unready=("ns/a",)),
        "PlanDrain": facts(named(gang(1)), drain=no),
        "NoFit": facts(named(gang(6)), busy()[0]),  # 3 of the 8 nodes free
        "NeverWhole": facts(named(gang(9))),  # more than the 8 nodes of the cluster
        "AwaitingPods": facts(named(gang(1)), awaiting_pods=("worker",)),
    }
    misspelt = named(
        Gang((replace(gang(1).podsets[0], unknown_keys=(UnknownKey("gangplugin.io/x", None),)),))
    )
    held["UnknownKey"] = facts(misspelt)
    for reason, f in held.items():
        assert waiting_reason(gate(f)) == reason
    snap, gangs = busy()
    reserving = GangPolicy(reservation=ReservationPolicy(after_waiting=0.0))
    book = Reservations({}, lambda: gangs, dict, 100.0, {})
    assert (
        waiting_reason(gate(facts(named(gang(6)), snap, policy=reserving), reservations=book)) == "Reserved"
    )
    held["Reserved"] = facts(named(gang(1)))
    assert set(held) | {"Preempting"} == set(WaitingReason)


def test_a_misspelt_key_holds_the_gang_naming_it_and_the_closest_known_one() -> None:
    typo = UnknownKey("gangplugin.io/required-toplogy", "gangplugin.io/required-topology")
    ps = replace(gang(1).podsets[0], unknown_keys=(typo,))
    v = gate(facts(named(Gang((ps,)))))
    assert (v.step, v.rejected, v.decision) == ("keys", False, None)
    assert "podset main: unknown key gangplugin.io/required-toplogy: did you mean " in v.message
    assert "gangplugin.io/required-topology?" in v.message
    assert gate(facts(named(gang(1)))).step == "placement"  # without it: placed


def test_a_waiting_gang_s_message_stays_the_same_as_the_room_changes_and_its_detail_says_the_room() -> None:
    """The check's message is written to the Workload: with the room in it, every admission
    elsewhere would rewrite it (a Kueue reconcile and a pass each); the counts go in `detail`."""
    contender = Contender("ns/g", 10, "q", 0.0)
    snap, gangs = busy()
    fuller = build_snapshot(
        ultraservers(2, 4),
        pods("ns/low", ["us1-n00", "us1-n01", "us1-n02"]) + pods("ns/mid", ["us2-n00"]),
        LEVELS,
    )
    seen = []
    for s in (snap, fuller):
        more = [*gangs, running("ns/x", ["us1-n02"], 10, 3.0)] if s is fuller else gangs
        for st in (state(s, more), None):
            v = gate(facts(named(gang(4, required=US)), s, contender=contender), st)
            assert not v.decision or not v.decision.ready
            seen.append(v)
    by_state = [seen[0::2], seen[1::2]]  # with preemption modelled, and without
    for a, b in by_state:
        assert a.message == b.message, "the same message whatever the room"
        assert a.detail != b.detail and "room for" in a.detail and a.full == a.detail
        assert "room for" not in a.message and not re.search(r"\d+ protected", a.message)
    assert "priority 10 >= 10" in seen[0].message  # the rule that protects them stays in it
