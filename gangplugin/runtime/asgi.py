"""Serving ASGI applications (no lifespan) with granian, embedded in the running asyncio loop:
TLS, HTTP/1.1 and HTTP/2 are handled in Rust threads, off the GIL. The extender and the
admission webhook both serve this way, with JSON bodies in and out."""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
from granian.constants import Interfaces
from granian.log import LogLevels
from granian.server.embed import Server

log = logging.getLogger(__name__)

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

MAX_BODY = 64 * 1024 * 1024  # ExtenderArgs with full Node objects (nodeCacheCapable: false) are big


class BadRequest(Exception):
    """The request cannot be understood: answered with 400 and this message."""


async def read_json(receive: Receive, limit: int = MAX_BODY) -> Mapping[str, Any]:
    """The request body as a JSON object."""
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":  # the caller went away
            raise BadRequest("request aborted")
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BadRequest(f"request body is larger than {limit} bytes")
        chunks.append(chunk)
        if not msg.get("more_body"):
            break
    try:
        body = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as err:
        raise BadRequest(f"request body is not JSON: {err}") from err
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


async def respond_json(send: Send, status: int, obj: Any) -> None:
    body = orjson.dumps(obj)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# granian logs through the process's logging (JSON or text, as `serve` set it up), errors only:
# its startup banner ("Embedded server is experimental!") is not news to an operator.
_GRANIAN_LOGGING: dict[str, Any] = {
    "loggers": {
        "_granian": {"level": "ERROR", "propagate": True},
        "granian.access": {"level": "ERROR", "propagate": True},
    }
}


async def serve(
    app: App, host: str, port: int, tls: tuple[str, str] | None, client_ca: str | None = None
) -> asyncio.Task[None]:
    """Serve `app` on the running loop; returns the server's task once it listens, raises
    RuntimeError naming the address when it cannot. Go clients (kube-scheduler, the API
    server) multiplex their calls over one HTTP/2 connection; over HTTP/1.1 kube-scheduler
    keeps two idle connections, so a gang's concurrent bind calls each cost a TLS handshake,
    which slowed scheduling by half.

    With `client_ca` (needs `tls`), mutual TLS: the TLS handshake (rustls, in granian) refuses
    a client that presents no certificate signed by that CA, so no request of it reaches `app`.
    granian 2.8 does not pass the client's certificate on to the application (no ASGI TLS
    extension), so the CA itself decides who may call: give it one that signs only them."""
    if client_ca is not None and tls is None:
        raise RuntimeError(f"could not serve on {host}:{port}: a client CA needs a TLS certificate and key")
    cert, key = (Path(tls[0]), Path(tls[1])) if tls else (None, None)
    try:
        if client_ca is not None:  # rustls reads it in a worker thread, where an error is only logged
            ssl.create_default_context(cafile=client_ca)
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
            ssl_ca=Path(client_ca) if client_ca else None,
            ssl_client_verify=client_ca is not None,
        )
    except OSError as err:  # ssl.SSLError among them: a certificate or key that does not load
        raise RuntimeError(f"could not serve on {host}:{port}: TLS certificate/key/client CA: {err}") from err
    listening = asyncio.Event()
    server.on_startup(listening.set)
    task = asyncio.get_running_loop().create_task(server.serve(), name=f"serve-{host}:{port}")
    waiter = asyncio.ensure_future(listening.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    await asyncio.sleep(0.05)  # a worker that cannot start ends the task at once
    if task.done():
        why = task.exception() or "the server stopped"
        raise RuntimeError(f"could not serve on {host}:{port}: {why}")
    return task


def serve_in_thread(
    name: str,
    bind: str,
    tls_cert: str | None,
    tls_key: str | None,
    make_app: Callable[[], App],
    fail: Callable[[str], None],
    client_ca: str | None = None,
) -> None:
    """Serve on `bind` ("host:port"), HTTPS when given a certificate and key (and mutual TLS
    with `client_ca`, see `serve`), from a thread of its own with its own asyncio loop;
    `make_app` runs on that loop (what it builds may hold futures of it). Returns once
    listening, raises RuntimeError when it cannot; if the server stops later, `fail` is told."""
    host, _, port = bind.rpartition(":")
    tls = (tls_cert, tls_key) if tls_cert and tls_key else None
    started = threading.Event()
    failed: list[str] = []

    def stopped(task: asyncio.Task[None]) -> None:
        if not task.cancelled():  # never stopped on purpose while the process lives
            fail(f"{name} server on {bind} stopped: {task.exception()}")

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            task = loop.run_until_complete(serve(make_app(), host or "0.0.0.0", int(port), tls, client_ca))
        except RuntimeError as err:
            failed.append(str(err))
            started.set()
            return
        task.add_done_callback(stopped)
        scheme = "http" if tls is None else f"https, clients of CA {client_ca}" if client_ca else "https"
        log.info("%s serving on %s (%s)", name, bind, scheme)
        started.set()
        loop.run_forever()

    threading.Thread(target=run, name=f"{name}-http", daemon=True).start()
    if not started.wait(30):
        raise RuntimeError(f"{name}: could not start serving on {bind} within 30s")
    if failed:
        raise RuntimeError(f"{name}: {failed[0]}")
