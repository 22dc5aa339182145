"""A thin Kubernetes API client over httpx that speaks raw JSON.

Objects stay plain dicts (parsed with orjson): the hot paths (watch events,
extender calls) never pay for the official client's model classes.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from gangplugin import __version__
from gangplugin.kube.config import ClusterConfig, Credentials, load_config

JSON = dict[str, Any]
# The API server names a writer's fields (managedFields), its audit events and its request metrics
# by this: `gangplugin`, not the HTTP library's default.
USER_AGENT = f"gangplugin/{__version__}"
HEADERS = {"Accept": "application/json", "User-Agent": USER_AGENT}

# Told of every answer: (verb, resource, HTTP code or "error", seconds). The serving process
# registers its metrics here, as client-go's metrics.Register, so this module needs none of its own.
RequestObserver = Callable[[str, str, str, float], None]
_observers: list[RequestObserver] = []


def observe_requests(observer: RequestObserver) -> None:
    _observers.append(observer)


def observed(verb: str, path: str, code: str, seconds: float) -> None:
    """Tell the observers of one answer (`path`: the request's, `resource_of` names it)."""
    if _observers:
        resource = resource_of(path)
        for observer in _observers:
            observer(verb, resource, code, seconds)


def resource_of(path: str) -> str:
    """`pods`, `pods/binding`, `workloads/status`... of an API path (its group, namespace and
    object name left out: a metric's label must not grow with the objects)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    else:
        return "other"  # /version, /metrics, /openapi...
    if len(parts) >= 3 and parts[0] == "namespaces":
        parts = parts[2:]  # namespaced: the namespace's name goes
    if not parts:
        return "other"
    return parts[0] + (f"/{parts[2]}" if len(parts) >= 3 else "")


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status reason and message."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float | None = None) -> None:
        self.status = status
        self.reason = reason
        self.retry_after = retry_after  # seconds the server asked us to wait (429, some 5xx)
        super().__init__(f"{status} {reason}: {message}")


@dataclass(frozen=True, slots=True)
class Resource:
    """Where a kind lives in the API: group/version, plural, namespaced or not."""

    api_version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


NODES = Resource("v1", "nodes", namespaced=False)
PODS = Resource("v1", "pods")
EVENTS = Resource("v1", "events")
NAMESPACES = Resource("v1", "namespaces", namespaced=False)
JOBS = Resource("batch/v1", "jobs")
WORKLOADS = Resource("kueue.x-k8s.io/v1beta2", "workloads")
CLUSTER_QUEUES = Resource("kueue.x-k8s.io/v1beta2", "clusterqueues", namespaced=False)
LOCAL_QUEUES = Resource("kueue.x-k8s.io/v1beta2", "localqueues")


class _Auth(httpx.Auth):
    """The current Authorization header on every request; after a 401, fresh credentials and one
    more try (an exec token or a rotated token file may have been replaced)."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.update(self.credentials.headers())
        response = yield request
        if response.status_code == 401 and self.credentials.refreshable:
            self.credentials.invalidate()
            request.headers.update(self.credentials.headers())
            yield request


class Client:
    """Synchronous client; one connection pool per instance. Every request carries the
    credentials' current header; clients of other libraries (the bind barrier's aiohttp) take
    theirs from the same `credentials`, and call `fence` before a write as `request` does."""

    def __init__(
        self,
        server: str,
        ssl_context: ssl.SSLContext | bool,
        credentials: Credentials | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        server_trust: ssl.SSLContext | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.server = server.rstrip("/")
        self.ssl_context = ssl_context  # for async clients of the same server
        self.credentials = credentials or Credentials()
        self._server_trust = server_trust
        self._transport = transport
        # Called before every write; raises ApiError to refuse it (a replica that lost the
        # leader Lease writes nothing more, whichever thread tries).
        self.fence: Callable[[], None] | None = None
        self._http = httpx.Client(
            base_url=self.server,
            verify=ssl_context,
            headers=HEADERS,
            auth=_Auth(self.credentials),
            timeout=timeout,
            transport=transport,
        )

    @classmethod
    def from_config(cls, config: ClusterConfig, timeout: float = 30.0) -> Client:
        return cls(
            config.server,
            config.ssl_context,
            config.credentials,
            server_trust=config.server_trust,
            timeout=timeout,
        )

    def as_user(self, token: str) -> Client:
        """A client of the same API server that acts as whoever `token` is: the API server
        authenticates and authorizes each of its requests (and its admission webhooks see that
        user). It trusts the server as this one does and never presents this one's client
        certificate, which the API server would take for the caller. Close it after use."""
        trust = self._server_trust if self._server_trust is not None else self.ssl_context
        return Client(self.server, trust, Credentials(token=token), transport=self._transport)

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str] | None = None, timeout: float = 30.0) -> Client:
        """The current context of the kubeconfig(s) (`path`, else $KUBECONFIG, several joined with
        os.pathsep), or the in-cluster ServiceAccount when neither is given and it runs in a pod."""
        return cls.from_config(load_config(path), timeout)

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str | None = None,
        params: dict[str, str] | None = None,
    ) -> JSON:
        if method != "GET" and self.fence is not None:
            self.fence()
        headers = {"Content-Type": content_type or "application/json"} if body is not None else {}
        content = (
            body if isinstance(body, bytes | str) else (orjson.dumps(body) if body is not None else None)
        )
        began = time.monotonic()
        try:
            resp = self._http.request(method, path, content=content, headers=headers, params=params)
        except httpx.HTTPError:
            observed(method, path, "error", time.monotonic() - began)
            raise
        observed(method, path, str(resp.status_code), time.monotonic() - began)
        if resp.status_code >= 400:
            raise api_error(resp.status_code, resp.content, resp.headers.get("Retry-After"))
        return orjson.loads(resp.content) if resp.content else {}

    def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        return self.request("GET", res.path(namespace, name))

    def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> JSON | None:
        return none_if_absent(lambda: self.get(res, name, namespace))

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
    ) -> JSON:
        """Every object, in pages of `limit` when given (`continue` tokens, as client-go's pager);
        a page token that expired mid-way (410) falls back to one unpaginated list.
        `resource_version="0"` lets the API server answer from its watch cache."""
        params = {
            k: v
            for k, v in (
                ("labelSelector", label_selector),
                ("fieldSelector", field_selector),
                ("resourceVersion", resource_version),
                ("limit", str(limit) if limit else None),
            )
            if v
        }
        page = self.request("GET", res.path(namespace), params=params)
        items = list(page.get("items") or [])
        while token := (page.get("metadata") or {}).get("continue"):
            try:
                page = self.request("GET", res.path(namespace), params={**params, "continue": token})
            except ApiError as err:
                if err.status != 410:
                    raise
                params.pop("limit", None)
                return self.request("GET", res.path(namespace), params=params)
            items.extend(page.get("items") or [])
        return {**page, "items": items}

    def create(self, res: Resource, obj: JSON, namespace: str | None = None) -> JSON:
        return self.request("POST", res.path(namespace or obj.get("metadata", {}).get("namespace")), body=obj)

    def apply(self, res: Resource, obj: JSON, *, field_manager: str, force: bool = True) -> JSON:
        """Server-side apply: the object as this field manager wants it."""
        meta = obj["metadata"]
        return self.request(
            "PATCH",
            res.path(meta.get("namespace"), meta["name"]),
            body=obj,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": field_manager, "force": "true" if force else "false"},
        )

    def patch(
        self,
        res: Resource,
        name: str,
        patch: JSON,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        kind: str = "merge",
    ) -> JSON:
        path = res.path(namespace, name) + (f"/{subresource}" if subresource else "")
        ctype = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[kind]
        return self.request("PATCH", path, body=patch, content_type=ctype)

    def delete(
        self, res: Resource, name: str, namespace: str | None = None, *, propagation: str = "Background"
    ) -> JSON | None:
        body = {"propagationPolicy": propagation}
        return none_if_absent(lambda: self.request("DELETE", res.path(namespace, name), body=body))

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
        read_timeout: float | None = None,
    ) -> Iterator[JSON]:
        """Yield watch events ({"type", "object"}) until the server closes the stream; a stream
        silent for `read_timeout` (default: the watch's own timeout + 30 s) raises ReadTimeout."""
        params = {"watch": "1", "timeoutSeconds": str(timeout_seconds), "allowWatchBookmarks": "true"}
        if resource_version:
            params["resourceVersion"] = resource_version
        if label_selector:
            params["labelSelector"] = label_selector
        began = time.monotonic()
        with self._http.stream(
            "GET",
            res.path(namespace),
            params=params,
            timeout=httpx.Timeout(30.0, read=read_timeout or timeout_seconds + 30),
        ) as resp:
            observed("WATCH", res.path(namespace), str(resp.status_code), time.monotonic() - began)
            if resp.status_code >= 400:
                raise api_error(resp.status_code, resp.read(), resp.headers.get("Retry-After"))
            # One event a line. Split as bytes: iter_lines decodes every byte to text first, and
            # orjson reads bytes; on a burst's pod watch that decoding was most of the stream's cost.
            rest = b""
            for chunk in resp.iter_bytes():
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
            if rest.strip():
                yield orjson.loads(rest)


