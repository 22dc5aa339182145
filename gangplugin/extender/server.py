"""The HTTP(S) endpoints kube-scheduler calls: /filter, /prioritize, /bind.

Bodies are the JSON of `k8s.io/kube-scheduler/extender/v1` (Go field names, no json tags:
`Pod`, `NodeNames`, `FailedNodes`, ...); Go decodes field names case-insensitively, we answer
with the exact names. Bad input gets a 400 with a message, or an `Error` result the scheduler
shows in the pod's events; nothing a caller sends can make a handler crash or hang.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from gangplugin.core.errors import InputError
from gangplugin.core.gangplan import GangPlan, GangPod
from gangplugin.extender.barrier import Barrier
from gangplugin.extender.cache import ExtenderCache
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.server.metrics import EXTENDER_LATENCY

log = logging.getLogger(__name__)

# Called with a plan that names bound pods to abandon (a partial gang that cannot complete).
AbandonFn = Callable[[GangPlan], None]


class BadRequest(Exception):
    pass


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


async def _body(request: web.Request) -> Mapping[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise BadRequest(f"request body is not JSON: {err}") from err
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _get(body: Mapping[str, Any], name: str) -> Any:
    """A field by its Go name, matched case-insensitively as Go's encoding/json does."""
    if name in body:
        return body[name]
    low = name.lower()
    return next((v for k, v in body.items() if k.lower() == low), None)


def parse_args(body: Mapping[str, Any]) -> tuple[GangPod, list[str]]:
    """ExtenderArgs: the pod, and the candidate node names (`NodeNames`, or `Nodes.items`)."""
    pod = _get(body, "Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise BadRequest("ExtenderArgs.Pod is missing or not a Pod object")
    names = _get(body, "NodeNames")
    if names is None:
        nodes = _get(body, "Nodes")
        items = nodes.get("items") if isinstance(nodes, dict) else None
        if not isinstance(items, list):
            raise BadRequest("ExtenderArgs needs NodeNames (nodeCacheCapable: true) or Nodes.items")
        names = [n.get("metadata", {}).get("name") for n in items if isinstance(n, dict)]
    if not isinstance(names, list) or not set(map(type, names)) <= {str}:
        raise BadRequest("ExtenderArgs.NodeNames must be a list of node names")
    return gang_pod_from_k8s(pod), names


class ExtenderHandlers:
    """The verbs as plain functions over parsed bodies (the benchmark drives these directly)."""

    def __init__(self, cache: ExtenderCache, abandon: AbandonFn | None = None) -> None:
        self.cache = cache
        self.abandon = abandon

    def filter(self, body: Mapping[str, Any], now: float) -> dict[str, Any]:
        pod, names = parse_args(body)
        try:
            verdict, plan = self.cache.filter(pod, names, now)
        except InputError as err:
            return {"NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": str(err)}
        if plan is not None and plan.abandon and self.abandon is not None:
            self.abandon(plan)
        return {
            "NodeNames": list(verdict.passed),
            "FailedNodes": verdict.failed,
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }

    def prioritize(self, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        pod, names = parse_args(body)
        if pod.error is not None:
            return [{"Host": n, "Score": 0} for n in names]
        try:
            scored = self.cache.prioritize(pod, names)
        except InputError:
            scored = [(n, 0) for n in names]
        return [{"Host": n, "Score": s} for n, s in scored]


def _binding_args(body: Mapping[str, Any]) -> tuple[str, str, str, str]:
    fields = []
    for name in ("PodNamespace", "PodName", "Node"):
        value = _get(body, name)
        if not isinstance(value, str) or not value:
            raise BadRequest(f"ExtenderBindingArgs.{name} is missing or empty")
        fields.append(value)
    uid = _get(body, "PodUID")
    return fields[0], fields[1], str(uid or ""), fields[2]


def make_app(
    handlers: ExtenderHandlers, barrier: Barrier, clock: Callable[[], float] = time.time
) -> web.Application:
    async def guard(request: web.Request, work: Callable[[Mapping[str, Any]], Any]) -> web.Response:
        start = time.perf_counter()
        try:
            body = await _body(request)
            result = work(body)
            if asyncio.iscoroutine(result):
                result = await result
            return _json(result)
        except BadRequest as err:
            return _json({"Error": str(err)}, status=400)
        except Exception as err:  # never a 500 without a message, never a dead server
            log.exception("extender %s failed", request.path)
            return _json({"Error": f"extender {request.path} failed: {err}"}, status=400)
        finally:
            EXTENDER_LATENCY.labels(request.path.lstrip("/")).observe(time.perf_counter() - start)

    async def filter_(request: web.Request) -> web.Response:
        return await guard(request, lambda b: handlers.filter(b, clock()))

    async def prioritize(request: web.Request) -> web.Response:
        return await guard(request, handlers.prioritize)

    async def bind(request: web.Request) -> web.Response:
        async def work(body: Mapping[str, Any]) -> dict[str, str]:
            return {"Error": await barrier.bind(*_binding_args(body))}

        return await guard(request, work)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.add_routes(
        [web.post("/filter", filter_), web.post("/prioritize", prioritize), web.post("/bind", bind)]
    )
    return app


async def serve(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None
) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    return runner
