"""The Runtime's liveness: it fails when a watch thread dies, and only then; a thread that other
code starts while the informers start (a health probe's request) is none of its business."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gangplugin.kube.client import NODES, PODS
from gangplugin.kube.informer import wait_all_synced
from gangplugin.runtime.components import Runtime
from tests.support.fakeapi import FakeApi, wait_until


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    yield fake
    fake.closed.set()


def test_a_thread_started_alongside_the_informers_ending_does_not_fail_liveness(api: FakeApi) -> None:
    runtime = Runtime(api.client())
    pods, nodes = runtime.informer(PODS), runtime.informer(NODES)
    release = threading.Event()
    bystander = threading.Thread(target=release.wait, name="process_request_thread")
    start_pods = pods.start

    def start_with_a_bystander() -> threading.Thread:
        bystander.start()  # as a probe's request thread would, between the informers' starts
        return start_pods()

    pods.start = start_with_a_bystander  # type: ignore[method-assign]
    runtime.start_informers()
    release.set()
    bystander.join(5)
    assert runtime.live() == (True, "ok")

    nodes.stop()
    api.closed.set()  # ends the idle watches, so the stopped informer's thread returns now
    assert wait_until(lambda: not runtime.live()[0], 10)
    assert runtime.live() == (False, "threads stopped: informer-nodes")
    pods.stop()


def test_dispatchers_and_shared_objects_are_one_per_name_and_their_threads_are_vital(api: FakeApi) -> None:
    runtime = Runtime(api.client())
    assert runtime.dispatcher("a") is runtime.dispatcher("a") is not runtime.dispatcher("b")
    made: list[object] = []
    first = runtime.shared("thing", lambda: made.append(object()) or made[-1])
    assert runtime.shared("thing", lambda: made.append(object()) or made[-1]) is first and len(made) == 1
    seen: list[str] = []
    api.set({"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "2"}})
    runtime.informer(PODS).add_handler(
        lambda _k, _o, new: seen.append(new["metadata"]["name"]), runtime.dispatcher("a")
    )
    runtime.start_informers()
    assert wait_all_synced(runtime.informers(), 5) and seen == ["p"]  # synced: handled, too
    assert runtime.live() == (True, "ok")
    runtime.dispatcher("b").stop()
    assert wait_until(lambda: not runtime.live()[0], 10)
    assert runtime.live() == (False, "threads stopped: dispatch-b")
    runtime.dispatcher("a").stop()
    runtime.informer(PODS).stop()


def test_caches_of_one_resource_under_two_transforms_share_one_list_and_watch(api: FakeApi) -> None:
    runtime = Runtime(api.client())
    api.set({"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "2"}})
    raw = runtime.informer(PODS)
    names = runtime.informer(PODS, lambda p: p["metadata"]["name"])
    other_ns = runtime.informer(PODS, namespace="team-a")
    assert runtime.informer(PODS, raw._transform) is raw and names is not raw
    runtime.start_informers()
    assert wait_all_synced(runtime.informers(), 5)
    assert names.items() == ["p"] and raw.items()[0]["metadata"]["name"] == "p"
    assert names.start() is raw._thread is not other_ns._thread  # a follower starts no thread of its own
    listed = [r.url.path for r in api.calls("list")]
    assert sorted(listed) == ["/api/v1/namespaces/team-a/pods", "/api/v1/pods"]  # not one per transform
    for inf in (raw, other_ns):
        inf.stop()