def none_if_absent(call: Callable[[], JSON]) -> JSON | None:
    """What `call` answers, or None where the API server says what it asked for is not there (404)."""
    try:
        return call()
    except ApiError as err:
        if err.status == 404:
            return None
        raise


def api_error(status: int, content: bytes, retry_after: str | None = None) -> ApiError:
    """The ApiError of a non-2xx answer: its Status reason and message when the body is one, and
    the wait the server asked for (Retry-After, or the Status's details.retryAfterSeconds)."""
    wait = _seconds(retry_after)
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return ApiError(status, "", content[:200].decode(errors="replace"), wait)
    if not isinstance(body, dict):
        return ApiError(status, "", str(body)[:200], wait)
    return status_error(body, status, wait)


def status_error(body: JSON, status: int | None = None, retry_after: float | None = None) -> ApiError:
    """The ApiError a Status object describes (a failed request's body, a watch ERROR event's object)."""
    details = body.get("details")
    details = details if isinstance(details, dict) else {}
    wait = retry_after if retry_after is not None else _seconds(details.get("retryAfterSeconds"))
    code = status if status is not None else body.get("code", 500)
    return ApiError(
        int(code) if isinstance(code, int) else 500,
        str(body.get("reason", "")),
        str(body.get("message", "")),
        wait,
    )


def _seconds(value: Any) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None  # an HTTP-date Retry-After: the caller's own backoff applies
