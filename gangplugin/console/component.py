"""`gangplugin serve --components ...,console`: the web console, on every replica (it reads the
read model and writes nothing of its own; a GangPolicy edit is the user's own request).

It serves HTTPS only: it receives users' tokens. Off by default (not in `serve`'s default
components); the Helm chart's `console.enabled` turns it on with the Service
`gangplugin-console`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import cast

from gangplugin.console.app import make_app
from gangplugin.console.from_model import ReadModelSource
from gangplugin.console.live import Changes
from gangplugin.console.web import Console
from gangplugin.kube.access import AccessReviews
from gangplugin.runtime.asgi import App, serve_in_thread
from gangplugin.runtime.components import Runtime


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsoleSettings:
    """Where the console listens and its certificate (from `serve --console-*`)."""

    bind: str = "0.0.0.0:8444"
    tls_cert: str | None = None
    tls_key: str | None = None


class WebConsole:
    needs_leader: bool = False  # every replica serves it: it only reads

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.source: ReadModelSource | None = None

    def setup(self, runtime: Runtime) -> None:
        self.source = ReadModelSource(runtime)  # follows the read model from its first list

    def start(self, runtime: Runtime) -> None:
        source, settings = self.source, self.settings
        assert source is not None, "setup first"
        if not settings.tls_cert or not settings.tls_key:
            raise RuntimeError("console: no TLS certificate (--console-tls-cert, --console-tls-key)")
        reviews = AccessReviews(runtime.client)

        def app() -> App:  # on the server's own loop, where the streams wait for changes
            changes = Changes(asyncio.get_event_loop())
            source.subscribe(changes.publish)
            # Starlette types its ASGI messages as MutableMappings; granian passes them as dicts.
            return cast(App, make_app(Console(source, reviews, runtime.client, changes)))

        serve_in_thread("console", settings.bind, settings.tls_cert, settings.tls_key, app, runtime.fail)
