"""The slices of a gang admitted into a wide domain, and the pods of a gang admitted wider than
an UltraServer, are placed where the gang check counted them: the check records each slice's
domain, or each pod's UltraServer (`gangplugin.io/slice-domains`), and its promise and the
ungater's plan put them there first, so all three agree on what is left for the others."""

import dataclasses
from typing import Any

import pytest

from gangplugin.core.admission import decide, promise, promised_pods, remaining
from gangplugin.core.errors import InputError
from gangplugin.core.gangplan import GangPod, plan_gang
from gangplugin.core.names import SLICE_DOMAINS_ANNOTATION
from gangplugin.core.placement import Gang, PlacementPolicy, PodSet, place
from gangplugin.core.placement.recorded import format_slice_domains, parse_slice_domains, split
from gangplugin.core.topology import (
    HOSTNAME_LABEL,
    ZONE_LABEL,
    BoundPod,
    Node,
    build_snapshot,
)
from tests.support.core import GPU, GPU_NODE
from tests.support.slices import LEVELS, NN, US, sliced, us_of


def _layer():  # type: ignore[no-untyped-def]
    """One network node of four UltraServers of 4 nodes (4 GPUs each)."""
    labels = {ZONE_LABEL: "z1", NN: "nn-a"}
    names = [f"us-{u}-n{i:02d}" for u in (1, 2, 3, 4) for i in range(4)]
    nodes = [Node(n, {**labels, US: n[:4], HOSTNAME_LABEL: n}, dict(GPU_NODE)) for n in names]
    return build_snapshot(nodes, [], LEVELS)


