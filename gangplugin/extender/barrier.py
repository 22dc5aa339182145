"""The bind barrier: a gang's pods are bound only once every one of them has a node.

kube-scheduler calls `bind` for each pod from its own binding goroutine, so members wait here
concurrently (asyncio futures, no thread per waiter). When the last member arrives (members
already bound count too: a gang completed after a restart), every waiting member is bound
through the Binding API at once, in parallel, so a crash can only fall in the few milliseconds
between those calls; the cache then sees a partial gang and completes it or abandons it
(`core.gangplan.plan_gang`). If the gang is not complete within the timeout (shorter than the
scheduler's httpTimeout), every waiter gets an error, none is bound, the plan is dropped, and
the scheduler retries them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from gangplugin.core.gangplan import GangKey, PodKey, barrier_open
from gangplugin.extender.cache import ExtenderCache
from gangplugin.kube.client import ApiError, Client

log = logging.getLogger(__name__)

# (namespace, name, uid, node) -> None, raises on failure
BindFn = Callable[[str, str, str, str], None]


@dataclass
class _Waiter:
    uid: str
    node: str
    future: asyncio.Future[str]


@dataclass
class _Gang:
    size: int
    waiters: dict[PodKey, _Waiter] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None


def api_binder(client: Client) -> BindFn:
    def bind(namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        client.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body=body)

    return bind


class Barrier:
    """Lives on one event loop; `bind` is awaited by the HTTP handler of each bind call."""

    def __init__(self, cache: ExtenderCache, binder: BindFn, executor: Executor, timeout: float) -> None:
        self.cache = cache
        self.binder = binder
        self.executor = executor
        self.timeout = timeout
        self.gangs: dict[GangKey, _Gang] = {}

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Bind the pod (after its whole gang arrives); '' on success, else the error to return."""
        key = (namespace, name)
        with self.cache.lock:
            pod = self.cache.pods.get(key)
        if pod is None:
            return f"pod {namespace}/{name} is unknown to the extender (not in its pod cache yet); retry"
        if uid and pod.uid and uid != pod.uid:
            return f"pod {namespace}/{name} has uid {pod.uid}, not {uid}: it was recreated; retry"
        if pod.error is not None:
            return f"pod {namespace}/{name}: {pod.error}"
        gkey = pod.gang_key
        if gkey is None or pod.size is None:
            return await self._bind_one(namespace, name, uid, node)
        loop = asyncio.get_running_loop()
        gang = self.gangs.get(gkey)
        if gang is None:
            gang = self.gangs[gkey] = _Gang(pod.size)
            gang.timer = loop.call_later(self.timeout, self._expire, gkey, gang)
        elif gang.size != pod.size:
            return (
                f"pod {namespace}/{name}: gang-size {pod.size} disagrees with {gang.size} of the other "
                "members waiting at the barrier; give every pod of the gang the same size"
            )
        previous = gang.waiters.get(key)
        if previous is not None and not previous.future.done():
            previous.future.set_result("superseded by a newer bind call for the same pod")
        future: asyncio.Future[str] = loop.create_future()
        gang.waiters[key] = _Waiter(uid, node, future)
        if barrier_open(gang.size, self.cache.bound_members(gkey), gang.waiters):
            self._open(gkey, gang)
        return await future

    def _expire(self, gkey: GangKey, gang: _Gang) -> None:
        if self.gangs.get(gkey) is not gang:
            return
        del self.gangs[gkey]
        with self.cache.lock:
            bound = len(self.cache.bound_members(gkey))
            self.cache.drop(gkey)
        msg = (
            f"gang {gkey[1]}: only {len(gang.waiters) + bound} of {gang.size} pods had a node within "
            f"{self.timeout:g}s; none of the waiting pods was bound, the scheduler retries them"
        )
        log.info("%s/%s", gkey[0], msg)
        for w in gang.waiters.values():
            if not w.future.done():
                w.future.set_result(msg)

    def _open(self, gkey: GangKey, gang: _Gang) -> None:
        del self.gangs[gkey]
        if gang.timer is not None:
            gang.timer.cancel()
        asyncio.get_running_loop().create_task(self._bind_all(gkey, gang))

    async def _bind_all(self, gkey: GangKey, gang: _Gang) -> None:
        waiters = list(gang.waiters.items())
        results = await asyncio.gather(
            *(self._bind_one(ns, name, w.uid, w.node) for (ns, name), w in waiters)
        )
        failed = sum(1 for r in results if r)
        log.info("gang %s/%s: bound %d of %d waiting pods", *gkey, len(waiters) - failed, len(waiters))
        for (_, w), result in zip(waiters, results, strict=True):
            if not w.future.done():
                w.future.set_result(result)

    async def _bind_one(self, namespace: str, name: str, uid: str, node: str) -> str:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.executor, self.binder, namespace, name, uid, node)
        except ApiError as err:
            return f"binding {namespace}/{name} to {node} failed: {err}"
        except Exception as err:
            log.exception("binding %s/%s to %s", namespace, name, node)
            return f"binding {namespace}/{name} to {node} failed: {err}"
        return ""
