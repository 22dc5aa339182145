"""Leader election in a process of its own, against a Lease API served over HTTP in this test
(the child process talks to it as it would to kube-apiserver): it acquires and renews on its
own, however busy the process it is held for; while that process is stopped it does not renew,
and past the deadline the Lease is lost, not released; a parent that stops cleanly releases it;
and a client fenced by a lost lease writes nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from gangplugin.core.leader import ElectionConfig
from gangplugin.kube.client import ApiError, Client
from gangplugin.kube.lease import Renewal
from gangplugin.kube.renewer import ElectionTarget, RenewerProcess
from tests.support.kube import wait_for

# Short, for the test's time, yet a renew deadline ten retry periods long: a renewal a busy
# machine makes a few seconds late is no lost Lease here either.
FAST = ElectionConfig(lease_duration=8.0, renew_deadline=5.0, retry_period=0.5)
PATH = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/gangplugin"


class LeaseServer(ThreadingHTTPServer):
    """One Lease with resourceVersion checks, as kube-apiserver keeps it."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.lock = threading.Lock()
        self.writes: list[str] = []  # holderIdentity of each write


class _Handler(BaseHTTPRequestHandler):
    server: LeaseServer

    def log_message(self, *_args: Any) -> None:
        pass

    def _answer(self, status: int, body: Any) -> None:
        data = orjson.dumps(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        with self.server.lock:
            if self.server.lease is None:
                self._answer(404, {"kind": "Status", "reason": "NotFound", "message": "no lease"})
            else:
                self._answer(200, self.server.lease)

    def do_POST(self) -> None:
        self._write(create=True)

    def do_PUT(self) -> None:
        self._write(create=False)

    def _write(self, create: bool) -> None:
        body = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            if (create and self.server.lease is not None) or (
                not create and body["metadata"].get("resourceVersion") != str(self.server.rv)
            ):
                self._answer(409, {"kind": "Status", "reason": "Conflict", "message": "conflict"})
                return
            self.server.rv += 1
            body["metadata"]["resourceVersion"] = str(self.server.rv)
            self.server.lease = body
            self.server.writes.append(body["spec"]["holderIdentity"])
            self._answer(200, body)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[LeaseServer, str]]:
    server = LeaseServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    yield server, str(kubeconfig)
    server.shutdown()


def _start(
    kubeconfig: str, stop: threading.Event, watched: int | None = None
) -> tuple[RenewerProcess, list[Renewal], threading.Event]:
    renewals: list[Renewal] = []
    started = threading.Event()
    target = ElectionTarget(kubeconfig, "ns", "gangplugin", "a", FAST)
    renewer = RenewerProcess(target, on_renewed=renewals.append, watched=watched)
    threading.Thread(target=renewer.run, args=(stop, started.set), daemon=True).start()
    return renewer, renewals, started


def test_the_child_acquires_renews_and_releases_on_a_clean_stop(api: tuple[LeaseServer, str]) -> None:
    server, kubeconfig = api
    stop = threading.Event()
    renewer, renewals, started = _start(kubeconfig, stop)
    assert started.wait(60), "the child did not acquire the Lease"
    assert renewer.leading.is_set() and renewer.holder == "a"
    wait_for(lambda: len(renewals) >= 4, 60, "four renewals")
    assert renewer.lost_reason() is None
    assert all(r.due <= r.began <= r.done for r in renewals)
    stop.set()
    wait_for(lambda: server.writes[-1] == "", 30, "the Lease released")


def test_renewals_go_on_while_the_process_it_is_held_for_is_busy(api: tuple[LeaseServer, str]) -> None:
    _, kubeconfig = api
    stop = threading.Event()
    # Stands for a `gangplugin serve` in a long admission pass: running, never idle.
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        renewer, renewals, started = _start(kubeconfig, stop, watched=busy.pid)
        assert started.wait(60), "the child did not acquire the Lease"
        since = len(renewals)
        wait_for(lambda: len(renewals) >= since + 4, 60, "renewals while it is busy")
        assert renewer.lost_reason() is None and busy.poll() is None
    finally:
        busy.kill()
        busy.wait()
        stop.set()


def test_no_renewal_while_the_process_it_is_held_for_is_stopped(api: tuple[LeaseServer, str]) -> None:
    server, kubeconfig = api
    stop = threading.Event()
    served = subprocess.Popen(["sleep", "300"])  # stands for `gangplugin serve`
    try:
        renewer, renewals, started = _start(kubeconfig, stop, watched=served.pid)
        assert started.wait(60), "the child did not acquire the Lease"
        wait_for(lambda: len(renewals) >= 2, 60, "renewals")
        os.kill(served.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        reason = wait_for(renewer.lost_reason, 30, "the lease to be lost")
        assert "lease ns/gangplugin" in reason
        # The renewing process gives up past the deadline: after it ended, nothing more came.
        wait_for(lambda: not renewer.running(), 30, "the renewing process to end")
        assert server.writes[-1] == "a", "not released: it expires, as a stopped leader's must"
        assert all(r.began <= stopped_at for r in renewals), "no renewal began while it was stopped"
    finally:
        os.kill(served.pid, signal.SIGCONT)
        served.kill()
        served.wait()
        stop.set()


def test_a_fenced_client_writes_nothing_and_reads_on() -> None:
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        return httpx.Response(200, content=b"{}")

    client = Client("https://api.test", False, transport=httpx.MockTransport(handle))

    def fence() -> None:
        raise ApiError(503, "LeadershipLost", "not written: lease lost")

    client.fence = fence
    with pytest.raises(ApiError, match="LeadershipLost"):
        client.request("PUT", "/api/v1/namespaces/ns/pods/p", body={})
    client.request("GET", "/api/v1/namespaces/ns/pods/p")
    assert calls == ["GET"]
