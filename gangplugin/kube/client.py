"""A thin Kubernetes API client over httpx that speaks raw JSON.

Objects stay plain dicts (parsed with orjson): the hot paths (watch events,
extender calls) never pay for the official client's model classes.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

JSON = dict[str, Any]

_IN_CLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
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


def _materialize(data_b64: str | None, path: str | None, suffix: str) -> str | None:
    """kubeconfig carries credentials inline or as paths; ssl wants paths."""
    if path:
        return path
    if not data_b64:
        return None
    f = tempfile.NamedTemporaryFile(prefix="gangplugin-", suffix=suffix, delete=False)  # noqa: SIM115
    f.write(base64.b64decode(data_b64))
    f.close()
    return f.name


class Client:
    """Synchronous client; one connection pool per instance."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext | bool, token: str | None = None) -> None:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.server = server.rstrip("/")
        self.ssl_context, self.headers = ssl_context, headers  # for async clients of the same server
        self._http = httpx.Client(base_url=self.server, verify=ssl_context, headers=headers, timeout=30.0)

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str] | None = None) -> Client:
        """Load the current context of a kubeconfig (client certificate or token auth),
        or the in-cluster service account when no kubeconfig is given or found."""
        path = path or os.environ.get("KUBECONFIG")
        if not path and (_IN_CLUSTER_DIR / "token").exists():
            return cls.in_cluster()
        cfg_path = Path(path or Path.home() / ".kube" / "config")
        cfg = yaml.safe_load(cfg_path.read_text())
        ctx_name = cfg.get("current-context")
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user: dict[str, Any] = next(
            (u["user"] for u in cfg.get("users", []) if u["name"] == ctx.get("user")), {}
        )
        if cluster.get("insecure-skip-tls-verify"):
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            ca = _materialize(
                cluster.get("certificate-authority-data"), cluster.get("certificate-authority"), ".crt"
            )
            context = ssl.create_default_context(cafile=ca)
        cert = _materialize(user.get("client-certificate-data"), user.get("client-certificate"), ".crt")
        key = _materialize(user.get("client-key-data"), user.get("client-key"), ".key")
        if cert and key:
            context.load_cert_chain(cert, key)
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token = Path(user["tokenFile"]).read_text().strip()
        return cls(cluster["server"], context, token)

    @classmethod
    def in_cluster(cls) -> Client:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        context = ssl.create_default_context(cafile=str(_IN_CLUSTER_DIR / "ca.crt"))
        token = (_IN_CLUSTER_DIR / "token").read_text().strip()
        return cls(f"https://{host}:{port}", context, token)

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
        headers = {"Content-Type": content_type or "application/json"} if body is not None else {}
        content = (
            body if isinstance(body, bytes | str) else (orjson.dumps(body) if body is not None else None)
        )
        resp = self._http.request(method, path, content=content, headers=headers, params=params)
        if resp.status_code >= 400:
            raise api_error(resp.status_code, resp.content)
        return orjson.loads(resp.content) if resp.content else {}

    def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        return self.request("GET", res.path(namespace, name))

    def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> JSON | None:
        try:
            return self.get(res, name, namespace)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> JSON:
        params = {
            k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v
        }
        return self.request("GET", res.path(namespace), params=params)

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
        try:
            return self.request("DELETE", res.path(namespace, name), body={"propagationPolicy": propagation})
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
    ) -> Iterator[JSON]:
        """Yield watch events ({"type", "object"}) until the server closes the stream."""
        params = {"watch": "1", "timeoutSeconds": str(timeout_seconds), "allowWatchBookmarks": "true"}
        if resource_version:
            params["resourceVersion"] = resource_version
        if label_selector:
            params["labelSelector"] = label_selector
        with self._http.stream(
            "GET", res.path(namespace), params=params, timeout=httpx.Timeout(30.0, read=timeout_seconds + 30)
        ) as resp:
            if resp.status_code >= 400:
                raise api_error(resp.status_code, resp.read())
            for line in resp.iter_lines():
                if line:
                    yield orjson.loads(line)


def api_error(status: int, content: bytes) -> ApiError:
    """The ApiError of a non-2xx answer: its Status reason and message when the body is one."""
    try:
        body = orjson.loads(content)
        return ApiError(status, body.get("reason", ""), body.get("message", ""))
    except orjson.JSONDecodeError:
        return ApiError(status, "", content[:200].decode(errors="replace"))
