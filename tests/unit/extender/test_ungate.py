"""bindMode Ungate on plain data: which pods wait behind the placement gate, the pins the cache
plans for a gated gang (whole, next to members already pinned or bound), and how the extender
treats a pinned pod that reaches it."""

from __future__ import annotations

from typing import Any

from gangplugin.core.names import PLACEMENT_GATE
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import GangReservations
from gangplugin.extender.ungater import Ungater, pin_patch
from gangplugin.kube.client import Client
from gangplugin.readmodel.records import node_record
from tests.support.extender import HOST, add, cache_of, pod, ungate_pod
from tests.support.objects import node

US = "topology.k8s.aws/ultraserver-id"


def test_only_ungate_gang_pods_are_gated_or_pinned() -> None:
    gated = gang_pod_from_k8s(ungate_pod("a", "g", 2))
    assert gated.gated and gated.pinned is None and gated.placed is None
    pinned = gang_pod_from_k8s(ungate_pod("b", "g", 2, pinned="n1"))
    assert not pinned.gated and pinned.pinned == "n1" and pinned.placed == "n1" and pinned.node is None
    # A hostname selector a user wrote on an Extender-mode or plain pod is no pin of ours.
    own = pod("c", "g", 2)
    own["spec"]["nodeSelector"] = {HOST: "n1"}
    assert gang_pod_from_k8s(own).pinned is None
    plain = ungate_pod("d", "g", 2, pinned="n1")
    del plain["metadata"]["labels"]["gangplugin.io/gang"]
    assert gang_pod_from_k8s(plain).pinned is None


def test_a_gang_is_pinned_only_once_all_its_pods_exist_and_then_whole_in_one_domain() -> None:
    cache = cache_of({"us-1": 3, "us-2": 4})
    add(cache, ungate_pod("p0", "g", 4), ungate_pod("p1", "g", 4), ungate_pod("p2", "g", 4))
    pins, why = cache.pins(("ns", "g"), now=0.0)
    assert pins == [] and why == "3 of the gang's 4 pods exist; waiting for the rest"
    assert not cache.plans  # nothing reserved for a gang that is not whole
    add(cache, ungate_pod("p3", "g", 4))
    pins, why = cache.pins(("ns", "g"), now=1.0)
    nodes = [n for _, n in pins]
    assert sorted(p.name for p, _ in pins) == ["p0", "p1", "p2", "p3"]
    assert sorted(nodes) == [f"us-2-{i}" for i in range(4)]  # the one UltraServer it fits whole
    # Asked again before the pins show up in the cache: the same nodes, not a second plan.
    again, _ = cache.pins(("ns", "g"), now=2.0)
    assert sorted(again, key=lambda x: x[0].name) == sorted(pins, key=lambda x: x[0].name)


def test_pins_hold_their_nodes_against_other_gangs_until_bound() -> None:
    cache = cache_of({"us-1": 4})
    add(cache, *(ungate_pod(f"a{i}", "a", 2) for i in range(2)))
    pins, _ = cache.pins(("ns", "a"), now=0.0)
    taken = {n for _, n in pins}
    for p, n in pins:  # the pins come back through the watch: each placeholder gives way to the pod
        cache.on_pod("MODIFIED", p, gang_pod_from_k8s(ungate_pod(p.name, "a", 2, pinned=n)))
    assert ("ns", "a") not in cache.plans  # every claim settled: the plan is gone
    add(cache, *(ungate_pod(f"b{i}", "b", 2) for i in range(2)))
    pins_b, _ = cache.pins(("ns", "b"), now=1.0)
    assert {n for _, n in pins_b}.isdisjoint(taken)
    add(cache, *(ungate_pod(f"c{i}", "c", 1) for i in range(1)))
    pins_c, why = cache.pins(("ns", "c"), now=2.0)
    assert pins_c == [] and "cannot be placed whole" in why


def test_a_plan_goes_with_the_last_pod_of_its_gang_though_a_slot_was_never_claimed() -> None:
    """A gang deleted while one of its pods had not reached the extender yet: nothing holds the
    unclaimed slot's node for it any more (the gang check counts it free at once)."""
    cache = cache_of({"us-1": 4})
    members = [pod(f"p{i}", "g", 3) for i in range(3)]
    add(cache, *members)
    for m in members[:2]:  # the third never asks before the gang is deleted
        verdict, _ = cache.filter(gang_pod_from_k8s(m), [f"us-1-{i}" for i in range(4)], now=0.0)
        assert verdict.passed
    assert ("ns", "g") in cache.plans
    for m in members:
        cache.on_pod("DELETED", gang_pod_from_k8s(m), None)
    assert ("ns", "g") not in cache.plans and not cache.reserved_on


def test_after_a_restart_the_gated_rest_joins_the_pinned_members_domain() -> None:
    cache = cache_of({"us-1": 4, "us-2": 4})
    # A previous ungater pinned two pods to us-1 and died; two are still gated.
    add(
        cache,
        ungate_pod("p0", "g", 4, pinned="us-1-0"),
        ungate_pod("p1", "g", 4, pinned="us-1-1"),
        ungate_pod("p2", "g", 4),
        ungate_pod("p3", "g", 4),
    )
    cache.policy_of = lambda ns, gang: (cache.policy, cache.snapshot.levels)  # a Kueue gang
    pins, _ = cache.pins(("ns", "g"), now=0.0)
    assert sorted(p.name for p, _ in pins) == ["p2", "p3"]
    assert {n for _, n in pins} == {"us-1-2", "us-1-3"}


