"""The read model's live capacity: kept current from watch events, promises redone only when
what they stand for changed."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from gangplugin.core.admission import with_selector
from gangplugin.core.placement import Gang, PlacementPolicy, PodSet, place
from gangplugin.core.topology import ULTRASERVER_LABEL
from gangplugin.readmodel.capacity import Assumed, LiveCapacity, Promise
from gangplugin.readmodel.records import node_record, pod_record
from tests.support import objects

GPU = "nvidia.com/gpu"
LEVELS = ("topology.kubernetes.io/zone", ULTRASERVER_LABEL, "kubernetes.io/hostname")


node = partial(objects.node, cpu="8", memory="64Gi")


def pod(name: str, node_name: str, gpus: int = 4) -> dict[str, Any]:
    return objects.pod(name, node=node_name, requests={GPU: gpus})


def gang(name: str, count: int, us: str) -> Gang:
    ps = PodSet("main", count, {GPU: 4})
    return with_selector(Gang((ps,), name), {ULTRASERVER_LABEL: us})


def promise(name: str, fingerprint: Any, unbound: Callable[[], Gang]) -> Promise:
    """Gang `name`'s promise (namespace ns, the default placement policy): `unbound` builds what
    is left to place, `fingerprint` tells when that changed."""
    return Promise(
        key=f"ns/{name}",
        fingerprint=fingerprint,
        namespace="ns",
        gang=lambda _snapshot: unbound(),
        policy=PlacementPolicy(),
    )


def view_of(nodes: list[dict[str, Any]]) -> LiveCapacity:
    """A view whose handlers have seen `nodes` added (as the admission dispatcher delivers them)."""
    view = LiveCapacity()
    for n in nodes:
        view.on_node(None, node_record(n))
    return view


def free_gpus(view: LiveCapacity, promises: list[Promise]) -> int:
    with view.locked():
        snap = view.snapshot(LEVELS, promises)
        return sum(snap.free[i].get(GPU, 0) for i in snap.live_node_ids())


def test_events_keep_the_snapshot_current() -> None:
    nodes = [node(f"n{i}", "us-1") for i in range(3)]
    view = view_of(nodes)
    assert free_gpus(view, []) == 12
    view.on_pod(None, pod_record(pod("p1", "n0")))
    assert free_gpus(view, []) == 8
    view.on_pod(pod_record(pod("p1", "n0")), None)
    view.on_node(None, node_record(node("n3", "us-1")))
    assert free_gpus(view, []) == 16
    view.on_node(node_record(node("n3", "us-1")), None)
    unready = node("n2", "us-1")
    unready["status"]["conditions"][0]["status"] = "False"
    view.on_node(node_record(node("n2", "us-1")), node_record(unready))
    with view.locked():
        snap = view.snapshot(LEVELS, [])
        assert not snap.usable[snap.node_ids["n2"]]


def test_promises_are_charged_once_and_redone_only_when_changed() -> None:
    nodes = [node(f"a{i}", "us-1") for i in range(2)] + [node(f"b{i}", "us-2") for i in range(2)]
    view = view_of(nodes)
    calls: list[str] = []

    def make(name: str, count: int) -> Any:
        def build() -> Gang:
            calls.append(name)
            return gang(name, count, "us-1")

        return build

    p = promise("g1", ("us-1", ()), make("g1", 2))
    assert free_gpus(view, [p]) == 8
    assert free_gpus(view, [p]) == 8 and calls == ["g1"]  # unchanged: kept, not redone
    # one pod of the gang got bound: the promise shrinks to the other pod
    view.on_pod(None, pod_record(pod("g1-0", "a0")))
    p2 = promise("g1", ("us-1", (("main", 1),)), make("g1", 1))
    assert free_gpus(view, [p2]) == 8 and calls == ["g1", "g1"]
    # the gang is gone (evicted, finished): its promise is released
    view.on_pod(pod_record(pod("g1-0", "a0")), None)
    assert free_gpus(view, []) == 16


def assumed(name: str, count: int, us: str, view: LiveCapacity, levels: tuple[str, ...] = LEVELS) -> Assumed:
    """An admission decided on `view`'s snapshot for `levels` (as the pass decides one)."""
    g = gang(name, count, us)
    with view.locked():
        placement = place(view.snapshot(levels, []), g, PlacementPolicy())
    assert placement.feasible
    return Assumed(
        resource_version="41",
        certain=True,
        fingerprint=("fp", ()),
        namespace="ns",
        gang=g,
        placement=placement,
        policy=PlacementPolicy(),
    )


