"""The MultiKueue dispatcher's choice (core.dispatch): which worker a gang goes to, why each worker
was or was not chosen, and what becomes of a nomination."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gangplugin.core.dispatch import (
    Copy,
    CopyState,
    DispatchRecord,
    FlavorQuota,
    NominationAction,
    Refusal,
    Worker,
    WorkerVerdict,
    commit,
    copy_state,
    dispatch,
    hold,
    requests_of,
    step,
    taken,
)
from gangplugin.core.placement import Gang, PlacementPolicy
from gangplugin.core.plans import CapacityBlock, TrainingPlan
from gangplugin.core.policy import GangPolicy
from gangplugin.core.states import CheckState
from gangplugin.core.topology import INSTANCE_TYPE_LABEL, ULTRASERVER_LABEL, BoundPod, build_snapshot
from tests.support.core import GPU, LEVELS, gang, ultraservers

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
GB200 = FlavorQuota("gb200", {}, {"cpu": 10**9, GPU: 10**6})


def worker(name: str, sizes: list[int], used: dict[str, int] | None = None, **kw) -> Worker:
    """A worker with one UltraServer per size (4-GPU nodes), `used`: node -> GPUs taken."""
    nodes = [n for u, size in enumerate(sizes) for n in ultraservers(1, size, prefix=f"{name}-{u}-")]
    pods = [BoundPod("other", f"p-{n}", n, {GPU: g}) for n, g in (used or {}).items()]
    kw.setdefault("flavors", (GB200,))
    return Worker(name, build_snapshot(nodes, pods, LEVELS), **kw)


def required(count: int, name: str = "g"):
    g = gang(count, required=ULTRASERVER_LABEL)
    return Gang(g.podsets, name)


def test_a_gang_that_fits_only_in_one_worker_goes_there_and_the_other_says_why():
    d = dispatch(required(6), [worker("a", [4, 4]), worker("b", [6, 6])], NOW)
    assert d.chosen == "b"
    assert [v.worker for v in d.verdicts] == ["b", "a"]
    a = d.verdicts[1]
    # a's UltraServers have 4 nodes: the gang of 6 could never start whole there, and a says so
    assert not a.fits and not a.chosen and a.reason.startswith("can never start whole: it needs 6 pods")
    assert d.verdicts[0].chosen and d.verdicts[0].level == ULTRASERVER_LABEL
    assert d.summary.startswith("nominated b: chosen:")


def test_the_tightest_worker_wins_across_clusters():
    # a: a whole free UltraServer of 8; b: an UltraServer of 8 with 4 nodes taken.
    b_used = {f"b-0-us1-n{i:02d}": 4 for i in range(4)}
    d = dispatch(required(4), [worker("a", [8]), worker("b", [8], b_used)], NOW)
    assert d.chosen == "b"
    chosen, other = d.verdicts
    assert chosen.room == 0 and other.room == 4
    assert other.fits and not other.chosen and "b leaves less room (0 pods against 4)" in other.reason
    assert "tightest of 2 workers" in chosen.reason


def test_equal_room_is_decided_by_name():
    d = dispatch(required(4), [worker("b", [4]), worker("a", [4])], NOW)
    assert d.chosen == "a"
    assert "as tight as a" in d.verdicts[1].reason


def test_a_gang_that_fits_nowhere_is_not_nominated_and_every_worker_says_why():
    d = dispatch(required(9), [worker("a", [4]), worker("b", [8])], NOW)
    assert d.chosen is None and d.fit is None
    assert all(not v.fits for v in d.verdicts)
    # 9 pods in UltraServers of 4 and 8 nodes: never, and each worker says so
    assert d.summary.startswith("fits in no worker now: a: can never start whole: it needs 9 pods")
    assert "b: can never start whole: it needs 9 pods" in d.summary


def test_unusable_and_recently_refusing_workers_are_skipped_with_their_reason():
    workers = [worker("a", [8], unusable="not connected"), worker("b", [8]), worker("c", [8])]
    refused = [Refusal("b", NOW - 30, "its gang check: gang does not fit now")]
    d = dispatch(required(4), workers, NOW, refused, refusal_ttl=300)
    assert d.chosen == "c"
    by = {v.worker: v for v in d.verdicts}
    assert by["a"].reason == "not connected"
    assert by["b"].reason == (
        "refused it at 2026-12-01T11:59:30Z (its gang check: gang does not fit now); "
        "asked again from 2026-12-01T12:04:30Z"
    )


def test_a_refusal_expires():
    refused = [Refusal("a", NOW - 301, "no answer within 120s")]
    assert dispatch(required(4), [worker("a", [8])], NOW, refused, refusal_ttl=300).chosen == "a"


def test_the_latest_refusal_of_a_worker_counts():
    refused = [Refusal("a", NOW - 1000, "old"), Refusal("a", NOW - 10, "new")]
    d = dispatch(required(4), [worker("a", [8])], NOW, refused, refusal_ttl=300)
    assert d.chosen is None and "(new)" in d.verdicts[0].reason


def test_quota_is_checked_in_the_first_flavor_with_room():
    small = FlavorQuota("p5", {}, {"cpu": 10**9, GPU: 8})
    roomy = FlavorQuota("gb200", {}, {"cpu": 10**9, GPU: 64})
    d = dispatch(required(4), [worker("a", [8], flavors=(small, roomy))], NOW)
    assert d.chosen == "a" and d.verdicts[0].flavor == "gb200"
    d = dispatch(required(4), [worker("a", [8], flavors=(small,), cluster_queue="training")], NOW)
    assert d.chosen is None
    assert (
        d.verdicts[0].reason == "no quota in ClusterQueue training: flavor p5 has 8 nvidia.com/gpu free of 16"
    )


def test_a_resource_no_flavor_covers_is_no_quota():
    d = dispatch(required(4), [worker("a", [8], flavors=(FlavorQuota("x", {}, {GPU: 99}),))], NOW)
    assert d.chosen is None and "flavor x does not cover cpu" in d.verdicts[0].reason


def test_the_flavor_nodes_are_the_only_ones_the_gang_may_use():
    labelled = FlavorQuota("gb200", {INSTANCE_TYPE_LABEL: "ml.p6e-gb200.36xlarge"}, GB200.free)
    d = dispatch(required(4), [worker("a", [8], flavors=(labelled,))], NOW)
    # the flavor's label is on none of the worker's nodes: no node the gang may use, ever
    assert d.chosen is None and d.verdicts[0].reason.startswith("can never start whole: it needs 4 pods")


def test_plan_capacity_must_last_the_gang_s_max_runtime():
    # The block ends at 12:20; from its termination start (30 minutes before) on, only a gang
    # that finishes by then is admitted.
    start = datetime(2026, 11, 30, 11, 30, tzinfo=UTC)
    block = CapacityBlock("ml.p6e-gb200.36xlarge", 8, "z1", start, datetime(2026, 12, 1, 12, 20, tzinfo=UTC))
    plan = TrainingPlan("p", "training-job", (block,), "training", "gb200", {GPU: 4}, any_block_times=True)
    a = worker("a", [8], plans=(plan,), cluster_queue="training")
    d = dispatch(required(4), [a], NOW, max_runtime=timedelta(hours=6))
    assert d.chosen is None and d.verdicts[0].reason.startswith("waiting for the next block:")
    assert dispatch(required(4), [a], NOW, max_runtime=timedelta(minutes=10)).chosen == "a"


def test_a_sequential_worker_holds_a_gang_while_its_last_one_is_not_ready():
    sequential = GangPolicy(admission="Sequential")
    busy = worker("a", [8], policy=sequential, unready=("team-a/earlier",))
    d = dispatch(required(4), [busy, worker("b", [8])], NOW)
    assert d.chosen == "b"
    assert d.verdicts[1].reason == "Sequential admission: waiting for gang team-a/earlier to be Ready"
    assert dispatch(required(4), [worker("a", [8], policy=sequential)], NOW).chosen == "a"


def test_spares_of_the_worker_s_policy_are_kept():
    spares = worker("a", [4], policy=GangPolicy(placement=PlacementPolicy(spares_per_ultraserver=1)))
    assert dispatch(required(4), [spares], NOW).chosen is None
    assert dispatch(required(3), [spares], NOW).chosen == "a"


def test_a_burst_committed_one_by_one_never_over_promises_a_worker():
    workers = {"a": worker("a", [4, 4]), "b": worker("b", [6])}
    placed: dict[str, int] = {"a": 0, "b": 0}
    for i in range(6):
        d = dispatch(required(3, f"g{i}"), list(workers.values()), NOW)
        if d.chosen is None:
            continue
        assert d.fit is not None
        commit(workers[d.chosen], d.fit, "team-a")
        workers[d.chosen] = workers[d.chosen].less(taken(d.fit))
        placed[d.chosen] += 3
    # 4 gangs of 3 fit: one in each UltraServer of 4 in a, two in b's UltraServer of 6.
    assert placed == {"a": 6, "b": 6}
    assert all(
        w.snapshot is not None and not any(w.snapshot.overcommitted(i) for i in w.snapshot.live_node_ids())
        for w in workers.values()
    )


def test_commit_takes_the_gang_s_quota_off_its_flavor():
    a = worker("a", [8], flavors=(FlavorQuota("gb200", {}, {"cpu": 100_000, GPU: 20}),))
    d = dispatch(required(4), [a], NOW)
    assert d.fit is not None
    after = a.less(taken(d.fit))
    assert after.flavors[0].free == {"cpu": 96_000, GPU: 4}
    assert dispatch(required(4), [after], NOW).verdicts[0].reason.startswith("no quota")


def test_hold_charges_a_nomination_in_flight_only_where_it_fits():
    a = worker("a", [4])
    fit = hold(required(4), a, "ns", NOW)
    assert fit is not None and taken(fit) == {("gb200", GPU): 16, ("gb200", "cpu"): 4000}
    assert dispatch(required(1, "next"), [a], NOW).chosen is None
    assert hold(required(5, "big"), worker("b", [4]), "ns", NOW) is None
    assert hold(required(4), worker("c", [4], unusable="not connected"), "ns", NOW) is None


def test_requests_of_sums_every_pod():
    assert requests_of(gang(3, gpus=4)) == {GPU: 12, "cpu": 3000}


def test_verdicts_round_trip_through_their_dict():
    v = WorkerVerdict("b", True, True, "chosen: x", "gb200", ULTRASERVER_LABEL, ("us-1",), 2)
    assert WorkerVerdict.from_dict(v.to_dict()) == v
    bare = WorkerVerdict("a", False, False, "not connected")
    assert WorkerVerdict.from_dict(bare.to_dict()) == bare
    assert bare.to_dict() == {"worker": "a", "fits": False, "chosen": False, "reason": "not connected"}


@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=3),
    st.lists(st.integers(1, 8), min_size=1, max_size=3),
    st.integers(1, 8),
)
def test_the_choice_never_depends_on_the_order_of_workers(a_sizes, b_sizes, count):
    one = dispatch(required(count), [worker("a", a_sizes), worker("b", b_sizes)], NOW)
    two = dispatch(required(count), [worker("b", b_sizes), worker("a", a_sizes)], NOW)
    assert one.chosen == two.chosen and one.verdicts == two.verdicts
    if one.chosen is not None:
        fitting = [v for v in one.verdicts if v.fits]
        assert fitting[0].chosen and all(fitting[0].room <= (v.room or 0) for v in fitting)


# -- a copy's state ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "state", "reason"),
    [
        ({"quota_reserved": False}, CopyState.WAITING, ""),
        ({"quota_reserved": True, "check": CheckState.PENDING}, CopyState.WAITING, ""),
        ({"quota_reserved": True, "check": CheckState.READY}, CopyState.ADMITTED, ""),
        ({"quota_reserved": True, "admitted": True}, CopyState.ADMITTED, ""),
        ({"quota_reserved": False, "finished": True}, CopyState.ADMITTED, ""),
        (
            {
                "quota_reserved": True,
                "check": CheckState.PENDING,
                "check_message": "gang does not fit now: x",
            },
            CopyState.REFUSED,
            "its gang check: gang does not fit now: x",
        ),
        (
            {
                "quota_reserved": True,
                "check": CheckState.PENDING,
                "check_message": "preempting",
                "preempting": True,
            },
            CopyState.WAITING,
            "",
        ),
        (
            {"quota_reserved": False, "quota_message": "couldn't assign flavors"},
            CopyState.REFUSED,
            "its Kueue: couldn't assign flavors",
        ),
        (
            {"quota_reserved": True, "check": CheckState.REJECTED, "check_message": "bad"},
            CopyState.REFUSED,
            "its gang check said Rejected: bad",
        ),
        (
            {"quota_reserved": True, "evicted": True, "evicted_message": "Preempted"},
            CopyState.REFUSED,
            "evicted there: Preempted",
        ),
    ],
)
def test_copy_state(kw, state, reason):
    assert copy_state(**kw) == Copy(state, reason)


# -- a nomination's life -----------------------------------------------------------------------------

WAITING, ABSENT = Copy(CopyState.WAITING), Copy(CopyState.ABSENT)


def test_nothing_nominated_and_no_copy_left_chooses():
    assert step((), {"a": ABSENT, "b": ABSENT}, {"a", "b"}, NOW, NOW).action is NominationAction.CHOOSE


def test_a_deciding_worker_is_kept_until_its_answer_is_due():
    s = step(("a",), {"a": WAITING}, {"a", "b"}, NOW - 10, NOW, answer_timeout=60)
    assert s.action is NominationAction.KEEP and s.worker == "a" and s.wake_at == NOW + 50


def test_a_silent_worker_is_given_up_after_the_timeout():
    s = step(("a",), {"a": WAITING}, {"a", "b"}, NOW - 60, NOW, answer_timeout=60)
    assert (s.action, s.worker, s.reason) == (NominationAction.WITHDRAW, "a", "no answer within 60s")


def test_a_refusal_or_a_lost_worker_is_given_up_at_once():
    refused = Copy(CopyState.REFUSED, "its gang check: no")
    s = step(("a",), {"a": refused}, {"a"}, NOW, NOW)
    assert (s.action, s.worker, s.reason) == (NominationAction.WITHDRAW, "a", "its gang check: no")
    s = step(("a",), {}, {"b"}, NOW, NOW)
    assert (s.action, s.reason) == (NominationAction.WITHDRAW, "not connected")


def test_the_next_worker_waits_until_the_last_copy_is_gone():
    s = step((), {"a": Copy(CopyState.REFUSED, "no"), "b": ABSENT}, {"a", "b"}, NOW, NOW)
    assert (s.action, s.worker) == (NominationAction.WAIT, "a")


def test_a_copy_admitted_anywhere_is_adopted():
    admitted = Copy(CopyState.ADMITTED)
    assert step((), {"a": admitted}, {"a"}, NOW, NOW).action is NominationAction.ADOPT
    s = step(("b",), {"a": admitted, "b": WAITING}, {"a", "b"}, NOW, NOW)
    assert (s.action, s.worker) == (NominationAction.ADOPT, "a")
    assert step(("a",), {"a": admitted}, {"a"}, NOW - 999, NOW).action is NominationAction.KEEP


def test_several_nominated_at_once_are_withdrawn():
    s = step(("a", "b"), {"a": WAITING, "b": WAITING}, {"a", "b"}, NOW, NOW)
    assert s.action is NominationAction.WITHDRAW and s.worker is None


@given(
    st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(list(CopyState))),
    st.sets(st.sampled_from(["a", "b", "c"])),
    st.floats(0, 500),
)
def test_a_second_worker_is_never_nominated_while_another_holds_a_copy(nominated, states, connected, age):
    copies = {w: Copy(s, "r") for w, s in states.items() if w in connected}
    s = step(tuple(nominated), copies, connected, NOW - age, NOW, answer_timeout=120)
    holding = {w for w, c in copies.items() if c.state is not CopyState.ABSENT}
    if s.action is NominationAction.CHOOSE:
        assert not holding and not nominated
    if s.action is NominationAction.ADOPT:
        assert copies[s.worker or ""].state is CopyState.ADMITTED


def test_hold_without_quota_charges_only_the_nodes():
    # Its copy's Kueue reserved its 16 GPUs already: 0 left, but it still holds its nodes.
    a = worker("a", [4], flavors=(FlavorQuota("gb200", {}, {"cpu": 10**9, GPU: 0}),))
    assert hold(required(4), a, "ns", NOW, quota=False) is not None
    assert a.snapshot is not None and a.snapshot.pod("ns", "~promised/g/main/0") is not None
    assert hold(required(4, "other"), worker("b", [4], flavors=a.flavors), "ns", NOW) is None


def test_the_record_round_trips_and_drops_what_it_cannot_read():
    record = DispatchRecord(
        "b",
        NOW,
        (Refusal("a", NOW - 10, "no answer within 120s"),),
        (WorkerVerdict("b", True, True, "chosen: x"),),
        "s",
    )
    assert DispatchRecord.from_dict(record.to_dict()) == record
    assert DispatchRecord.from_dict("nonsense") == DispatchRecord()
    broken = DispatchRecord.from_dict(
        {"nominatedAt": "yesterday", "refusals": [{"worker": 3}, "x"], "summary": 1}
    )
    assert broken == DispatchRecord(summary="1")
    assert record.counting(NOW + 400, 300) == ()


def test_quota_taken_in_one_flavor_of_several_resource_groups():
    # cpu from flavor "default", GPUs from "gb200": the combination Kueue would assign.
    combo = FlavorQuota("default+gb200", {}, {"cpu": 10**6, GPU: 16}, {"cpu": "default", GPU: "gb200"})
    other = FlavorQuota("default+p5", {}, {"cpu": 10**6, GPU: 64}, {"cpu": "default", GPU: "p5"})
    a = worker("a", [8], flavors=(combo, other))
    d = dispatch(required(4), [a], NOW)
    assert d.fit is not None and d.fit.flavor.name == "default+gb200"
    assert taken(d.fit) == {("default", "cpu"): 4000, ("gb200", GPU): 16}
    after = a.less(taken(d.fit))
    assert after.flavors[0].free == {"cpu": 10**6 - 4000, GPU: 0}
    assert after.flavors[1].free == {"cpu": 10**6 - 4000, GPU: 64}  # the shared cpu flavor too
