"""bench/peers.py run in pieces: which (repetition, part) are left to run, and the ports of two
systems' clusters one after the other."""

import argparse
import json
import tempfile
from pathlib import Path

import peers
from _peers.runs import Limits, Run, usable
from _peers.systems import SYSTEMS, Capacity

from gangplugin.localcluster.cluster import LocalCluster, Ports
from gangplugin.localcluster.components import CONTROL_PLANE, REGISTRY
from tests.support.fakeapi import FakeApi


def _args(reps, parts):
    return argparse.Namespace(reps=reps, parts=parts)


def test_a_run_goes_on_with_the_parts_its_saved_repetitions_lack():
    done = [{peers.PARTS_DONE: ["burst", "stream"]}, {peers.PARTS_DONE: ["burst"]}]
    left = peers.todo(SYSTEMS["gangplugin"], done, _args(3, ["burst", "stream"]))
    assert left == [(1, "stream"), (2, "burst"), (2, "stream")]
    # a part that says nothing of a system is never run on it
    floor = peers.todo(SYSTEMS["noop-check"], [], _args(1, ["burst", "recovery", "preemption"]))
    assert floor == [(0, "burst")]


def test_every_part_has_rows_in_the_tables():
    assert list(peers.PARTS) == ["burst", "stream", "big", "recovery", "preemption", "starvation"]
    assert "starvation" not in peers.DEFAULT_PARTS  # run only when asked
    assert all(callable(p.run) and callable(p.rows) for p in peers.PARTS.values())


def test_two_systems_one_after_the_other_share_no_port_below_the_ephemeral_range():
    def ports(base):
        cluster = LocalCluster(
            state_dir=Path(tempfile.mkdtemp()), ports=Ports(base), components=[c.name for c in REGISTRY]
        )
        return {p for c in (*CONTROL_PLANE, *REGISTRY) for p in c.listens(cluster.spec).values()}

    first = ports(peers.DEFAULT_PORT_BASE)
    second = ports(peers.DEFAULT_PORT_BASE + peers.ALTERNATE_PORTS)
    assert not first & second
    assert max(first | second) < 32768


def test_a_failed_part_s_gangs_are_deleted_with_their_pods():
    """A collection DELETE of batch/v1 Jobs orphans their pods unless told otherwise: the bench
    then waited for pods nothing would delete."""
    api = FakeApi()
    run = Run(
        SYSTEMS["gangplugin"], api.client(), Path("unused"), Capacity(1, 4, 1, 1), print, Limits(30, 180)
    )
    run.clear_all()
    deletes = [r for r in api.requests if r.method == "DELETE"]
    assert any(r.url.path.endswith("/jobs") for r in deletes)
    assert all(json.loads(r.content) == {"propagationPolicy": "Background"} for r in deletes)


def _node(ready: str, *taints: str) -> dict:
    return {
        "spec": {"taints": [{"key": t, "effect": "NoSchedule"} for t in taints]},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def test_a_part_starts_only_once_every_node_is_ready_and_untainted_by_the_lifecycle():
    assert usable(_node("True"))
    assert usable(_node("True", "nvidia.com/gpu"))  # a taint of the shape's own is no reason to wait
    assert not usable(_node("False"))
    assert not usable(_node("True", "node.kubernetes.io/not-ready"))  # Ready again, the taint not yet lifted
    assert not usable(_node("True", "node.kubernetes.io/unreachable"))