def assumed_g1() -> LiveCapacity:
    """A view of three 4-GPU nodes in us-1 into which g1 (2 pods) was just admitted: assumed, its
    Workload not yet in the cache."""
    view = view_of([node(f"a{i}", "us-1") for i in range(3)])
    a = assumed("g1", 2, "us-1", view)
    with view.locked():
        view.assume("ns/g1", a)
    return view


def test_an_admission_not_yet_in_the_cache_stays_charged_in_every_level_order() -> None:
    view = assumed_g1()
    # the next pass: the cache still shows g1 Pending, so it is in no promise; still charged
    assert free_gpus(view, []) == 4
    assert free_gpus(view, []) == 4
    other = (ULTRASERVER_LABEL, "kubernetes.io/hostname")  # a second policy's level order
    with view.locked():
        snap = view.snapshot(other, [])
        assert sum(snap.free[i].get(GPU, 0) for i in snap.live_node_ids()) == 4
        view.forget("ns/g1")  # the write failed, or the cache now shows the Workload
    assert free_gpus(view, []) == 12


def test_an_assumed_admission_becomes_a_promise_without_being_charged_twice() -> None:
    view = assumed_g1()
    with view.locked():
        view.forget("ns/g1")
    p = promise("g1", ("fp", ()), lambda: gang("g1", 2, "us-1"))
    assert free_gpus(view, [p]) == 4


def test_a_promise_where_another_gangs_pods_bound_is_placed_again() -> None:
    """Gangs A and B are promised two nodes each in us-1 (4 nodes); kube-scheduler binds A's
    pods onto the nodes B's promise sat on. B's promise moves to the nodes A's promise held:
    us-1 stays full, and no third gang can be promised into it."""
    nodes = [node(f"a{i}", "us-1") for i in range(4)] + [node(f"b{i}", "us-2") for i in range(2)]
    view = view_of(nodes)

    def promise_of(name: str, bound: int) -> Promise:
        def unbound() -> Gang:  # what is left to promise once `bound` pods are bound
            return gang(name, 2 - bound, "us-1") if bound < 2 else Gang((), name)

        return promise(name, ("us-1", bound), unbound)

    a, b = promise_of("a", 0), promise_of("b", 0)
    with view.locked():
        snap = view.snapshot(LEVELS, [a, b])
        on = {snap.nodes[snap.node_of("ns", f"~promised/b/main/{i}")].name for i in range(2)}  # type: ignore[union-attr, index]
    for i, n in enumerate(sorted(on)):  # A's real pods bind where B's promise sat
        view.on_pod(None, pod_record(pod(f"a-{i}", n)))
    assert free_gpus(view, [promise_of("a", 2), b]) == 8  # us-1 full; us-2's 8 GPUs free
    with view.locked():
        snap = view.snapshot(LEVELS, [promise_of("a", 2), b])
        assert not any(snap.overcommitted(i) for i in snap.live_node_ids())
        assert not place(snap, gang("c", 1, "us-1"), PlacementPolicy()).feasible


def test_a_promise_that_no_longer_fits_whole_keeps_the_room_left_from_the_next_gang() -> None:
    """The soak (seed 1, 30 min) saw gb200-us-4 promised 92 GPUs for 72: a 6-pod gang admitted
    there lost two of its nodes to plain pods before its pods were pinned, its promise no longer
    fit whole and was charged as nothing, and the next pass admitted a 4-pod gang into the same
    UltraServer. The broken promise keeps what room is left; once the room is back, the promise
    is whole again."""
    view = view_of([node(f"n{i}", "us-1") for i in range(6)])
    p = promise("g1", ("us-1", ()), lambda: gang("g1", 5, "us-1"))
    assert free_gpus(view, [p]) == 4
    for name, at in (("plain-1", "n0"), ("plain-2", "n1")):
        view.on_pod(None, pod_record(pod(name, at)))
    with view.locked():
        snap = view.snapshot(LEVELS, [p])
        assert not place(snap, gang("g2", 1, "us-1"), PlacementPolicy()).feasible  # all 4 left are g1's
    for name, at in (("plain-1", "n0"), ("plain-2", "n1")):
        view.on_pod(pod_record(pod(name, at)), None)
    with view.locked():
        snap = view.snapshot(LEVELS, [p])
        assert place(snap, gang("g2", 1, "us-1"), PlacementPolicy()).feasible  # g1 whole again
    assert free_gpus(view, [p]) == 4
