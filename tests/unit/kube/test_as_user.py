"""`Client.as_user`: the same API server, as the user a token names, never presenting the
process's own client certificate (which the API server would take for the caller)."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from gangplugin.kube.client import Client
from gangplugin.localcluster.pki import CertificateAuthority


@contextmanager
def api_server(ca: CertificateAuthority, seen: list[tuple[bool, str]]) -> Iterator[int]:
    """An HTTPS server that asks for (and does not require) a client certificate, and records
    whether each request came with one, and its Authorization header."""
    cert, key = ca.issue("server", common_name="api", hosts=("127.0.0.1",))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            assert isinstance(self.connection, ssl.SSLSocket)
            seen.append((self.connection.getpeercert() is not None, self.headers.get("Authorization", "")))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.cert_path))
    context.load_cert_chain(str(cert), str(key))
    context.verify_mode = ssl.CERT_OPTIONAL
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_as_user_sends_the_users_token_and_not_the_process_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    cert, key = ca.issue("admin", common_name="gangplugin", client=True)
    user = {"client-certificate": str(cert), "client-key": str(key)}
    seen: list[tuple[bool, str]] = []
    with api_server(ca, seen) as port:
        config = tmp_path / "kubeconfig"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "c",
                            "cluster": {
                                "server": f"https://127.0.0.1:{port}",
                                "certificate-authority": str(ca.cert_path),
                            },
                        }
                    ],
                    "users": [{"name": "u", "user": user}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )
        client = Client.from_kubeconfig(config)
        alice = client.as_user("alice-token")
        try:
            client.request("GET", "/version")
            alice.request("GET", "/version")
        finally:
            alice.close()
            client.close()
    assert seen == [(True, ""), (False, "Bearer alice-token")]
