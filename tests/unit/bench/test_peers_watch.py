"""bench/peers.py's pod watch from plain events: what it records of each pod it sees."""

import threading

from _peers.systems import volcano_index
from _peers.watch import GANG_LABEL, PodWatch


def _watch() -> PodWatch:
    # the watch's bookkeeping alone, without the thread that reads the API server
    w = object.__new__(PodWatch)
    w.pods, w._lock, w.index_of = {}, threading.Lock(), volcano_index
    return w


def _pod(uid: str, node: str, **meta: object) -> dict[str, object]:
    labels = {GANG_LABEL: "rec1"}
    annotations = {"volcano.sh/task-index": "0"}
    return {
        "metadata": {"name": "rec1-w-0", "uid": uid, "labels": labels, "annotations": annotations, **meta},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running"},
    }


def test_a_pod_made_again_under_the_same_name_is_a_pod_of_its_own():
    w = _watch()
    w._see("ADDED", _pod("a", "failed-node"))
    w._see("DELETED", _pod("a", "failed-node", deletionTimestamp="now"))
    w._see("ADDED", _pod("b", "other-node"))  # a Volcano Job's pod made again keeps its name
    (live,) = w.live("rec1")
    assert live.node == "other-node" and live.running is not None and live.index == 0
    assert sum(1 for s in w.snapshot().values() if s.deleted is not None) == 1
