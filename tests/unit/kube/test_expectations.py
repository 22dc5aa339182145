"""A pod this controller deleted stays out of what a reconcile sees until the watch shows the
deletion: a reconcile woken in between must not act on the pod a second time."""

from __future__ import annotations

from typing import Any

from gangplugin.kube.expectations import DeletionExpectations
from gangplugin.readmodel.records import pod_record
from tests.support import objects


def pod_active(pod: dict[str, Any]) -> bool:
    return pod_record(pod).active


def uid(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["uid"])


def pod(uid: str, deleting: bool = False) -> dict[str, Any]:
    deletion = {"deletionTimestamp": "2026-11-30T12:00:00Z"} if deleting else {}
    return objects.pod(f"p-{uid}", phase="Running", uid=uid, **deletion)


def test_a_deleted_pod_is_hidden_until_the_watch_shows_it_deleting() -> None:
    exp = DeletionExpectations(ttl=60)
    exp.expect("a", now=0)
    # the watch has not caught up: the pod still looks active, and is left out
    assert exp.visible([pod("a"), pod("b")], uid, pod_active, now=1) == [pod("b")]
    # the watch shows the deletion: from then on the pod is as the watch says
    assert exp.visible([pod("a", deleting=True), pod("b")], uid, pod_active, now=2) == [
        pod("a", deleting=True),
        pod("b"),
    ]
    assert len(exp) == 0
    # a pod of the same uid seen active again later is not hidden any more
    assert exp.visible([pod("a")], uid, pod_active, now=3) == [pod("a")]


def test_an_expectation_ends_after_its_ttl() -> None:
    exp = DeletionExpectations(ttl=60)
    exp.expect("a", now=0)
    assert exp.visible([pod("a")], uid, pod_active, now=59.9) == []
    assert exp.visible([pod("a")], uid, pod_active, now=60) == [pod("a")]
    assert len(exp) == 0


def test_a_pod_gone_before_its_deletion_showed_does_not_hide_others() -> None:
    exp = DeletionExpectations(ttl=60)
    exp.expect("gone", now=0)
    assert exp.visible([pod("b"), pod("c")], uid, pod_active, now=1) == [pod("b"), pod("c")]
    assert len(exp) == 1  # kept until its ttl: the watch may still deliver it
