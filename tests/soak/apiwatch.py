"""The observer's eyes: its own small Kubernetes API client (httpx, a kubeconfig with a client
certificate or a token), list-and-watch feeds of pods, Workloads and nodes into an `Observer`,
and an RSS sampler of the `gangplugin serve` processes read from /proc.

Like `observer`, it imports nothing of gangplugin (tests/unit/test_soak_observer.py checks):
what it reports must not depend on the code it checks.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.soak.observer import Observer

JSON = dict[str, Any]

FEEDS = {
    "pods": "/api/v1/pods",
    "nodes": "/api/v1/nodes",
    "workloads": "/apis/kueue.x-k8s.io/v1beta2/workloads",
}


class Expired(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class KubeAPI:
    """GET and watch against the current context of one kubeconfig."""

    def __init__(self, kubeconfig: str | os.PathLike[str]) -> None:
        config = yaml.safe_load(Path(kubeconfig).read_text())
        ctx_name = config.get("current-context")
        ctx = next(c["context"] for c in config["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
        user = next((u["user"] for u in config.get("users") or [] if u["name"] == ctx.get("user")), {})
        self._tmp = tempfile.TemporaryDirectory(prefix="soak-observer-")
        ssl_ctx = ssl.create_default_context(cafile=self._file(cluster, "certificate-authority"))
        cert, key = self._file(user, "client-certificate"), self._file(user, "client-key")
        if cert and key:
            ssl_ctx.load_cert_chain(cert, key)
        headers = {"Accept": "application/json"}
        if user.get("token"):
            headers["Authorization"] = f"Bearer {user['token']}"
        self.http = httpx.Client(base_url=cluster["server"], verify=ssl_ctx, headers=headers, timeout=30.0)

    def _file(self, section: JSON, name: str) -> str | None:
        if section.get(name):
            return str(section[name])
        data = section.get(f"{name}-data")
        if not data:
            return None
        path = Path(self._tmp.name) / name
        path.write_bytes(base64.b64decode(data))
        return str(path)

    def close(self) -> None:
        self.http.close()
        self._tmp.cleanup()

    def get(self, path: str, params: dict[str, str] | None = None) -> JSON:
        resp = self.http.get(path, params=params)
        resp.raise_for_status()
        out: JSON = resp.json()
        return out

    def list(self, path: str) -> tuple[list[JSON], str]:
        """Every object (pages of 500) and the list's resourceVersion."""
        items: list[JSON] = []
        params = {"limit": "500"}
        while True:
            page = self.get(path, params)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, str((page.get("metadata") or {}).get("resourceVersion", ""))
            params = {"limit": "500", "continue": token}

    def watch(self, path: str, rv: str) -> Iterator[JSON]:
        # short watches: a feed asked to stop ends within one of them
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "10"}
        with self.http.stream("GET", path, params=params, timeout=httpx.Timeout(30.0, read=40.0)) as resp:
            if resp.status_code == 410:
                raise Expired()
            resp.raise_for_status()
            for line in resp.iter_lines():
                if line:
                    yield json.loads(line)


def object_key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Feed(threading.Thread):
    """One kind, listed then watched into the observer; relisted (deletions inferred) after any
    break: a kube-apiserver restart, a 410, a dropped stream."""

    def __init__(self, api: KubeAPI, kind: str, observer: Observer, stop: threading.Event) -> None:
        super().__init__(name=f"soak-feed-{kind}", daemon=True)
        self.api, self.kind, self.observer, self.stop = api, kind, observer, stop
        self.path = FEEDS[kind]
        self.synced = threading.Event()
        self.known: set[str] = set()
        self.relists = 0
        self.errors: dict[str, int] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                rv = self._relist()
                while not self.stop.is_set():
                    rv = self._watch(rv)
            except Exception as err:  # the feed must outlive any break of the API
                if self.stop.is_set():
                    return
                self.errors[type(err).__name__] = self.errors.get(type(err).__name__, 0) + 1
                self.stop.wait(0.5)

    def _relist(self) -> str:
        items, rv = self.api.list(self.path)
        now = time.time()
        seen = {object_key(o) for o in items}
        for key in sorted(self.known - seen):
            self.observer.update(self.kind, key, None, now)
        for obj in items:
            self.observer.update(self.kind, object_key(obj), obj, now)
        self.known = seen
        self.relists += 1
        self.synced.set()
        return rv

    def _watch(self, rv: str) -> str:
        for event in self.api.watch(self.path, rv):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                raise Expired()
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            if kind == "BOOKMARK":
                continue
            key, now = object_key(obj), time.time()
            if kind == "DELETED":
                self.known.discard(key)
                self.observer.update(self.kind, key, None, now)
            else:
                self.known.add(key)
                self.observer.update(self.kind, key, obj, now)
            if self.stop.is_set():
                break
        return rv


IDENTITY = re.compile(r"--leader-election-identity=(\S+)")


def serve_processes(kubeconfig: str | os.PathLike[str]) -> dict[int, str]:
    """pid -> replica identity of every `gangplugin serve` of this cluster (its kubeconfig on
    the command line), from /proc."""
    marker = f"--kubeconfig={kubeconfig}"
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            words = [a.decode(errors="replace") for a in argv if a]
            if "serve" in words and marker in words and any(w.endswith("gangplugin") for w in words[:3]):
                found = IDENTITY.search(" ".join(words))
                out[int(entry.name)] = found.group(1) if found else "gangplugin"
    return out


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class RssSampler(threading.Thread):
    def __init__(
        self,
        kubeconfig: str | os.PathLike[str],
        observer: Observer,
        stop: threading.Event,
        every: float = 5.0,
    ) -> None:
        super().__init__(name="soak-rss", daemon=True)
        self.kubeconfig, self.observer, self.stop, self.every = kubeconfig, observer, stop, every

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            for pid, name in serve_processes(self.kubeconfig).items():
                rss = rss_bytes(pid)
                if rss is not None:
                    self.observer.rss(name, pid, rss, now)
            self.stop.wait(self.every)


class Ticker(threading.Thread):
    def __init__(self, observer: Observer, stop: threading.Event, every: float = 1.0) -> None:
        super().__init__(name="soak-ticker", daemon=True)
        self.observer, self.stop, self.every = observer, stop, every

    def run(self) -> None:
        while not self.stop.is_set():
            self.observer.tick(time.time())
            self.stop.wait(self.every)


class Eyes:
    """Everything the observer needs running: the feeds, the RSS sampler and the clock."""

    def __init__(self, kubeconfig: str | os.PathLike[str], observer: Observer) -> None:
        self.stop = threading.Event()
        self.api = KubeAPI(kubeconfig)
        self.feeds = [Feed(self.api, kind, observer, self.stop) for kind in FEEDS]
        self.threads: list[threading.Thread] = [
            *self.feeds,
            RssSampler(kubeconfig, observer, self.stop),
            Ticker(observer, self.stop),
        ]

    def start(self, timeout: float = 60.0) -> None:
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + timeout
        for feed in self.feeds:
            if not feed.synced.wait(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"the observer's {feed.kind} feed did not list within {timeout:.0f}s")

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        self.api.close()
