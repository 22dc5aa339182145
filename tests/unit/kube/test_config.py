"""Credentials and cluster config as kubectl reads them: merged kubeconfigs, exec plugins, token
files re-read, in-cluster rotation, IPv6 hosts, no key material left on disk."""

from __future__ import annotations

import base64
import json
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangplugin.kube.config import (
    TOKEN_FILE_PERIOD,
    ConfigError,
    Credentials,
    in_cluster_config,
    join_host_port,
    load_config,
)
from gangplugin.localcluster.pki import CertificateAuthority
from tests.support.fakeapi import Clock


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def _cfg(
    cluster: dict[str, Any], user: dict[str, Any], name: str = "c", current: bool = True
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": f"ns-{name}"}}],
    }
    if current:
        doc["current-context"] = name
    return doc


def test_kubeconfig_paths_merge_as_kubectl_merges_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a sets the current context; b names another context (and a duplicate "a" that must lose).
    a = _write(tmp_path / "a", _cfg({"server": "https://a.example:6443"}, {"token": "tok-a"}, "a"))
    b_doc = _cfg({"server": "https://b.example:6443"}, {"token": "tok-b"}, "b")
    b_doc["clusters"].append({"name": "a", "cluster": {"server": "https://wrong.example"}})
    b = _write(tmp_path / "b", b_doc)
    monkeypatch.setenv("KUBECONFIG", f"{a}:{tmp_path / 'missing'}:{b}")
    cfg = load_config()
    assert (cfg.server, cfg.credentials.authorization(), cfg.namespace) == (
        "https://a.example:6443",
        "Bearer tok-a",
        "ns-a",
    )
    other = load_config(f"{b}:{a}")  # b first: its current context wins, and b's cluster "a"
    assert other.server == "https://b.example:6443"
    assert load_config(f"{b}:{a}", context="a").server == "https://wrong.example"


def test_a_missing_context_or_file_is_one_readable_error(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", _cfg({"server": "https://a"}, {}, "a"))
    with pytest.raises(ConfigError, match="no context named 'nope'"):
        load_config(str(a), context="nope")
    with pytest.raises(ConfigError, match="no kubeconfig found"):
        load_config(str(tmp_path / "absent"))
    provider = _write(tmp_path / "p", _cfg({"server": "https://a"}, {"auth-provider": {"name": "oidc"}}))
    with pytest.raises(ConfigError, match="auth-provider 'oidc' is not supported"):
        load_config(str(provider))


def test_relative_paths_resolve_against_the_file_that_names_them(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    cert, key = ca.issue("admin", common_name="alice", organization="team", client=True)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "token").write_text("from-file\n")
    doc = _cfg(
        {"server": "https://x", "certificate-authority": "../pki/ca.crt"},
        {"client-certificate": "../pki/admin.crt", "client-key": "../pki/admin.key", "tokenFile": "token"},
    )
    cfg = load_config(str(_write(sub / "config", doc)))
    assert cfg.ca_pem == ca.pem
    assert cfg.client_cert == cert.read_bytes() and cfg.client_key == key.read_bytes()
    assert cfg.credentials.authorization() == "Bearer from-file"


def test_inline_client_keys_leave_no_file_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    cert, key = ca.issue("admin", common_name="alice", client=True)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)  # re-read TMPDIR

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    doc = _cfg(
        {"server": "https://x", "certificate-authority-data": base64.b64encode(ca.pem).decode()},
        {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
    )
    cfg = load_config(str(_write(tmp_path / "config", doc)))
    assert cfg.client_key == key.read_bytes()
    assert isinstance(cfg.ssl_context, ssl.SSLContext) and cfg.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert list(scratch.iterdir()) == []  # the key was loaded, and its file is gone


def _plugin(tmp_path: Path, expiry: str | None) -> tuple[dict[str, Any], Path]:
    """An exec plugin (a Python script) that counts its runs and answers token-<n>."""
    counter = tmp_path / "runs"
    script = tmp_path / "plugin.py"
    status = {"expirationTimestamp": expiry} if expiry else {}
    script.write_text(
        "import json, os, pathlib, sys\n"
        f"c = pathlib.Path({str(counter)!r})\n"
        "n = int(c.read_text()) + 1 if c.exists() else 1\n"
        "c.write_text(str(n))\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['kind'] == 'ExecCredential'\n"
        "status = {'token': f\"token-{n}-{os.environ['REGION']}\", **" + json.dumps(status) + "}\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential', 'status': status}))\n"
    )
    spec = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": sys.executable,
        "args": [str(script)],
        "env": [{"name": "REGION", "value": "us-east-1"}],
        "interactiveMode": "Never",
    }
    return spec, counter


