"""Liveness and readiness endpoints: /healthz while the process runs, /readyz once it serves."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HealthServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int]) -> None:
        self.ready = threading.Event()
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: HealthServer

    def do_GET(self) -> None:
        if self.path == "/healthz":
            ok = True
        elif self.path == "/readyz":
            ok = self.server.ready.is_set()
        else:
            self.send_error(404)
            return
        body = b"ok" if ok else b"not ready"
        self.send_response(200 if ok else 503)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # probes are not news
        pass


def serve_health(bind: str) -> HealthServer:
    host, _, port = bind.rpartition(":")
    server = HealthServer((host or "0.0.0.0", int(port)))
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
