"""The operations listener over real sockets: probes, metrics, TLS, and clients that misbehave."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gangplugin.localcluster.pki import CertificateAuthority
from gangplugin.runtime.metrics import LEADER
from gangplugin.server.health import HealthServer, serve_health, tls_context


@pytest.fixture
def state() -> dict[str, tuple[bool, str]]:
    return {"live": (True, "ok"), "ready": (False, "syncing watch caches")}


@pytest.fixture
def pki(tmp_path: Path) -> tuple[CertificateAuthority, Path, Path]:
    ca = CertificateAuthority(tmp_path)
    cert, key = ca.issue("serving", common_name="test", hosts=("127.0.0.1",))
    return ca, cert, key


@pytest.fixture
def https(
    state: dict[str, tuple[bool, str]], pki: tuple[CertificateAuthority, Path, Path]
) -> Iterator[tuple[HealthServer, ssl.SSLContext]]:
    ca, cert, key = pki
    server = serve_health(
        "127.0.0.1:0", lambda: state["live"], lambda: state["ready"], tls_context(str(cert), str(key))
    )
    yield server, ssl.create_default_context(cafile=str(ca.cert_path))
    server.shutdown()
    server.server_close()


def _url(server: HealthServer, path: str, scheme: str = "https") -> str:
    return f"{scheme}://127.0.0.1:{server.server_address[1]}{path}"


def test_probes_answer_what_the_process_says(https, state) -> None:
    server, ctx = https
    assert httpx.get(_url(server, "/healthz"), verify=ctx).status_code == 200
    r = httpx.get(_url(server, "/readyz"), verify=ctx)
    assert (r.status_code, r.text.strip()) == (503, "syncing watch caches")
    state["ready"] = (True, "leader (gangplugin-system/gangplugin)")
    r = httpx.get(_url(server, "/readyz"), verify=ctx)
    assert (r.status_code, r.text.strip()) == (200, "leader (gangplugin-system/gangplugin)")
    state["live"] = (False, "threads stopped: informer-pods")
    r = httpx.get(_url(server, "/healthz"), verify=ctx)
    assert (r.status_code, r.text.strip()) == (503, "threads stopped: informer-pods")
    assert httpx.get(_url(server, "/nope"), verify=ctx).status_code == 404


def test_metrics_are_served_in_prometheus_text_format(https) -> None:
    server, ctx = https
    LEADER.labels("unit/test").set(1)
    r = httpx.get(_url(server, "/metrics"), verify=ctx)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert 'gangplugin_leader{lease="unit/test"} 1.0' in r.text
    for family in (
        "gangplugin_gang_admission_latency_seconds",
        "gangplugin_admission_decision_duration_seconds",
        "gangplugin_admission_pass_duration_seconds",
        "gangplugin_gang_time_to_all_ready_seconds",
        "gangplugin_extender_request_duration_seconds",
    ):
        assert f"# TYPE {family} histogram" in r.text


def test_plain_http_to_the_tls_listener_fails_and_the_server_keeps_serving(https) -> None:
    server, ctx = https
    with pytest.raises(httpx.HTTPError):
        httpx.get(_url(server, "/healthz", "http"), timeout=5)
    # A client that connects and sends garbage, and one that connects and says nothing.
    with socket.create_connection(("127.0.0.1", server.server_address[1])) as s:
        s.sendall(b"\x00" * 64)
    silent = socket.create_connection(("127.0.0.1", server.server_address[1]))
    try:
        assert httpx.get(_url(server, "/healthz"), verify=ctx).status_code == 200
    finally:
        silent.close()


def test_an_untrusted_client_cannot_be_fooled(https, tmp_path: Path) -> None:
    server, _ = https
    other = CertificateAuthority(tmp_path / "other")
    with pytest.raises(httpx.ConnectError):
        httpx.get(_url(server, "/healthz"), verify=ssl.create_default_context(cafile=str(other.cert_path)))


def test_without_a_certificate_it_serves_plain_http(state) -> None:
    server = serve_health("127.0.0.1:0", lambda: state["live"], lambda: state["ready"])
    try:
        assert httpx.get(_url(server, "/healthz", "http")).status_code == 200
    finally:
        server.shutdown()
        server.server_close()
    assert tls_context(None, None) is None