def _crowd(snap, us: str, pods: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(pods):
        snap.bind(BoundPod("other", f"{us}-p{i}", f"{us}-n{i:02d}", {GPU: 4, "cpu": 1000}))


def _slices_of(snap, placement, size: int) -> list[str]:  # type: ignore[no-untyped-def]
    where = us_of(snap, placement)
    out = []
    for i in range(0, len(where), size):
        assert len(set(where[i : i + size])) == 1, where
        out.append(where[i])
    return out


def _pods(count: int, recorded: tuple[str, ...], **kw: Any) -> list[GangPod]:
    """The ungater's view of a gang of `count` pods admitted into the layer, recorded there."""
    return [
        GangPod(
            "ns",
            f"g-{i}",
            gang="g",
            size=count,
            requests={GPU: 4, "cpu": 1000},
            required_topology=NN,
            slice_domains=recorded,
            index=i,
            **kw,
        )
        for i in range(count)
    ]


def test_the_check_records_where_each_slice_was_counted() -> None:
    snap = _layer()
    _crowd(snap, "us-1", 2)
    gang = dataclasses.replace(sliced(4, 2, required_topology=NN), name="g")
    decision = decide(snap, gang, "g", PlacementPolicy())
    assert decision.ready and decision.placement is not None
    [update] = decision.pod_set_updates
    counted = _slices_of(snap, decision.placement, 2)
    assert parse_slice_domains(update.annotations[SLICE_DOMAINS_ANNOTATION], "f") == tuple(counted)
    assert update.node_selector == {NN: "nn-a"}  # the pod's selector still names the wide domain
    # the check's message (and log line) says the record, to trace a gang pinned elsewhere
    assert decision.message.endswith(f"[{NN}=nn-a; recorded main: {format_slice_domains(tuple(counted))}]")


def test_a_gang_in_one_ultraserver_records_none() -> None:
    snap = _layer()
    gang = Gang((PodSet("main", 4, {GPU: 4, "cpu": 1000}, required_topology=US),), "g")
    [update] = decide(snap, gang, "g", PlacementPolicy()).pod_set_updates
    assert SLICE_DOMAINS_ANNOTATION not in update.annotations


def test_recorded_slices_are_placed_there_though_best_fit_would_go_elsewhere() -> None:
    snap = _layer()
    _crowd(snap, "us-1", 2)
    gang = sliced(4, 2, required_topology=NN, slice_domains=("us-4", "us-3"))
    free = place(snap, sliced(4, 2, required_topology=NN))
    assert _slices_of(snap, free, 2) == ["us-2", "us-2"]  # on its own, best fit goes elsewhere
    recorded = place(snap, gang)
    assert recorded.feasible and recorded.level == NN and recorded.domains == ("nn-a",)
    assert _slices_of(snap, recorded, 2) == ["us-4", "us-3"]
    assert [(a.pod_set, a.index) for a in recorded.assignments] == [("main", i) for i in range(4)]


def test_a_recorded_slice_that_no_longer_fits_is_placed_anew() -> None:
    snap = _layer()
    _crowd(snap, "us-4", 3)  # us-4 keeps room for 1 pod: its recorded slice of 2 is gone
    recorded = place(snap, sliced(4, 2, required_topology=NN, slice_domains=("us-4", "us-3")))
    assert recorded.feasible
    assert "us-4" not in _slices_of(snap, recorded, 2)
    # said where the ungater logs its pins: another gang may have been counted where it went
    assert recorded.reason.startswith("the check's record (main: us-4,us-3) no longer fits; placed anew: ")


def test_recorded_slices_no_longer_apply_once_pods_are_bound() -> None:
    gang = sliced(4, 2, required_topology=NN, slice_domains=("us-4", "us-3"))
    assert split(gang, LEVELS) is not None
    assert split(remaining(gang, {"main": 2}), LEVELS) is None  # 2 pods left: the record is of 4


def test_the_promise_holds_the_recorded_slices_under_the_names_it_is_released_by() -> None:
    snap = _layer()
    gang = dataclasses.replace(sliced(4, 2, required_topology=NN, slice_domains=("us-2", "us-4")), name="g")
    assert promise(snap, gang, "ns", PlacementPolicy()) == 4
    held = [snap.node_of("ns", name) for name in promised_pods(gang)]
    assert [snap.nodes[i].labels[US] for i in held if i is not None] == ["us-2", "us-2", "us-4", "us-4"]


def test_the_ungater_s_plan_puts_the_slices_where_they_were_counted() -> None:
    snap = _layer()
    _crowd(snap, "us-1", 2)
    pods = _pods(4, ("us-4", "us-3"), slices=(2, US, None))
    plan = plan_gang(snap, pods[0], pods, PlacementPolicy(), keep_bound=True)
    assert plan.feasible, plan.reason
    where = [snap.node(s.node).labels[US] for s in plan.slots]
    assert where == ["us-4", "us-4", "us-3", "us-3"]


def test_a_malformed_record_is_refused_with_the_field() -> None:
    with pytest.raises(InputError, match="slice-domains"):
        parse_slice_domains("us-1,,us-2", f"metadata.annotations.{SLICE_DOMAINS_ANNOTATION}")
    assert parse_slice_domains("us-1, us-2", "f") == ("us-1", "us-2")
    for bad in ("us-1*0", "us-1*x", "*3", "us-1*"):
        with pytest.raises(InputError, match="domain\\*count"):
            parse_slice_domains(bad, "f")


# -- a gang not in slices, admitted wider than an UltraServer ------------------------------------


def _wide(count: int, domains: tuple[str, ...] = ()) -> Gang:
    return Gang(
        (PodSet("main", count, {GPU: 4, "cpu": 1000}, required_topology=NN, slice_domains=domains),), "g"
    )


def test_a_gang_admitted_wider_than_an_ultraserver_records_its_pods_ultraservers() -> None:
    snap = _layer()
    _crowd(snap, "us-1", 2)
    decision = decide(snap, _wide(6), "g", PlacementPolicy())
    assert decision.ready and decision.placement is not None and decision.placement.level == NN
    [update] = decision.pod_set_updates
    raw = update.annotations[SLICE_DOMAINS_ANNOTATION]
    where = us_of(snap, decision.placement)
    assert sorted(parse_slice_domains(raw, "f")) == sorted(where)
    assert raw.count(",") == len(set(where)) - 1  # one item a domain: "us-1*2,us-2*4"
    assert update.node_selector == {NN: "nn-a"}


def test_recorded_pods_are_placed_there_though_best_fit_would_go_elsewhere() -> None:
    snap = _layer()
    _crowd(snap, "us-1", 2)
    on_its_own = us_of(snap, place(snap, _wide(6)))
    recorded = ("us-4",) * 4 + ("us-3",) * 2
    assert sorted(on_its_own) != sorted(recorded)
    placed = place(snap, _wide(6, recorded))
    assert placed.feasible and placed.level == NN
    assert sorted(us_of(snap, placed)) == sorted(recorded)
    assert [(a.pod_set, a.index) for a in placed.assignments] == [("main", i) for i in range(6)]
    assert format_slice_domains(recorded) == "us-4*4,us-3*2"


def test_recorded_pods_where_there_is_no_longer_room_are_placed_anew() -> None:
    snap = _layer()
    _crowd(snap, "us-4", 3)
    placed = place(snap, _wide(6, ("us-4",) * 4 + ("us-3",) * 2))
    assert placed.feasible
    assert us_of(snap, placed).count("us-4") <= 1
    assert "record (main: us-4*4,us-3*2) no longer fits; placed anew" in placed.reason
    assert "no longer fits" not in place(snap, _wide(6, ("us-1",) * 4 + ("us-2",) * 2)).reason
    assert split(remaining(_wide(6, ("us-4",) * 6), {"main": 1}), LEVELS) is None


def test_the_promise_and_the_ungater_s_plan_follow_the_recorded_pods() -> None:
    recorded = ("us-2",) * 2 + ("us-4",) * 4
    snap = _layer()
    assert promise(snap, _wide(6, recorded), "ns", PlacementPolicy()) == 6
    held = [snap.node_of("ns", name) for name in promised_pods(_wide(6, recorded))]
    assert sorted(snap.nodes[i].labels[US] for i in held if i is not None) == sorted(recorded)
    snap = _layer()
    pods = _pods(6, recorded)
    plan = plan_gang(snap, pods[0], pods, PlacementPolicy(), keep_bound=True)
    assert plan.feasible, plan.reason
    assert sorted(snap.node(s.node).labels[US] for s in plan.slots) == sorted(recorded)


def test_the_rest_of_a_gang_pinned_in_part_keeps_the_record_less_where_its_pinned_pods_are() -> None:
    # While the ungater pins a gang pod by pod, the check promises the rest where it will go: in
    # the recorded UltraServers its pinned pods have not taken yet, not wherever best fit would.
    snap = _layer()
    wide = _wide(6, ("us-2",) * 2 + ("us-4",) * 4)
    rest = remaining(wide, {"main": 3}, snap, {"main": ["us-4-n00", "us-4-n01", "us-2-n00"]})
    (ps,) = rest.podsets
    assert ps.count == 3 and sorted(ps.slice_domains) == ["us-2", "us-4", "us-4"]
    split_rest = split(rest, LEVELS)
    assert split_rest is not None
    assert promise(snap, dataclasses.replace(rest, name="g"), "ns", PlacementPolicy()) == 3
    held = [snap.node_of("ns", name) for name in promised_pods(rest)]
    assert sorted(snap.nodes[i].labels[US] for i in held if i is not None) == ["us-2", "us-4", "us-4"]
    # a pinned pod outside the record: the rest is placed anew (as the ungater would)
    off = remaining(wide, {"main": 1}, snap, {"main": ["us-1-n00"]})
    assert off.podsets[0].slice_domains == () and split(off, LEVELS) is None
    # nothing pinned: the record stands whole; pinned but nodes not given: dropped
    assert remaining(wide, {}, snap).podsets[0].slice_domains == wide.podsets[0].slice_domains
    assert remaining(wide, {"main": 1}).podsets[0].slice_domains == ()


def test_the_rest_of_a_gang_in_slices_keeps_the_slices_not_placed_yet() -> None:
    snap = _layer()
    gang = sliced(6, 2, required_topology=NN, slice_domains=("us-4", "us-3", "us-2"))
    whole_slice = remaining(gang, {"main": 2}, snap, {"main": ["us-3-n00", "us-3-n01"]})
    assert whole_slice.podsets[0].slice_domains == ("us-4", "us-2")
    assert split(whole_slice, LEVELS) is not None
    # half a slice placed: the rest is not whole slices (unsliced, placed pod by pod)
    half = remaining(gang, {"main": 1}, snap, {"main": ["us-3-n00"]})
    assert half.podsets[0].slice_domains == () and half.podsets[0].slice_size in (None, 0)
    # two halves in two slices' domains: whole in count, not in slices
    halves = remaining(gang, {"main": 2}, snap, {"main": ["us-3-n00", "us-4-n00"]})
    assert halves.podsets[0].slice_domains == ()