def test_an_exec_plugin_token_is_kept_until_it_expires(tmp_path: Path) -> None:
    spec, counter = _plugin(tmp_path, "2999-01-01T00:00:00Z")
    cfg = load_config(str(_write(tmp_path / "config", _cfg({"server": "https://x"}, {"exec": spec}))))
    assert not counter.exists()  # loading the config runs nothing: the first request does
    assert cfg.credentials.authorization() == "Bearer token-1-us-east-1"
    assert cfg.credentials.authorization() == "Bearer token-1-us-east-1"
    assert counter.read_text() == "1"
    cfg.credentials.invalidate()  # what a 401 does
    assert cfg.credentials.authorization() == "Bearer token-2-us-east-1"


def test_an_expired_exec_token_is_renewed(tmp_path: Path) -> None:
    spec, counter = _plugin(tmp_path, "2000-01-01T00:00:00Z")
    cfg = load_config(str(_write(tmp_path / "config", _cfg({"server": "https://x"}, {"exec": spec}))))
    assert cfg.credentials.authorization() == "Bearer token-1-us-east-1"
    assert cfg.credentials.authorization() == "Bearer token-2-us-east-1"  # the first had expired
    assert counter.read_text() == "2"


def test_a_failing_exec_plugin_says_which_user_and_command(tmp_path: Path) -> None:
    spec = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "/nonexistent/aws"}
    cfg = load_config(str(_write(tmp_path / "config", _cfg({"server": "https://x"}, {"exec": spec}))))
    with pytest.raises(ConfigError, match=r"kubeconfig user 'c': exec plugin '/nonexistent/aws'"):
        cfg.credentials.authorization()


def test_a_token_file_is_read_again_once_a_minute(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    clock = Clock()
    creds = Credentials(token_file=token, monotonic=clock)
    assert creds.authorization() == "Bearer one"
    token.write_text("two")  # the kubelet rotated it
    clock.t += TOKEN_FILE_PERIOD - 1
    assert creds.authorization() == "Bearer one" and not creds.stale()
    clock.t += 1
    assert creds.stale() and creds.authorization() == "Bearer two"
    token.unlink()  # mid-rotation: the last token is kept, and the file read again later
    clock.t += TOKEN_FILE_PERIOD
    assert creds.authorization() == "Bearer two" and not creds.stale()
    with pytest.raises(ConfigError, match="cannot read the token file"):
        Credentials(token_file=token).authorization()  # never had one: say so


def test_in_cluster_rotates_its_token_and_brackets_an_ipv6_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "ca.crt").write_bytes(ca.pem)
    (sa / "token").write_text("first")
    (sa / "namespace").write_text("gangplugin-system")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = in_cluster_config(sa)
    assert cfg.server == "https://[fd00:10:96::1]:443"
    assert cfg.namespace == "gangplugin-system"
    assert cfg.credentials.authorization() == "Bearer first"
    (sa / "token").write_text("second")
    cfg.credentials.invalidate()  # as after a minute, or a 401
    assert cfg.credentials.authorization() == "Bearer second"
    assert join_host_port("10.96.0.1", 443) == "10.96.0.1:443"
    assert join_host_port("[::1]", 443) == "[::1]:443"
