"""The capacity simulator's event loop: hand-checked waits, each policy, Sequential mode,
readiness timeouts with backoff, plan quota and draining, determinism."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gangplugin.core.admission import QueuedWorkload, admission_queue, charge
from gangplugin.core.errors import InputError
from gangplugin.core.optimal import optimal_admissions
from gangplugin.core.placement import place
from gangplugin.core.plans import CapacityBlock, TargetResource, TrainingPlan
from gangplugin.core.policy import GangPolicy, Requeue
from gangplugin.core.preemption import QueuePreemption
from gangplugin.core.simulate import GPU, POLICIES, Job, Settings, first_fit, percentile, replay, scaled
from gangplugin.core.states import CheckState
from gangplugin.core.topology import ULTRASERVER_LABEL, Node, build_snapshot
from gangplugin.sim.trace import jobs_from_rows, synthetic

US = ULTRASERVER_LABEL
START = datetime(2026, 1, 1, tzinfo=UTC)


def cluster(ultraservers: int = 2, per_us: int = 4, gpus: int = 4) -> list[Node]:
    return [
        Node(
            f"us{u}-n{i}",
            {US: f"us-{u}", "kubernetes.io/hostname": f"us{u}-n{i}", "topology.kubernetes.io/zone": "z"},
            {GPU: gpus, "pods": 110},
        )
        for u in range(1, ultraservers + 1)
        for i in range(per_us)
    ]


def job(key: str, arrival: float, pods: int, runtime: float, **kw: object) -> Job:
    return Job(key, arrival, pods, 4, runtime, runtime, preferred_topology=US, **kw)  # type: ignore[arg-type]


HAND = [job("a", 0, 4, 100), job("b", 10, 4, 50), job("c", 20, 8, 10), job("d", 30, 2, 10)]


def waits(r):
    return {o.key: o.wait for o in r.outcomes}


def test_hand_checked_trace():
    # a fills us-1, b us-2; c (both UltraServers) waits for a; d backfills us-2 when b ends at 60.
    r = replay(cluster(), HAND, "gangplugin", Settings())
    assert waits(r) == {"a": 0, "b": 0, "c": 80, "d": 30}
    assert {o.key: o.end for o in r.outcomes} == {"a": 100, "b": 60, "c": 110, "d": 70}
    assert r.makespan == 110 and r.total_gpus == 32
    assert r.busy_gpu_seconds == 16 * 100 + 16 * 50 + 32 * 10 + 8 * 10
    assert r.gpu_utilization == pytest.approx(2800 / (32 * 110))
    assert all(o.never_ran is None for o in r.outcomes)
    # c waits for lack of GPUs, not for fragmentation: every free node could take one of its pods
    assert r.stranded_gpu_seconds == 0


def test_gpus_free_in_ultraservers_too_small_for_the_head_are_stranded():
    # a and b leave one node free in each UltraServer; c needs 2 nodes in one UltraServer.
    jobs = [
        job("a", 0, 3, 100),
        job("b", 0.5, 3, 100),
        replace(job("c", 1, 2, 10), preferred_topology=None, required_topology=US),
    ]
    r = replay(cluster(), jobs, "gangplugin", Settings())
    assert waits(r)["c"] == 99
    assert r.stranded_gpu_seconds == 8 * 99
    assert max(s.stranded_gpus for s in r.samples) == 8


def test_gpus_only_held_spares_keep_from_the_head_are_stranded():
    # 1 spare per UltraServer: a and b take the other 3 nodes of each; c (1 pod, required in
    # one UltraServer) sees a free node in each, both held as spares: 8 GPUs stranded until a ends.
    gp = GangPolicy(placement=replace(GangPolicy().placement, spares_per_ultraserver=1))
    required = {"preferred_topology": None, "required_topology": US}
    jobs = [
        replace(job("a", 0, 3, 100), **required),
        replace(job("b", 0.5, 3, 100), **required),
        replace(job("c", 1, 1, 10), **required),
    ]
    r = replay(cluster(), jobs, "gangplugin", Settings(policy=gp))
    assert waits(r)["c"] == 99
    assert r.stranded_gpu_seconds == 8 * 99
    # best-fit holds no spares: c runs at once on a free node and nothing is stranded
    other = replay(cluster(), jobs, "best-fit", Settings(policy=gp))
    assert waits(other)["c"] == 0 and other.stranded_gpu_seconds == 0


def test_makespan_ends_with_the_last_job_not_the_last_plan_block():
    settings = Settings(plans=(plan((0, 1000), (2000, 259_200)),), start=START)
    r = replay(cluster(), [job("a", 0, 4, 100), job("b", 50, 2, 300)], "gangplugin", settings)
    assert [o.end for o in r.outcomes] == [100, 350]
    assert r.makespan == 350
    assert r.gpu_utilization == pytest.approx((16 * 100 + 8 * 300) / (32 * 350))


@pytest.mark.parametrize("policy", POLICIES)
def test_each_policy_runs_every_job_that_fits(policy):
    r = replay(cluster(), HAND, policy, Settings())
    assert r.policy == policy
    assert all(o.end is not None for o in r.outcomes)
    assert waits(r)["a"] == 0


def test_spares_are_held_by_gangplugin_only():
    # 2 UltraServers of 4 nodes, 1 spare each: 6 nodes for gangs under our policy, 8 for the others.
    gp = GangPolicy(placement=replace(GangPolicy().placement, spares_per_ultraserver=1))
    jobs = [job("g7", 0, 7, 10), job("g6", 1, 6, 10)]
    ours = {o.key: o for o in replay(cluster(), jobs, "gangplugin", Settings(policy=gp)).outcomes}
    assert ours["g7"].never_ran is not None and "held as spare" in ours["g7"].never_ran
    assert ours["g6"].wait == 0
    for other in ("best-fit", "first-fit"):
        r = replay(cluster(), jobs, other, Settings(policy=gp))
        assert waits(r) == {"g7": 0, "g6": 9}, other


def test_first_fit_is_topology_blind_and_all_or_nothing():
    snap = build_snapshot(cluster())
    gang = job("x", 0, 6, 1).gang()
    p = first_fit(snap, gang, snap.live_node_ids())
    assert p.feasible and [a.node for a in p.assignments][:5] == [f"us1-n{i}" for i in range(4)] + ["us2-n0"]
    too_big = job("y", 0, 9, 1).gang()
    q = first_fit(snap, too_big, snap.live_node_ids())
    assert not q.feasible and q.assignments == ()


def test_a_job_too_big_for_the_cluster_never_runs_and_says_why():
    r = replay(cluster(), [job("huge", 0, 9, 10), job("ok", 5, 1, 10)], "gangplugin", Settings())
    out = {o.key: o for o in r.outcomes}
    assert out["huge"].never_ran is not None and out["huge"].never_ran.startswith("never fits this cluster")
    assert out["ok"].never_ran is None and out["ok"].wait == 0


def test_sequential_admits_the_next_gang_only_when_the_previous_is_ready():
    jobs = [job("a", 0, 1, 100), job("b", 0, 1, 100)]
    seq = Settings(policy=GangPolicy(admission="Sequential"), startup_seconds=5)
    assert waits(replay(cluster(), jobs, "gangplugin", seq)) == {"a": 0, "b": 5}
    par = Settings(startup_seconds=5)
    assert waits(replay(cluster(), jobs, "gangplugin", par)) == {"a": 0, "b": 0}


def test_readiness_timeout_requeues_with_backoff_then_deactivates():
    gp = GangPolicy(ready_timeout=300, requeue=Requeue(backoff_base_seconds=60, backoff_limit_count=1))
    r = replay(cluster(), [job("slow", 0, 1, 10)], "gangplugin", Settings(policy=gp, startup_seconds=400))
    (o,) = r.outcomes
    assert o.requeued == 1 and o.end is None
    assert o.never_ran is not None and "deactivated" in o.never_ran and "backoffLimitCount 1" in o.never_ran
    # admitted at 0, timed out at 300, back after 60s, admitted at 360, timed out at 660
    assert r.makespan == 660


def plan(*blocks: tuple[float, float]) -> TrainingPlan:
    return TrainingPlan(
        "p",
        TargetResource.TRAINING_JOB,
        tuple(
            CapacityBlock("t", 8, "z", START + timedelta(seconds=a), START + timedelta(seconds=b))
            for a, b in blocks
        ),
        cluster_queue="cq",
        flavor="f",
        resources_per_instance={GPU: 4},
        termination_lead=timedelta(seconds=100),
        any_block_times=True,
    )


def test_plan_capacity_drains_at_the_block_end_and_resumes_in_the_next():
    settings = Settings(plans=(plan((0, 1000), (2000, 5000)),), start=START)
    r = replay(cluster(), [job("long", 0, 4, 2000)], "gangplugin", settings)
    (o,) = r.outcomes
    # evicted at the termination start (900) after 900s of work, resumed at 2000 with 1100 left
    assert o.drained == 1 and o.wait == 0 and o.end == 3100
    assert r.plan_unused_gpu_seconds > 0


def test_plan_quota_holds_jobs_beyond_it():
    # quota 32 GPUs, the cluster 64: the second 8-pod job waits for the first although nodes are free
    settings = Settings(
        plans=(
            plan(
                (0, 10000),
            ),
        ),
        start=START,
    )
    nodes = cluster(ultraservers=4)
    r = replay(nodes, [job("a", 0, 8, 100), job("b", 1, 8, 100)], "gangplugin", settings)
    assert waits(r) == {"a": 0, "b": 99}


def test_replay_is_deterministic():
    jobs = synthetic(300, seed=7, gpus_per_pod=4, mean_interarrival=30)
    nodes = cluster(ultraservers=8, per_us=18)
    jobs = [replace(j, preferred_topology=US) for j in jobs]
    assert jobs == [
        replace(j, preferred_topology=US)
        for j in synthetic(300, seed=7, gpus_per_pod=4, mean_interarrival=30)
    ]
    a = replay(nodes, jobs, "gangplugin", Settings())
    b = replay(list(reversed(nodes)), list(reversed(jobs)), "gangplugin", Settings())
    assert a.samples == b.samples
    assert sorted(a.outcomes, key=lambda o: o.key) == sorted(b.outcomes, key=lambda o: o.key)
    assert synthetic(300, seed=8) != synthetic(300, seed=7)


def test_admission_queue_orders_candidates_and_admitted_gangs() -> None:
    def wl(key: str, state: CheckState = CheckState.PENDING, **kw) -> QueuedWorkload:
        return QueuedWorkload(key, "p", state, kw.pop("quota_reserved", True), **kw)

    queue = admission_queue(
        [
            wl("b", quota_reserved_at=5, created_at=1),
            wl("a", quota_reserved_at=5, created_at=1),
            wl("z", quota_reserved_at=4, created_at=9),
            wl("c", quota_reserved_at=5, created_at=0.5),
            wl("no-quota", quota_reserved=False),
            wl("evicted", evicted=True),
            wl("done", finished=True),
            wl("r2", CheckState.READY, admitted_at=3, ever_ready=True),
            wl("r1", CheckState.READY, admitted_at=2),
            wl("in-flight", assumed=True),
        ]
    )
    assert [q.key for q in queue.candidates] == ["z", "c", "a", "b"]
    assert [q.key for q in queue.admitted] == ["r1", "r2"]
    # admitted gangs not Ready yet, and admissions written but not read back, gate Sequential mode
    assert queue.unready == {"p": ("in-flight", "r1")}


def test_percentile_and_scaling():
    assert percentile([], 95) == 0.0
    assert percentile([0, 0, 30, 80], 50) == 0 and percentile([0, 0, 30, 80], 95) == 80
    (j,) = scaled([Job("k", 0, 8, 8, 10)], 4)
    assert (j.pods, j.gpus_per_pod, j.gpus) == (16, 4, 64)


def test_optimal_admits_the_packing_that_starts_the_most_gpus():
    # 5 nodes free; x (4 pods) is first in the queue, y (5 pods) packs more: the optimum takes y.
    jobs = [job("busy", 0, 3, 1000), job("x", 1, 4, 10), job("y", 1, 5, 10)]
    assert waits(replay(cluster(), jobs, "gangplugin", Settings())) == {"busy": 0, "x": 0, "y": 10}
    assert waits(replay(cluster(), jobs, "optimal", Settings())) == {"busy": 0, "x": 10, "y": 0}


def test_optimal_packs_required_gangs_better_than_greedy_best_fit():
    # Gangs of 3, 2 and 3 pods, each required in one UltraServer of 4 nodes: greedy best fit
    # (queue order) admits 3 + 2 and strands the rest; the optimum admits 3 + 3.
    snap = build_snapshot(cluster())
    gangs = [
        replace(job(k, 0, n, 1), preferred_topology=None, required_topology=US).gang()
        for k, n in (("a", 3), ("b", 2), ("c", 3))
    ]
    greedy = []
    for g in gangs:
        p = place(snap, g)
        greedy.append(p.feasible)
        if p.feasible:
            charge(snap, g, p, "ns")
    assert greedy == [True, True, False]
    placed = optimal_admissions(build_snapshot(cluster()), gangs, frozenset())
    assert [p.feasible for p in placed] == [True, False, True]
    for p in (placed[0], placed[2]):
        assert len({a.node.split("-")[0] for a in p.assignments}) == 1  # one UltraServer each


LOWER = Settings(preemption=QueuePreemption(within_cluster_queue="LowerPriority"))


def required(key: str, arrival: float, pods: int, runtime: float, priority: int = 0) -> Job:
    return Job(key, arrival, pods, 4, runtime, runtime, required_topology=US, priority=priority)


def test_a_high_priority_gang_preempts_a_whole_gang_and_holds_its_ultraserver():
    # low1 fills us-1, low2 us-2; high needs one UltraServer: it evicts low2 (as costly as low1,
    # started later), and low2, requeued at once and ahead of high in the queue (created
    # earlier), is kept off us-2 until high is admitted there; low2 resumes when high ends.
    jobs = [required("low1", 0, 4, 100), required("low2", 1, 4, 200), required("high", 10, 4, 50, 10)]
    r = replay(cluster(), jobs, "gangplugin", LOWER)
    out = {o.key: o for o in r.outcomes}
    assert (out["high"].wait, out["high"].end, out["high"].domains) == (0, 60, ("us-2",))
    assert (out["low2"].preempted, out["low2"].wait, out["low2"].end) == (1, 0, 60 + 191)
    assert (out["low1"].preempted, out["low1"].end) == (0, 100)
    assert r.busy_gpu_seconds == 16 * 100 + 16 * 9 + 16 * 50 + 16 * 191
    # Kueue's default preempts nothing: high waits for low1
    plain = {o.key: o for o in replay(cluster(), jobs, "gangplugin", Settings()).outcomes}
    assert plain["high"].wait == 90 and all(o.preempted == 0 for o in plain.values())


def test_equal_priorities_and_the_packing_baselines_never_preempt():
    jobs = [required("low1", 0, 4, 100), required("low2", 1, 4, 200), required("high", 10, 4, 50, 10)]
    for name in ("first-fit", "optimal"):
        assert all(o.preempted == 0 for o in replay(cluster(), jobs, name, LOWER).outcomes), name
    best = {o.key: o for o in replay(cluster(), jobs, "best-fit", LOWER).outcomes}
    assert best["low2"].preempted == 1 and best["high"].wait == 0
    flat = [replace(j, priority=0) for j in jobs]
    r = replay(cluster(), flat, "gangplugin", LOWER)
    assert all(o.preempted == 0 for o in r.outcomes) and waits(r)["high"] == 90


def test_the_clusterqueue_rule_decides_who_may_be_preempted():
    jobs = [required("old", 0, 4, 100), required("new", 1, 4, 100), required("late", 10, 4, 10)]
    newer = Settings(preemption=QueuePreemption(within_cluster_queue="LowerOrNewerEqualPriority"))
    # of equal priority, only gangs newer than the preemptor may go: "late" is the newest
    r = replay(cluster(), jobs, "gangplugin", newer)
    assert waits(r)["late"] == 90 and all(o.preempted == 0 for o in r.outcomes)
    # "Any" is a cohort rule: Kueue refuses it for withinClusterQueue, so does the replay
    with pytest.raises(ValueError, match="withinClusterQueue 'Any' is not one of"):
        replay(cluster(), jobs, "gangplugin", Settings(preemption=QueuePreemption("Any")))


def test_kueue_reserves_quota_by_priority_first():
    # quota for one 8-pod job at a time: "urgent" arrives last but is reserved first when "a" ends
    settings = Settings(plans=(plan((0, 10000)),), start=START)
    nodes = cluster(ultraservers=4)
    jobs = [job("a", 0, 8, 100), job("b", 1, 8, 100), replace(job("urgent", 2, 8, 100), priority=5)]
    assert waits(replay(nodes, jobs, "gangplugin", settings)) == {"a": 0, "b": 199, "urgent": 98}


def test_a_trace_without_priorities_replays_the_same_with_preemption_on():
    jobs = [
        replace(j, preferred_topology=US)
        for j in synthetic(120, seed=5, gpus_per_pod=4, mean_interarrival=20)
    ]
    nodes = cluster(ultraservers=4, per_us=18)
    a, b = replay(nodes, jobs, "gangplugin", Settings()), replay(nodes, jobs, "gangplugin", LOWER)
    assert a.samples == b.samples and waits(a) == waits(b)
    assert max(o.wait or 0 for o in a.outcomes) > 0  # the cluster was busy: gangs did wait


def test_preemption_replays_are_deterministic():
    jobs = [
        replace(j, required_topology=US if j.pods <= 18 else None, preferred_topology=US, priority=i % 3)
        for i, j in enumerate(synthetic(100, seed=9, gpus_per_pod=4, mean_interarrival=20))
    ]
    nodes = cluster(ultraservers=4, per_us=18)
    a = replay(nodes, jobs, "gangplugin", LOWER)
    b = replay(list(reversed(nodes)), list(reversed(jobs)), "gangplugin", LOWER)
    assert a.samples == b.samples
    assert sorted(a.outcomes, key=lambda o: o.key) == sorted(b.outcomes, key=lambda o: o.key)
    assert sum(o.preempted for o in a.outcomes) > 0
    # every job that fits the cluster ran to its end, the preempted ones included
    assert all(o.end is not None for o in a.outcomes if not (o.never_ran or "").startswith("never fits"))


def test_a_trace_may_give_each_job_a_priority():
    columns = ("arrival_time", "gpu_workers", "gpu_per_worker", "duration", "priority")

    def row(priority: str) -> dict[str, str]:
        return {
            "arrival_time": "0",
            "gpu_workers": "1",
            "gpu_per_worker": "4",
            "duration": "9",
            "priority": priority,
        }

    jobs = jobs_from_rows([row("100"), row(""), row("-5")], columns)
    assert [j.priority for j in jobs] == [100, 0, -5]
    plain = {k: v for k, v in row("").items() if k != "priority"}
    assert [j.priority for j in jobs_from_rows([plain], columns[:-1])] == [0]  # no column: Kueue's 0
    for bad, why in (
        ("high", "is not a whole number"),
        ("1.5", "is not a whole number"),
        ("3000000000", "int32"),
    ):
        with pytest.raises(InputError, match=why) as err:
            jobs_from_rows([row("1"), row(bad)], columns)
        assert err.value.field == "line 3: priority"
