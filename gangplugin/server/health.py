"""The operations listener: /healthz (liveness), /readyz (readiness) and /metrics (Prometheus),
over HTTPS when a certificate is given.

The TLS handshake runs in the connection's own thread (not in accept), and every connection has
a timeout, so a slow or broken client cannot stall probes or scrapes.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

# (ok, why): the body of the answer says why, for a person running curl.
Probe = Callable[[], tuple[bool, str]]


class HealthServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], live: Probe, ready: Probe, tls: ssl.SSLContext | None = None
    ) -> None:
        self.live, self.ready, self.tls = live, ready, tls
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        conn, addr = super().get_request()
        if self.tls is not None:
            conn = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        return conn, addr


class _Handler(BaseHTTPRequestHandler):
    server: HealthServer
    timeout = 10  # seconds a connection may idle (also bounds the TLS handshake)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
            return
        probe = {"/healthz": self.server.live, "/livez": self.server.live, "/readyz": self.server.ready}
        check = probe.get(path)
        if check is None:
            self._answer(404, b"not found: try /healthz, /readyz or /metrics\n", "text/plain")
            return
        ok, why = check()
        self._answer(200 if ok else 503, (why + "\n").encode(), "text/plain; charset=utf-8")

    def _answer(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle(self) -> None:
        # A client that failed the handshake or hung up is not the server's problem.
        with contextlib.suppress(ssl.SSLError, OSError):
            super().handle()

    def log_message(self, format: str, *args: object) -> None:  # probes and scrapes are not news
        pass


def tls_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """A server context for `cert`/`key` (PEM files); None (plain HTTP) when no cert is given."""
    if not cert:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def serve_health(bind: str, live: Probe, ready: Probe, tls: ssl.SSLContext | None = None) -> HealthServer:
    host, _, port = bind.rpartition(":")
    server = HealthServer((host or "0.0.0.0", int(port)), live, ready, tls)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