def test_a_pinned_pod_passes_only_its_pin_and_binds_there() -> None:
    cache = cache_of({"us-1": 2})
    obj = ungate_pod("p0", "g", 2, pinned="us-1-1")
    p = gang_pod_from_k8s(obj)
    add(cache, obj)
    verdict, plan = cache.filter(p, ["us-1-0", "us-1-1"], now=0.0)
    assert plan is None and verdict.passed == ("us-1-1",)
    verdict, _ = cache.filter(p, ["us-1-0"], now=0.0)
    assert verdict.passed == () and "pinned this pod to us-1-1" in verdict.failed["us-1-0"]
    assert cache.bind_refusal(p, p.uid, "us-1-1") is None
    assert "plan gives it us-1-1" in (cache.bind_refusal(p, p.uid, "us-1-0") or "")


def test_the_pin_patch_names_the_pod_uid_the_node_and_deletes_only_our_gate() -> None:
    p = gang_pod_from_k8s(ungate_pod("p0", "g", 2))
    assert pin_patch(p, "n7") == {
        "metadata": {"uid": "uid-p0"},
        "spec": {
            "nodeSelector": {HOST: "n7"},
            "schedulingGates": [{"$patch": "delete", "name": PLACEMENT_GATE}],
        },
    }


def test_a_plain_pod_is_kept_off_room_pinned_for_a_gang_until_the_gang_is_bound() -> None:
    cache = cache_of({"us-1": 2})
    pinned = ungate_pod("p0", "g", 1, pinned="us-1-0")
    add(cache, pinned)
    plain = gang_pod_from_k8s(pod("plain"))
    # kube-scheduler knows nothing of the pin and offers both nodes; all 4 GPUs of us-1-0 are pinned.
    verdict, _ = cache.filter(plain, ["us-1-0", "us-1-1"], now=0.0)
    assert verdict.passed == ("us-1-1",) and "reserved for gangs" in verdict.failed["us-1-0"]
    bound = {**pinned, "spec": {**pinned["spec"], "nodeName": "us-1-0"}}
    cache.on_pod("MODIFIED", gang_pod_from_k8s(pinned), gang_pod_from_k8s(bound))
    assert not cache.pinned_on  # bound: kube-scheduler counts it itself now
    cache.on_pod("DELETED", gang_pod_from_k8s(bound), None)
    verdict, _ = cache.filter(plain, ["us-1-0", "us-1-1"], now=1.0)
    assert verdict.passed == ("us-1-0", "us-1-1")


def test_a_pod_recreated_in_a_sliced_gang_joins_the_slice_its_pinned_peers_started() -> None:
    cache = cache_of({"us-1": 4, "us-2": 4})
    cache.policy_of = lambda ns, gang: (cache.policy, cache.snapshot.levels)  # a Kueue gang

    def member(i: int, pinned: str | None = None) -> dict[str, Any]:
        obj = ungate_pod(f"p{i}", "g", 4, pinned=pinned)
        obj["metadata"]["annotations"].update(
            {"gangplugin.io/slice-size": "2", "gangplugin.io/slice-required-topology": US}
        )
        return obj

    # Slices of 2: p0, p1 in us-1, p2 in us-2; p3 (its node failed) is recreated, gated.
    add(cache, member(0, "us-1-0"), member(1, "us-1-1"), member(2, "us-2-0"), member(3))
    pins, why = cache.pins(("ns", "g"), now=0.0)
    assert [(p.name, n.rsplit("-", 1)[0]) for p, n in pins] == [("p3", "us-2")], why


def test_pins_and_bindings_seen_before_their_node_are_charged_when_it_arrives() -> None:
    # After a restart the pod watch may list before the node watch: a pin on a node the cache
    # does not know yet must still hold that node once it is known.
    cache = GangReservations()
    add(cache, ungate_pod("p0", "g", 2, pinned="us-1-0"), pod("b", node_name="us-1-1"))
    for i in range(3):
        cache.on_node("ADDED", None, node_record(node(f"us-1-{i}", "us-1")))
    add(cache, *(ungate_pod(f"q{i}", "h", 1) for i in range(1)))
    pins, _ = cache.pins(("ns", "h"), now=0.0)
    assert [n for _, n in pins] == ["us-1-2"]  # us-1-0 (pinned) and us-1-1 (bound) are full


def test_the_ungater_looks_at_a_gang_whose_pods_are_being_made_later_and_at_once_when_it_is_whole() -> None:
    cache = cache_of({"us-1": 4})
    ungater = Ungater(Client("https://api.test", False), cache, clock=lambda: 0.0, workers=1)
    try:
        for i in range(4):
            obj = gang_pod_from_k8s(ungate_pod(f"p{i}", "g", 4))
            cache.on_pod("ADDED", None, obj)
            ungater.on_pod("ADDED", None, obj)
            if i < 3:  # 1, 2, 3 of 4 made: one look soon, not one each now
                assert ungater.queue.get(timeout=0) is None and len(ungater.queue) == 1
        assert ungater.queue.get(timeout=0) == "ns/g"  # the fourth made it whole
        ungater.queue.done("ns/g")
        pinned = gang_pod_from_k8s(ungate_pod("p0", "g", 4, pinned="us-1-0"))
        cache.on_pod("MODIFIED", cache.pods[pinned.key], pinned)
        ungater.on_pod("MODIFIED", None, pinned)  # pinned now: looked at again (its node may fail)
        assert ungater.queue.get(timeout=0) == "ns/g"
    finally:
        ungater.patcher.shutdown()
