"""The bind barrier: a gang's pods are bound only once every one of them has a node.

kube-scheduler calls `bind` for each pod from its own binding goroutine, so members wait here
concurrently (asyncio futures, no thread per waiter). When the last member arrives (members
already bound count too: a gang completed after a restart; the waiters also look again every
second, for a member bound without waiting here), every waiting member is bound
through the Binding API at once, in parallel, so a crash can only fall in the few milliseconds
between those calls; the reservations then see a partial gang and completes it or abandons it
(`core.gangplan.plan_gang`). If the gang is not complete within the timeout (shorter than the
scheduler's httpTimeout), every waiter gets an error, none is bound, the plan is dropped, and
the scheduler retries them.

Pods the ungater pinned (bindMode Ungate, PodGroup) are bound at once: it placed their gang whole
before it removed their gate, and kube-scheduler binds none before that.

Whoever calls `bind`, a pod goes nowhere its own constraints and its gang's plan do not allow:
every call is checked first (`core.gangplan.bind_refusal`), and a refusal is told to the pod's
owner as a Warning Event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import orjson

from gangplugin.core.gangplan import GangKey, GangPod, PodKey, barrier_open
from gangplugin.extender.reservations import GangReservations
from gangplugin.kube.client import HEADERS, ApiError, Client, api_error, observed
from gangplugin.runtime import metrics

log = logging.getLogger(__name__)

# How often a gang's waiters look again whether its other members have been bound meanwhile.
RECHECK_SECONDS = 1.0

# (namespace, name, uid, node) -> None, raises on failure
BindFn = Callable[[str, str, str, str], Awaitable[None]]
# (the pod, why its binding was refused) -> None; must not block the event loop
RefusedFn = Callable[[GangPod, str], None]


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


class ApiBinder:
    """Binding API calls made on the extender's event loop over one keep-alive connection pool:
    no thread per call, so binding a gang does not compete for the GIL with the HTTP handlers
    answering kube-scheduler's filter calls. Each call carries the client's current credentials
    (a rotated token file, a renewed exec token); reading or running them happens in a thread
    when due, so the loop never waits on a file or a plugin."""

    def __init__(self, client: Client, connections: int = 32) -> None:
        self.client = client
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, namespace: str, name: str, uid: str, node: str) -> None:
        if self.client.fence is not None:
            self.client.fence()  # a replica that lost the leader Lease binds nothing more
        if self._session is None:  # made on the loop that uses it
            connector = aiohttp.TCPConnector(ssl=self.client.ssl_context, limit=self.connections)
            self._session = aiohttp.ClientSession(
                headers=HEADERS,
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=30),
            )
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
        credentials = self.client.credentials
        auth = await asyncio.to_thread(credentials.headers) if credentials.stale() else credentials.headers()
        headers = {"Content-Type": "application/json", **auth}
        began = time.monotonic()
        url = self.client.server + path
        async with self._session.post(url, data=orjson.dumps(body), headers=headers) as resp:
            observed("POST", path, str(resp.status), time.monotonic() - began)
            if resp.status == 401 and credentials.refreshable:
                credentials.invalidate()  # the kube-scheduler retries the bind with fresh ones
            if resp.status >= 400:
                raise api_error(resp.status, await resp.read(), resp.headers.get("Retry-After"))


class Barrier:
    """Lives on one event loop; `bind` is awaited by the HTTP handler of each bind call."""

    def __init__(
        self, reservations: GangReservations, binder: BindFn, timeout: float, refused: RefusedFn | None = None
    ) -> None:
        self.reservations = reservations
        self.binder = binder
        self.timeout = timeout
        self.refused = refused  # told of every bind refused for the pod's own sake (an Event)
        self.gangs: dict[GangKey, _Gang] = {}

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Bind the pod (after its whole gang arrives); '' on success, else the error to return."""
        key = (namespace, name)
        with self.reservations.lock:
            pod = self.reservations.pods.get(key)
        if pod is None:
            return f"pod {namespace}/{name} is unknown to the extender (not in its pod cache yet); retry"
        if pod.error is not None:
            return f"pod {namespace}/{name}: {pod.error}"
        refusal = self.reservations.bind_refusal(pod, uid, node)
        if refusal is not None:
            log.warning("%s", refusal)
            if self.refused is not None:
                self.refused(pod, refusal)
            return refusal
        gkey = pod.gang_key
        # A pinned member (bindMode Ungate, PodGroup) needs no barrier: the ungater placed its
        # whole gang. One the reservations still have gated is pinned too: kube-scheduler binds it only
        # once its gate is gone, and the bind can come before the reservations have the pin (the ungater
        # feeds it when its patch returns). Held at the barrier, a lone waiter whose peers were
        # bound straight away waited out the barrier's timeout.
        if gkey is None or pod.size is None or pod.pinned is not None or pod.gated:
            return await self._bind_one(namespace, name, uid, node)
        loop = asyncio.get_running_loop()
        gang = self.gangs.get(gkey)
        if gang is None:
            gang = self.gangs[gkey] = _Gang(pod.size)
            gang.timer = loop.call_later(self.timeout, self._expire, gkey, gang)
            loop.call_later(RECHECK_SECONDS, self._recheck, gkey, gang)
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
        metrics.barrier_waiting(*gkey, len(gang.waiters))
        if barrier_open(gang.size, self.reservations.bound_members(gkey), gang.waiters):
            self._open(gkey, gang)
        return await future

    def _recheck(self, gkey: GangKey, gang: _Gang) -> None:
        """Open the barrier once the members not waiting here are bound: a member the
        reservations did not know as one when its bind came (its gang label or gate not seen
        yet) was bound directly, and no further bind call would come to open it."""
        if self.gangs.get(gkey) is not gang:
            return
        if barrier_open(gang.size, self.reservations.bound_members(gkey), gang.waiters):
            self._open(gkey, gang)
        else:
            asyncio.get_running_loop().call_later(RECHECK_SECONDS, self._recheck, gkey, gang)

    def _expire(self, gkey: GangKey, gang: _Gang) -> None:
        if self.gangs.get(gkey) is not gang:
            return
        del self.gangs[gkey]
        metrics.barrier_waiting(*gkey, 0)
        with self.reservations.lock:
            bound = len(self.reservations.bound_members(gkey))
            self.reservations.drop(gkey)
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
        metrics.barrier_waiting(*gkey, 0)
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
        try:
            await self.binder(namespace, name, uid, node)
        except ApiError as err:
            return f"binding {namespace}/{name} to {node} failed: {err}"
        except Exception as err:
            log.exception("binding %s/%s to %s", namespace, name, node)
            return f"binding {namespace}/{name} to {node} failed: {err}"
        return ""
