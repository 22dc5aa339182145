"""Reservation with backfill (`core.reservation`, the gate's `reservation` step): the domain
where a long-waiting big gang starts soonest is reserved for it; only gangs that end before its
expected start (or of higher priority) run there meanwhile; checkpointable gangs of lower
priority may be cleared from it; the simulator replays it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gangplugin.core.eligibility import PodConstraints
from gangplugin.core.errors import InputError
from gangplugin.core.gate import GangFacts, GateVerdict, PreemptionState, gate, waiting_reason
from gangplugin.core.placement import Gang
from gangplugin.core.policy import GangPolicy, ReservationPolicy
from gangplugin.core.preemption import ClusterQueueState, Contender, QueuePreemption, RunningGang
from gangplugin.core.reservation import (
    GangEnd,
    Holder,
    Reservation,
    Reservations,
    expected_start,
    reservation_level,
)
from gangplugin.core.simulate import Job, Settings, replay
from gangplugin.core.topology import ULTRASERVER_LABEL, BoundPod, Snapshot, build_snapshot
from gangplugin.sim.trace import jobs_from_rows
from tests.support.core import GPU, LEVELS, gang, ultraservers

US = ULTRASERVER_LABEL
NOW = 1_000.0
RESERVING = GangPolicy(reservation=ReservationPolicy(after_waiting=600.0))


def running(key: str, nodes: list[str], priority: int = 0, started: float = 0.0) -> RunningGang:
    return RunningGang(
        key=key,
        priority=priority,
        cluster_queue="q",
        created_at=0.0,
        started_at=started,
        gpus=4 * len(nodes),
        pods=tuple(("ns", f"{key}-{i}") for i in range(len(nodes))),
    )


def cluster(*gangs: tuple[str, list[str]]) -> Snapshot:
    """Two UltraServers of 4 nodes with the given gangs running (one pod of 4 GPUs per node)."""
    pods = [
        BoundPod("ns", f"{key}-{i}", n, {GPU: 4, "cpu": 1000})
        for key, nodes in gangs
        for i, n in enumerate(nodes)
    ]
    return build_snapshot(ultraservers(2, 4), pods, LEVELS)


def us(u: int, *nodes: int) -> list[str]:
    return [f"us{u}-n{i:02d}" for i in nodes]


def facts(key: str, g: Gang, snap: Snapshot, *, waited: float = 900.0, **kw: object) -> GangFacts:
    base = GangFacts(
        contender=Contender(key, 0, "q", 0.0),
        policy=RESERVING,
        gang=Gang(g.podsets, key),
        snapshot=snap,
        now=NOW,
        quota_reserved_at=NOW - waited,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def book(
    gangs: list[RunningGang],
    ends: dict[str, GangEnd],
    order: list[str],
    holders: dict[str, Holder] | None = None,
) -> Reservations:
    return Reservations(holders or {}, lambda: gangs, lambda: ends, NOW, {k: i for i, k in enumerate(order)})


# us-1: a (2 nodes, ends at 1,500) and b (1 node, ends at 3,000); us-2: c (all 4, no end)
A, B, C = running("a", us(1, 0, 1)), running("b", us(1, 2)), running("c", us(2, 0, 1, 2, 3))
ENDS = {"a": GangEnd(1_500.0), "b": GangEnd(3_000.0), "c": GangEnd(None)}


def busy() -> Snapshot:
    return cluster(("a", us(1, 0, 1)), ("b", us(1, 2)), ("c", us(2, 0, 1, 2, 3)))


def test_the_expected_start_is_when_enough_of_the_first_ending_gangs_have_left():
    snap = busy()
    d1, d2 = (next(d for d in snap.by_level[1] if snap.domains[d].value == v) for v in ("us-1", "us-2"))
    policy = RESERVING.placement
    # 3 nodes of us-1: a's two leave at 1,500 and the free one makes three
    start = expected_start(snap, gang(3, required=US), policy, d1, [A, B, C], ENDS, NOW)
    assert (start.at, start.waiting_for, start.possible) == (1_500.0, ("a",), True)
    # all 4: b too, at 3,000
    start = expected_start(snap, gang(4, required=US), policy, d1, [A, B, C], ENDS, NOW)
    assert (start.at, set(start.waiting_for)) == (3_000.0, {"a", "b"})
    # in us-2 it waits for c, which declares no end: no expected start
    start = expected_start(snap, gang(4, required=US), policy, d2, [A, B, C], ENDS, NOW)
    assert (start.at, start.undeclared) == (None, ("c",))
    # a gang being evicted counts as gone now
    evicting = replace(C, evicting=True)
    start = expected_start(snap, gang(4, required=US), policy, d2, [A, B, evicting], ENDS, NOW)
    assert start.at == NOW


def test_a_promise_of_no_running_gang_leaves_the_domain_with_it():
    """A gang admitted and gone before its pods bound (a Job that ended first) keeps its promise
    charged until the next snapshot: it does not make the domain one the gang can never start in."""
    pods = [BoundPod("ns", f"a-{i}", n, {GPU: 4, "cpu": 1000}) for i, n in enumerate(us(1, 0, 1))]
    pods += [BoundPod("ns", f"~promised/gone/main/{i}", n, {GPU: 4}) for i, n in enumerate(us(1, 2, 3))]
    snap = build_snapshot(ultraservers(2, 4), pods, LEVELS)
    d1 = next(d for d in snap.by_level[1] if snap.domains[d].value == "us-1")
    start = expected_start(snap, gang(4, required=US), RESERVING.placement, d1, [A], ENDS, NOW)
    assert (start.at, start.possible, start.waiting_for) == (1_500.0, True, ("a",))


def test_a_big_gang_that_waited_long_enough_reserves_where_it_starts_soonest():
    snap = busy()
    g = gang(4, required=US)
    # not yet due: it waits as before, and is decided again when it is
    early = gate(facts("ns/big", g, snap, waited=100.0), reservations=book([A, B, C], ENDS, ["ns/big"]))
    assert early.step == "placement" and early.reservation is None and early.wake_at == NOW + 500.0
    reservations = book([A, B, C], ENDS, ["ns/big"])
    v = gate(facts("ns/big", g, snap), reservations=reservations)
    assert v.step == "reservation" and waiting_reason(v) == "Reserved"
    assert v.reservation == Reservation(US, "us-1", NOW - 900.0, NOW)
    assert "topology.k8s.aws/ultraserver-id=us-1 reserved for this gang since" in v.message
    assert "expected start 1970-01-01T00:50:00Z when a, b end" in v.message
    assert v.message.startswith("gang does not fit now:")  # why it waits comes first
    assert reservations.recorded("ns/big") == v.reservation  # it binds the gangs after it


def test_a_reserving_gang_s_message_stays_the_same_as_the_room_changes_and_its_detail_says_it():
    """The check's message names the reservation, not the room there is now (that would rewrite
    the Workload at every admission elsewhere); `detail`, what `gangctl explain` shows, has both."""
    g = gang(4, required=US)
    roomier = cluster(("a", us(1, 0)), ("b", us(1, 2)), ("c", us(2, 0, 1, 2, 3)))
    seen = []
    for snap, a in ((busy(), A), (roomier, running("a", us(1, 0)))):
        v = gate(facts("ns/big", g, snap), reservations=book([a, B, C], ENDS, ["ns/big"]))
        assert v.step == "reservation" and v.reservation == Reservation(US, "us-1", NOW - 900.0, NOW)
        seen.append(v)
    first, second = seen
    assert first.message == second.message and "room for" not in first.message
    assert first.detail != second.detail and "room for" in first.detail and first.full == first.detail
    for v in seen:
        assert "us-1 reserved for this gang since" in v.message and "when a, b end" in v.detail


def test_only_gangs_that_end_before_the_reserved_start_run_in_the_domain_meanwhile():
    snap = busy()
    reservations = book([A, B, C], ENDS, ["ns/big", "ns/short", "ns/long", "ns/unknown", "ns/urgent"])
    assert gate(facts("ns/big", gang(4, required=US), snap), reservations=reservations).reservation

    def decide(key: str, runtime: float | None, priority: int = 0) -> GateVerdict:
        f = facts(key, gang(1, required=US), snap, expected_runtime=runtime)
        return gate(replace(f, contender=Contender(key, priority, "q", 0.0)), reservations=reservations)

    # us-1 has the only free node: 1 pod that ends before 3,000 takes it (backfill)
    short = decide("ns/short", 1_000.0)
    assert short.decision is not None and short.decision.domain == {US: "us-1"}
    snap = busy()  # (not charged: the same free node for the next question)
    long = decide("ns/long", 5_000.0)
    assert long.decision is not None and not long.decision.ready
    assert (
        "us-1, reserved for ns/big (from 1970-01-01T00:50:00Z; this gang would end after it)" in long.message
    )
    unknown = decide("ns/unknown", None)  # declares no run time: never backfills
    assert unknown.decision is not None and not unknown.decision.ready
    urgent = decide("ns/urgent", None, priority=5)  # a reservation never blocks a higher priority
    assert urgent.decision is not None and urgent.decision.ready


def test_a_reservation_in_a_domain_the_gang_could_never_use_is_not_named_to_it():
    snap = busy()
    reservations = book([A, B, C], ENDS, ["ns/big", "ns/elsewhere", "ns/long"])
    assert gate(facts("ns/big", gang(4, required=US), snap), reservations=reservations).reservation
    only_us_2 = PodConstraints(node_selector=((US, "us-2"),))  # its flavor's domains: us-2
    f = facts("ns/elsewhere", gang(1, required=US, constraints=only_us_2), snap, expected_runtime=5_000.0)
    elsewhere = gate(f, reservations=reservations)
    assert elsewhere.decision is not None and not elsewhere.decision.ready
    assert "reserved for" not in elsewhere.full and "best is us-2" in elsewhere.full, elsewhere.full
    f = facts("ns/long", gang(2, required=US), snap, expected_runtime=5_000.0)
    assert "us-1, reserved for ns/big" in gate(f, reservations=reservations).message


def test_with_no_expected_start_only_higher_priorities_run_there():
    snap = cluster(("c", us(2, 0, 1, 2)), ("d", us(1, 0, 1, 2)))
    ends = {"c": GangEnd(None), "d": GangEnd(None)}
    reservations = book([C, running("d", us(1, 0, 1, 2))], ends, ["ns/big", "ns/small"])
    v = gate(facts("ns/big", gang(4, required=US), snap), reservations=reservations)
    assert v.reservation is not None and "expected start unknown: d declare no end" in v.message
    f = facts("ns/small", gang(1, required=US), snap, expected_runtime=1.0)
    small = gate(f, reservations=reservations)
    # only the other UltraServer's free node is left to it
    assert small.decision is not None and small.decision.domain != {US: v.reservation.domain}


def holding_us_1(key: str) -> Holder:
    """A 4-pod gang `key` holding the reservation of UltraServer us-1."""
    return Holder(
        Contender(key, 0, "q", 0.0),
        gang(4, required=US),
        RESERVING.placement,
        Reservation(US, "us-1", 0.0, 0.0),
    )


def test_a_gang_before_the_holder_is_not_bound_and_an_admitted_holder_binds_no_one():
    snap = busy()
    holder = holding_us_1("ns/big")
    reservations = book([A, B, C], ENDS, ["ns/old", "ns/big", "ns/young"], {"ns/big": holder})
    old = gate(facts("ns/old", gang(1, required=US), snap), reservations=reservations)
    assert old.decision is not None and old.decision.ready  # older than the holder: not bound
    reservations.release("ns/big")  # admitted
    young = gate(facts("ns/young", gang(1, required=US), snap), reservations=reservations)
    assert young.decision is not None and young.decision.ready


def test_an_older_gang_that_cannot_reserve_yet_claims_so_no_younger_one_reserves_first():
    snap = busy()
    holder = holding_us_1("ns/first")
    reservations = book([A, B, C], ENDS, ["ns/first", "ns/whole", "ns/young"], {"ns/first": holder})
    # 8 pods: the whole cluster (the zone), which overlaps ns/first's us-1
    whole = gate(facts("ns/whole", gang(7), snap), reservations=reservations)
    assert whole.step == "reservation" and whole.reservation is None
    assert "each overlaps the reservation of a gang before it" in whole.message
    young = gate(facts("ns/young", gang(4, required=US), snap), reservations=reservations)
    assert young.reservation is None  # us-2 is in ns/whole's claim


def test_the_reservation_level_is_the_required_one_else_the_narrowest_that_holds_it():
    snap = build_snapshot(ultraservers(2, 4), levels=LEVELS)
    policy = RESERVING.placement
    assert snap.levels[reservation_level(snap, gang(4, required=US), policy, None)] == US
    assert snap.levels[reservation_level(snap, gang(6, preferred=US), policy, None)] == LEVELS[0]
    assert reservation_level(snap, gang(6, preferred=US), policy, US) is None  # wider than allowed
    # a gang that needs half a domain or less is not "big": it never waits for a whole one
    assert reservation_level(snap, gang(2, required=US), policy, None) is None
    bad = gate(
        facts(
            "ns/big",
            gang(4, required=US),
            busy(),
            policy=replace(RESERVING, reservation=ReservationPolicy(600.0, "rack")),
        ),
        reservations=book([A, B, C], ENDS, ["ns/big"]),
    )
    assert (
        bad.reservation is None
        and "no domain reserved: spec.reservation.level: 'rack' is not one of the levels" in bad.message
    )


def test_a_gang_that_can_never_start_whole_reserves_nothing():
    v = gate(facts("ns/huge", gang(5, required=US), busy()), reservations=book([A, B, C], ENDS, ["ns/huge"]))
    assert v.step == "whole" and v.reservation is None and v.message.startswith("can never start whole")


def test_checkpointable_gangs_of_lower_priority_are_cleared_fewest_gpu_hours_first():
    snap = busy()
    ends = {
        "a": GangEnd(1_500.0, checkpointable=True),
        "b": GangEnd(3_000.0, checkpointable=True),
        "c": GangEnd(None),
    }
    a, b = replace(A, started_at=900.0), replace(B, started_at=0.0)  # a lost 8 GPU-h... a: 0.2, b: 1.1
    # the policy preempts nothing itself: only checkpointable gangs, to clear its reservation
    clearing = replace(
        RESERVING, preemption="Never", reservation=ReservationPolicy(600.0, max_checkpointable_evictions=2)
    )
    lower = {"q": ClusterQueueState("q", preemption=QueuePreemption(within_cluster_queue="LowerPriority"))}
    state = PreemptionState({}, lambda: [a, b, C], lambda: lower)
    f = replace(
        facts("ns/big", gang(4, required=US), snap, policy=clearing),
        contender=Contender("ns/big", 5, "q", 0.0),
    )
    v = gate(f, state, reservations=book([a, b, C], ends, ["ns/big"]))
    assert v.step == "reservation" and v.preemption is not None and v.hold is not None
    assert [x.key for x in v.preemption.victims] == ["a", "b"] and v.preemption.domain == "us-1"
    assert v.message.startswith("clearing topology.k8s.aws/ultraserver-id=us-1, reserved for this gang")
    # at most one eviction: not enough to start now, so none
    one = replace(clearing, reservation=ReservationPolicy(600.0, max_checkpointable_evictions=1))
    v = gate(replace(f, policy=one), state, reservations=book([a, b, C], ends, ["ns/big"]))
    assert v.preemption is None and "expected start" in v.message
    # Kueue's rule must allow it: equal priorities may not be preempted
    v = gate(
        replace(f, contender=Contender("ns/big", 0, "q", 0.0)),
        state,
        reservations=book([a, b, C], ends, ["ns/big"]),
    )
    assert v.preemption is None


def small(k: int, arrival: float) -> Job:
    return Job(
        key=f"s{k}",
        arrival=arrival,
        pods=2,
        gpus_per_pod=4,
        runtime=100.0,
        max_runtime=100.0,
        required_topology=US,
    )


def test_the_simulator_replays_it_a_stream_of_small_gangs_starves_the_big_one_without():
    # two UltraServers of 4 nodes; 2-pod gangs of 100s arrive every 20s (a little more than
    # fits: the queue never empties); a gang of a whole UltraServer arrives at 200
    nodes = ultraservers(2, 4)
    jobs = [
        *(small(i, 20.0 * i) for i in range(40)),
        Job("big", 200.0, 4, 4, 50.0, 50.0, required_topology=US),
    ]
    waits = {}
    for after in (None, 60.0):
        gp = GangPolicy(reservation=ReservationPolicy(after_waiting=after))
        r = replay(nodes, jobs, "gangplugin", Settings(policy=gp))
        waits[after] = {o.key: o.wait for o in r.outcomes}
        assert all(o.end is not None for o in r.outcomes)
    assert waits[None]["big"] == 820.0  # until the stream has ended
    assert waits[60.0]["big"] == 120.0  # 60s, then its UltraServer drains (the gangs there end)
    # the small ones pay for it, a little
    assert max(w for k, w in waits[60.0].items() if k != "big") <= 240.0
    off = replay(
        nodes,
        jobs,
        "gangplugin-no-reservation",
        Settings(policy=GangPolicy(reservation=ReservationPolicy(60.0))),
    )
    assert {o.key: o.wait for o in off.outcomes} == waits[None]


def test_a_trace_says_which_jobs_are_checkpointable():
    columns = ("arrival_time", "gpu_workers", "gpu_per_worker", "duration", "checkpointable")
    rows = [
        {"arrival_time": "0", "gpu_workers": "1", "gpu_per_worker": "4", "duration": "9", "checkpointable": v}
        for v in ("true", "", "0", "1")
    ]
    assert [j.checkpointable for j in jobs_from_rows(rows, columns)] == [True, False, False, True]
    bad = [{**rows[0], "checkpointable": "yes"}]
    with pytest.raises(InputError, match="'yes' is not true or false") as err:
        jobs_from_rows(bad, columns)
    assert err.value.field == "line 2: checkpointable"
