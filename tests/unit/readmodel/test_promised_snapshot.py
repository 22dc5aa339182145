"""A reader off the model's dispatcher (the MultiKueue dispatcher's pass, `gangctl explain`, the
console) takes the bound pods and each admitted gang's placed pods of one moment. Read apart,
the handlers could bind a gang's pods in between: its promise dropped them as placed while the
snapshot did not count them yet, and the nodes they took looked free (a MultiKueue manager
nominated a fifth gang into a worker's UltraServer where a fourth was binding; CI, once)."""

from __future__ import annotations

from gangplugin.core.topology import HOSTNAME_LABEL, ULTRASERVER_LABEL
from gangplugin.kube.client import NODES, PODS
from tests.support import objects
from tests.support.caches import model_of

LEVELS = (ULTRASERVER_LABEL, HOSTNAME_LABEL)


def _pod(i: int, node: str | None = None):  # type: ignore[no-untyped-def]
    return objects.pod(f"g-{i}", gang="g", size=4, uid=f"u{i}", node=node)


def test_pods_bound_while_a_reader_builds_its_snapshot_are_counted_as_placed_or_as_promised() -> None:
    pinned = objects.check_state("gang", "Ready", pinned={ULTRASERVER_LABEL: "us-1"})
    wl = objects.admitted_by_check("g", "ns", objects.podset(4), pinned, resourceVersion="1")
    checks, policies = [objects.admission_check("gang", policy="p")], [objects.gang_policy("p")]
    caches, model = model_of(workloads=[wl], checks=checks, policies=policies)
    for us in ("us-1", "us-2"):
        for i in range(4):
            caches.put(NODES, objects.node(f"{us}-{i}", us))
    caches.put(PODS, _pod(0, node="us-1-0"))
    for i in (1, 2, 3):
        caches.put(PODS, _pod(i))
    build = model.capacity.build

    def build_while_the_rest_bind(levels: tuple[str, ...]):  # type: ignore[no-untyped-def]
        snap = build(levels)
        for i in (1, 2, 3):  # the watch brings the other three bound, on the handlers' thread
            model.pods._apply({"type": "MODIFIED", "object": _pod(i, node=f"us-1-{i}")}, None)
        caches.dispatcher.caught_up(0.5)  # handled now, unless the reader holds them back
        return snap

    model.capacity.build = build_while_the_rest_bind  # type: ignore[method-assign]
    snap = model.promised_snapshot(LEVELS)
    del model.capacity.build
    assert caches.dispatcher.caught_up(10)

    idle = sorted(n.name for i, n in enumerate(snap.nodes) if n is not None and snap.idle(i))
    assert idle == [f"us-2-{i}" for i in range(4)], f"us-1 holds the gang, bound or promised; idle: {idle}"
    # and the handlers went on once the reader was done: all four bound
    assert sorted(p.node for p in model.gang_pods("ns", "g")) == [f"us-1-{i}" for i in range(4)]
