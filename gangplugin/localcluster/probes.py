"""Is a component up yet: its health endpoints, and waiting for a condition of the cluster, with
deadlines that do not assume an idle machine (`Deadline`)."""

from __future__ import annotations

import contextlib
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

from gangplugin.kube.client import ApiError
from gangplugin.localcluster.errors import ClusterError

# A wait's seconds pass this many times slower at most, however loaded the machine.
MAX_STRETCH = 8.0


def stretch() -> float:
    """How much slower than an idle machine's this machine runs now: its 1-minute load average
    over its cores, at least 1, at most MAX_STRETCH."""
    return min(MAX_STRETCH, max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)))


class Deadline:
    """`seconds` of an idle machine: while the machine runs more than its cores can (a Go build,
    other clusters, busy loops beside the tests), its seconds count for less (`stretch`), so a
    wait for something that must happen does not fail because other programs took the CPU. It
    still ends: at most MAX_STRETCH x `seconds` of wall time."""

    def __init__(self, seconds: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self._monotonic = seconds, monotonic
        self._spent, self._at = 0.0, monotonic()

    def passed(self) -> bool:
        now = self._monotonic()
        self._spent += (now - self._at) / stretch()
        self._at = now
        return self._spent >= self.seconds


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


T = TypeVar("T")


def persist(call: Callable[[], T], what: str, timeout: float = 300.0) -> T:
    """An idempotent request (a server-side apply), again while the API server is too busy to
    answer it (a timeout, 429, 5xx: CRDs applied while kwok creates thousands of nodes on a
    loaded machine), within `timeout` seconds of an idle machine."""
    deadline = Deadline(timeout)
    while True:
        try:
            return call()
        except (httpx.TimeoutException, ApiError) as err:
            if (isinstance(err, ApiError) and err.status != 429 and err.status < 500) or deadline.passed():
                raise ClusterError(f"{what}: {err}") from err
        time.sleep(1.0)


#: How long an install step may wait for the cluster (CRDs established, webhooks answering, a
#: controller's first object), in seconds of an idle machine (`Deadline` stretches it with the
#: load). Idle, each takes seconds; at a load of 33 on 2 cores the API server took over 30 s to
#: establish a CRD, so this bound only catches what will never happen.
INSTALL_DEADLINE = 120.0


def wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Until `check()` holds (an API error or a refused connection counts as not yet), within
    `timeout` seconds of an idle machine (`Deadline`)."""
    deadline = Deadline(timeout)
    while not deadline.passed():
        with contextlib.suppress(httpx.HTTPError, ApiError):
            if check():
                return
        time.sleep(0.3)
    raise ClusterError(f"timed out after {timeout:.0f}s (of an idle machine) waiting for {what}")
