"""`gangplugin serve --components ...,console`: the web console, on every replica (it reads the
watch caches and writes nothing of its own; a GangPolicy edit is the user's own request).

It serves HTTPS only: it receives users' tokens. Off by default (not in `serve`'s default
components); the Helm chart's `console.enabled` turns it on with the Service
`gangplugin-console`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import cast

from gangplugin.console.app import make_app
from gangplugin.console.caches import CacheSource
from gangplugin.console.live import Changes
from gangplugin.console.web import Console
from gangplugin.kube.access import AccessReviews
from gangplugin.runtime.asgi import App, serve_in_thread
from gangplugin.runtime.components import Runtime

needs_leader = False


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    bind: str = "0.0.0.0:8444"
    tls_cert: str | None = None
    tls_key: str | None = None


_settings = {"console": ConsoleSettings()}
_sources: dict[int, CacheSource] = {}


def configure(settings: ConsoleSettings) -> None:
    """Where the console listens and its certificate (from `serve --console-*`)."""
    if not settings.tls_cert or not settings.tls_key:
        raise ValueError(
            "--console-tls-cert and --console-tls-key are required: the console receives users' "
            "tokens and serves HTTPS only"
        )
    _settings["console"] = settings


def setup(runtime: Runtime) -> None:
    _sources[id(runtime)] = CacheSource(runtime)  # asks for its caches now, before they start


def start(runtime: Runtime) -> None:
    source = _sources.pop(id(runtime))
    settings = _settings["console"]
    if not settings.tls_cert or not settings.tls_key:
        raise RuntimeError("console: no TLS certificate configured (--console-tls-cert, --console-tls-key)")
    reviews = AccessReviews(runtime.client)

    def app() -> App:  # on the server's own loop, where the streams wait for changes
        changes = Changes(asyncio.get_event_loop())
        source.subscribe(changes.publish)
        # Starlette types its ASGI messages as MutableMappings; granian passes them as dicts.
        return cast(App, make_app(Console(source, reviews, runtime.client, changes)))

    serve_in_thread("console", settings.bind, settings.tls_cert, settings.tls_key, app, runtime.fail)
