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
from collections.abc import Callable, Mapping
from typing import Any

from gangplugin.core.errors import InputError
from gangplugin.core.gangplan import GangPlan, GangPod
from gangplugin.extender.barrier import Barrier
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import AdmissionUnseen, GangReservations
from gangplugin.runtime.asgi import App, BadRequest, Receive, Send, read_json, respond_json
from gangplugin.runtime.metrics import EXTENDER_LATENCY

log = logging.getLogger(__name__)

# Called with a plan that names bound pods to abandon (a partial gang that cannot complete).
AbandonFn = Callable[[GangPlan], None]


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

    def __init__(self, reservations: GangReservations, abandon: AbandonFn | None = None) -> None:
        self.reservations = reservations
        self.abandon = abandon

    def filter(self, body: Mapping[str, Any], now: float) -> dict[str, Any]:
        pod, names = parse_args(body)
        try:
            verdict, plan = self.reservations.filter(pod, names, now)
        except (InputError, AdmissionUnseen) as err:  # an Error: the scheduler retries after backoff
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
            scored = self.reservations.prioritize(pod, names)
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


VERBS = ("filter", "prioritize", "bind")


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
            result = work(await read_json(receive))
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
        await respond_json(send, status, result)
        if status != 404:
            EXTENDER_LATENCY.labels(scope["path"].lstrip("/")).observe(time.perf_counter() - start)

    return app
