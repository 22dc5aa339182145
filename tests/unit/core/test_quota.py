"""The quota plans give a ClusterQueue over time, and the bookkeeping of what is managed."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gangplugin.core.plans import CapacityBlock, TargetResource, TrainingPlan
from gangplugin.core.quota import next_quota_change, plan_capacity, queue_quota, quota_update
from gangplugin.core.timeutil import parse_time


def t(text: str) -> datetime:
    return parse_time(text, "t")


def p5(start: str, end: str, count: int = 4) -> CapacityBlock:
    return CapacityBlock("ml.p5.48xlarge", count, "us-east-1b", t(start), t(end))


def gb200(start: str, end: str, ultra_servers: int = 2) -> CapacityBlock:
    return CapacityBlock(
        "ml.p6e-gb200.36xlarge",
        18 * ultra_servers,
        "us-east-1a",
        t(start),
        t(end),
        ultra_server_type="ml.u-p6e-gb200x72",
        ultra_server_count=ultra_servers,
    )


def plan(
    name: str, *blocks: CapacityBlock, cq: str = "training", flavor: str = "p5", **kw: object
) -> TrainingPlan:
    resources = kw.pop("resources", {"nvidia.com/gpu": 8, "cpu": 192_000})
    return TrainingPlan(
        name,
        TargetResource.TRAINING_JOB,
        blocks,
        cq,
        flavor,
        resources,
        **kw,  # type: ignore[arg-type]
    )


A = plan(
    "a",
    p5("2026-12-01T11:30:00Z", "2026-12-03T11:30:00Z", 4),
    p5("2026-12-05T11:30:00Z", "2026-12-06T11:30:00Z", 8),
)
B = plan("b", p5("2026-12-02T11:30:00Z", "2026-12-04T11:30:00Z", 2))


def test_capacity_follows_the_blocks() -> None:
    assert plan_capacity(A, t("2026-12-01T11:29:59Z")) == {"nvidia.com/gpu": 0, "cpu": 0}
    assert plan_capacity(A, t("2026-12-01T11:30:00Z")) == {"nvidia.com/gpu": 32, "cpu": 768_000}
    assert plan_capacity(A, t("2026-12-04T00:00:00Z"))["nvidia.com/gpu"] == 0
    assert plan_capacity(A, t("2026-12-05T12:00:00Z"))["nvidia.com/gpu"] == 64
    assert plan_capacity(A, t("2026-12-06T11:30:00Z"))["nvidia.com/gpu"] == 0


def test_plans_feeding_one_queue_add_up() -> None:
    at = t("2026-12-02T12:00:00Z")
    assert queue_quota([A, B], "training", at) == {("p5", "nvidia.com/gpu"): 48, ("p5", "cpu"): 1_152_000}
    other = plan("c", p5("2026-12-01T11:30:00Z", "2026-12-03T11:30:00Z"), cq="other")
    assert queue_quota([A, B, other], "training", at)[("p5", "nvidia.com/gpu")] == 48
    assert queue_quota([A, B, other], "other", at) == {("p5", "nvidia.com/gpu"): 32, ("p5", "cpu"): 768_000}


def test_ultraserver_blocks_keep_spares_out_of_quota() -> None:
    g = plan(
        "g",
        gb200("2026-12-01T11:30:00Z", "2026-12-03T11:30:00Z", 2),
        flavor="gb200",
        resources={"nvidia.com/gpu": 4},
        spare_instances_per_ultra_server=1,
    )
    # 2 UltraServers x (18 - 1 spare) instances x 4 GPUs
    assert queue_quota([g], "training", t("2026-12-02T00:00:00Z")) == {("gb200", "nvidia.com/gpu"): 136}
    none = plan(
        "n", *g.blocks, flavor="gb200", resources={"nvidia.com/gpu": 4}, spare_instances_per_ultra_server=0
    )
    assert queue_quota([none], "training", t("2026-12-02T00:00:00Z"))[("gb200", "nvidia.com/gpu")] == 144


def test_next_change_is_the_next_boundary_of_any_feeding_plan() -> None:
    assert next_quota_change([A, B], "training", t("2026-12-01T00:00:00Z")) == t("2026-12-01T11:30:00Z")
    assert next_quota_change([A, B], "training", t("2026-12-01T11:30:00Z")) == t("2026-12-02T11:30:00Z")
    assert next_quota_change([A, B], "training", t("2026-12-03T12:00:00Z")) == t("2026-12-04T11:30:00Z")
    assert next_quota_change([A, B], "training", t("2026-12-06T11:30:00Z")) is None
    assert next_quota_change([A, B], "nobody", t("2026-12-01T00:00:00Z")) is None


def test_quota_changes_only_at_transitions() -> None:
    """Between two consecutive transitions the quota is constant (no polling needed)."""
    at = t("2026-11-30T00:00:00Z")
    while (nxt := next_quota_change([A, B], "training", at)) is not None:
        q = queue_quota([A, B], "training", at)
        for step in (timedelta(seconds=1), (nxt - at) / 2, nxt - at - timedelta(microseconds=1)):
            assert queue_quota([A, B], "training", at + step) == q
        at = nxt


def test_update_remembers_and_restores_the_value_before_plans() -> None:
    key, cpu = ("p5", "nvidia.com/gpu"), ("p5", "cpu")
    current = {key: "256", cpu: "6144", ("p5", "memory"): "60800Gi"}
    first = quota_update({key: 32}, current, {})
    assert first.values == {key: "32"}
    assert first.managed == {key: "256"}
    # Later: still fed, the before-value is kept, not the plan's own 32.
    current[key] = "32"
    second = quota_update({key: 0}, current, first.managed)
    assert second.values == {key: "0"} and second.managed == {key: "256"}
    # The last plan went away: the value before comes back, the pair is no longer managed.
    current[key] = "0"
    third = quota_update({}, current, second.managed)
    assert third.values == {key: "256"} and third.managed == {}


def test_update_leaves_unmanaged_and_unknown_pairs_alone() -> None:
    current = {("p5", "nvidia.com/gpu"): "8", ("p5", "memory"): "1Ti"}
    up = quota_update({("p5", "memory"): 1 << 40, ("gb200", "nvidia.com/gpu"): 4}, current, {})
    assert up.values == {}  # 1Ti already; gb200 not in the ClusterQueue
    assert up.managed == {("p5", "memory"): "1Ti"}


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 5), st.sampled_from([1, 2, 4, 8])), max_size=6))
def test_quota_is_the_sum_of_active_blocks(spec: list[tuple[int, int, int]]) -> None:
    base = t("2026-12-01T11:30:00Z")
    plans = [
        TrainingPlan(
            f"p{i}",
            TargetResource.TRAINING_JOB,
            (CapacityBlock("x", n, "z", base + timedelta(days=s), base + timedelta(days=s + d)),),
            "cq",
            "f",
            {"nvidia.com/gpu": 8},
        )
        for i, (s, d, n) in enumerate(spec)
    ]
    for day in range(0, 27):
        at = base + timedelta(days=day, hours=1)
        want = sum(n for s, d, n in spec if s <= day < s + d) * 8
        assert queue_quota(plans, "cq", at).get(("f", "nvidia.com/gpu"), 0) == want


def test_fleet_inventory_counts_nodes_and_whole_ultraservers_and_reserves_plans() -> None:
    from gangplugin.core.offerings import FleetNode, fleet_inventory

    nodes = [FleetNode("ml.p5.48xlarge", "us-east-1b") for _ in range(5)]
    nodes += [
        FleetNode("ml.p6e-gb200.36xlarge", "us-east-1a", f"us-{i // 18}") for i in range(35)
    ]  # one short
    at = t("2026-12-02T00:00:00Z")
    expired = plan("old", p5("2026-11-01T11:30:00Z", "2026-11-02T11:30:00Z"))
    inv = fleet_inventory(nodes, [A, expired], at)
    pools = {
        (p.instance_type, p.ultra_server_type): (p.count, p.instances_per_ultra_server) for p in inv.pools
    }
    assert pools == {
        ("ml.p5.48xlarge", None): (5, 1),
        ("ml.p6e-gb200.36xlarge", "ml.u-p6e-gb200x72"): (2, 18),
    }
    assert [(r.count, r.instance_type) for r in inv.reservations] == [
        (4, "ml.p5.48xlarge"),
        (8, "ml.p5.48xlarge"),
    ]
