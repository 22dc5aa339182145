"""A pass's preemption state (`admission.preempt.Governance`): its victim searches share one
index per snapshot, also once victims chosen earlier in the pass are marked evicting."""

from __future__ import annotations

from gangplugin.admission.preempt import Governance
from gangplugin.core.preemption import RunningGang
from gangplugin.core.topology import BoundPod, Node, build_snapshot


def test_one_index_per_snapshot_for_the_whole_pass() -> None:
    nodes = [Node("n0", {"kubernetes.io/hostname": "n0"}, {"nvidia.com/gpu": 4})]
    snap = build_snapshot(nodes, [BoundPod("ns", "a-0", "n0", {"nvidia.com/gpu": 4})])
    other = build_snapshot(nodes)
    reads: list[int] = []

    def running() -> list[RunningGang]:
        reads.append(1)
        return [RunningGang("ns/a", 0, "q", 0.0, 0.0, 4, (("ns", "a-0"),))]

    gov = Governance({}, running, dict)
    index = gov.index(snap)
    gov.mark_evicting(("ns/a",))
    assert gov.index(snap) is index and index.covers(snap, gov.running)
    assert gov.index(other) is not index and gov.index(other).snapshot is other
    assert len(reads) == 1  # the admitted gangs are read once per pass
