"""A gang admitted through Kueue is placed by its GangPolicy: spares per UltraServer and the
levels of the policy's Topology. Plain pods (no Workload) keep the extender's defaults."""

from __future__ import annotations

from typing import Any

import pytest

from gangplugin.core.errors import InputError
from gangplugin.core.names import REQUIRED_TOPOLOGY_ANNOTATION
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import GangReservations
from gangplugin.extender.shared import policy_of
from gangplugin.readmodel.model import ReadModel
from gangplugin.readmodel.records import node_record
from tests.support import objects
from tests.support.caches import model_of
from tests.support.extender import NODES, pod
from tests.support.objects import node

RACK = "example.com/rack"


def policies(spares: int = 0, topology: str | None = None, check: str = "gang") -> ReadModel:
    workload = objects.workload("train", "ns", checks=[objects.check_state(check, "Ready")])
    spec: dict[str, Any] = {"sparesPerUltraServer": spares}
    if topology:
        spec["topologyName"] = topology
    policy = objects.gang_policy("us", **spec)
    topo = objects.topology("racks", RACK, "kubernetes.io/hostname")
    ac = objects.admission_check("gang", policy="us")
    return model_of(workloads=[workload], checks=[ac], policies=[policy], topologies=[topo])[1]


def cache_with(source: ReadModel | None) -> GangReservations:
    cache = GangReservations(policy_of=None if source is None else policy_of(source))
    for i, n in enumerate(NODES):  # racks r0 (n0, n1) and r1 (n2, n3), one UltraServer
        raw = node(n, "us-1")
        raw["metadata"]["labels"][RACK] = f"r{i // 2}"
        cache.on_node("ADDED", None, node_record(raw))
    return cache


def test_gang_of_a_workload_gets_its_policys_spares():
    members = [gang_pod_from_k8s(pod(f"m{i}", "train", 4)) for i in range(4)]
    plain = cache_with(None)
    assert plain.filter(members[0], NODES, now=0.0)[1].feasible  # type: ignore[union-attr]
    held = cache_with(policies(spares=1))
    verdict, plan = held.filter(members[0], NODES, now=0.0)
    assert plan is not None and not plan.feasible  # one of the 4 nodes is the UltraServer's spare
    assert verdict.passed == () and "spare" in plan.reason


def test_gang_of_a_workload_is_placed_by_its_topologys_levels():
    raw = pod("m0", "train", 2)
    raw["metadata"]["annotations"][REQUIRED_TOPOLOGY_ANNOTATION] = RACK
    member = gang_pod_from_k8s(raw)
    with pytest.raises(InputError, match="unknown topology label"):  # not a default level
        cache_with(None).filter(member, NODES, now=0.0)
    cache = cache_with(policies(topology="racks"))
    _, plan = cache.filter(member, NODES, now=0.0)
    assert plan is not None and plan.feasible and plan.level == RACK
    assert len({cache.snapshot.node(s.node).labels[RACK] for s in plan.slots}) == 1  # type: ignore[union-attr]
    # the rack-level snapshot counts the reservation too: the default one sees the same free GPUs
    racks = cache.snapshots[(RACK, "kubernetes.io/hostname")]
    for n in NODES:
        assert racks.free[racks.node_ids[n]] == cache.snapshot.free[cache.snapshot.node_ids[n]]


def test_missing_policy_or_topology_is_an_error_naming_the_field():
    source = policies(topology="absent")
    with pytest.raises(InputError, match=r"spec\.topologyName.*'absent' does not exist"):
        source.policy_of_gang("ns", "train")
    assert policies(check="someone-elses").policy_of_gang("ns", "train") is None  # not our check: defaults
    assert policies().policy_of_gang("ns", "no-such-gang") is None
