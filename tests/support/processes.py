"""Small real processes for the local cluster's supervisor and keeper tests."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from gangplugin.localcluster.probes import http_ok
from gangplugin.localcluster.supervisor import Process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_server(name: str, state_dir: Path) -> Process:
    """A real server whose command line names the state directory, as every component's does."""
    port = free_port()
    argv = (
        sys.executable,
        "-m",
        "http.server",
        str(port),
        "--bind",
        "127.0.0.1",
        "--directory",
        str(state_dir),
    )
    return Process(name, argv, health=lambda: http_ok(f"http://127.0.0.1:{port}/"), ports=(port,))
