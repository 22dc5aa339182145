"""Is a component up yet: its health endpoints, and waiting for a condition of the cluster."""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from gangplugin.kube.client import ApiError
from gangplugin.localcluster.errors import ClusterError


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def https_ok(url: str, ca: Path | None, client_cert: tuple[Path, Path] | None = None) -> bool:
    """GET `url` answers 200, the server verified against `ca` (None: a self-signed certificate,
    as kube-controller-manager and kube-scheduler serve), presenting `client_cert` if given."""
    ctx = ssl.create_default_context(cafile=str(ca) if ca else None)
    if ca is None:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if client_cert:
        ctx.load_cert_chain(*client_cert)
    try:
        return httpx.get(url, verify=ctx, timeout=2.0).status_code == 200
    except (httpx.HTTPError, OSError):  # ssl.SSLError is an OSError
        return False


#: How long an install step may wait for the cluster (CRDs established, webhooks answering, a
#: controller's first object). Idle, each takes seconds; with the machine loaded many times its
#: cores (CI beside a Go build) the API server took over 30 s to establish a CRD, so this bound only
#: catches what will never happen.
INSTALL_DEADLINE = 300.0


def wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Until `check()` holds (an API error or a refused connection counts as not yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, ApiError):
            if check():
                return
        time.sleep(0.3)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
