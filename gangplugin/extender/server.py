"""The HTTP(S) endpoints kube-scheduler calls: /filter, /prioritize, /bind.

Bodies are the JSON of `k8s.io/kube-scheduler/extender/v1` (Go field names, no json tags:
`Pod`, `NodeNames`, `FailedNodes`, ...); Go decodes field names case-insensitively, we answer
with the exact names. Bad input gets a 400 with a message, or an `Error` result the scheduler
shows in the pod's events; nothing a caller sends can make a handler crash or hang.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
from granian.constants import Interfaces
from granian.log import LogLevels
from granian.server.embed import Server

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


# ASGI (no lifespan): scope, receive, send
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

MAX_BODY = 64 * 1024 * 1024  # ExtenderArgs with full Node objects (nodeCacheCapable: false) are big
VERBS = ("filter", "prioritize", "bind")


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":  # the caller went away
            raise BadRequest("request aborted")
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise BadRequest(f"request body is larger than {MAX_BODY} bytes")
        chunks.append(chunk)
        if not msg.get("more_body"):
            return b"".join(chunks)


def _parse(raw: bytes) -> Mapping[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise BadRequest(f"request body is not JSON: {err}") from err
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def make_app(handlers: ExtenderHandlers, barrier: Barrier, clock: Callable[[], float] = time.time) -> App:
    """The verbs as an ASGI application: POST /filter, /prioritize and /bind."""

    async def bind(body: Mapping[str, Any]) -> dict[str, str]:
        return {"Error": await barrier.bind(*_binding_args(body))}

    work_of: dict[str, Callable[[Mapping[str, Any]], Any]] = {
        "/filter": lambda b: handlers.filter(b, clock()),
        "/prioritize": handlers.prioritize,
        "/bind": bind,
    }

    async def answer(scope: dict[str, Any], receive: Receive) -> tuple[int, Any]:
        path = scope["path"]
        work = work_of.get(path)
        if work is None or scope["method"] != "POST":
            verbs = ", ".join(f"/{v}" for v in VERBS)
            return 404, {"Error": f"{scope['method']} {path}: the extender serves POST {verbs}"}
        try:
            result = work(_parse(await _read_body(receive)))
            if asyncio.iscoroutine(result):
                result = await result
            return 200, result
        except BadRequest as err:
            return 400, {"Error": str(err)}
        except Exception as err:  # never a 500 without a message, never a dead server
            log.exception("extender %s failed", path)
            return 400, {"Error": f"extender {path} failed: {err}"}

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        start = time.perf_counter()
        status, result = await answer(scope, receive)
        body = orjson.dumps(result)
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        if status != 404:
            EXTENDER_LATENCY.labels(scope["path"].lstrip("/")).observe(time.perf_counter() - start)

    return app


# granian logs through the process's logging (JSON or text, as `serve` set it up), errors only:
# its startup banner ("Embedded server is experimental!") is not news to an operator.
_GRANIAN_LOGGING: dict[str, Any] = {
    "loggers": {
        "_granian": {"level": "ERROR", "propagate": True},
        "granian.access": {"level": "ERROR", "propagate": True},
    }
}


async def serve(app: App, host: str, port: int, tls: tuple[str, str] | None) -> asyncio.Task[None]:
    """Serve `app` on the running loop with granian (embedded): TLS, HTTP/1.1 and HTTP/2 are
    handled in Rust threads, off the GIL, and kube-scheduler's Go client multiplexes every
    call over one HTTP/2 connection. (Over HTTP/1.1 it keeps two idle connections, so each
    gang's concurrent bind calls cost fresh TLS handshakes, which slowed scheduling by half.)
    Returns the server's task once it listens; raises if it cannot start."""
    cert, key = (Path(tls[0]), Path(tls[1])) if tls else (None, None)
    try:
        server = Server(
            app,
            address=host,
            port=port,
            interface=Interfaces.ASGINL,
            websockets=False,
            backlog=1024,
            log_level=LogLevels.error,
            log_dictconfig=_GRANIAN_LOGGING,
            ssl_cert=cert,
            ssl_key=key,
        )
    except OSError as err:  # ssl.SSLError among them: a certificate or key that does not load
        raise RuntimeError(f"extender could not serve on {host}:{port}: TLS certificate/key: {err}") from err
    listening = asyncio.Event()
    server.on_startup(listening.set)
    task = asyncio.get_running_loop().create_task(server.serve(), name=f"extender-{host}:{port}")
    waiter = asyncio.ensure_future(listening.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    await asyncio.sleep(0.05)  # a worker that cannot start ends the task at once
    if task.done():
        why = task.exception() or "the server stopped"
        raise RuntimeError(f"extender could not serve on {host}:{port}: {why}")
    return task
