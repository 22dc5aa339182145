"""Where gangctl's settings come from when only a kubeconfig is given: the cluster's
gangplugin.io/grpc extension for the address and CA, the user for the credentials."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangplugin.cli.connection import Connection
from gangplugin.core.names import GRPC_EXTENSION
from gangplugin.kube.config import ConfigError
from gangplugin.localcluster.pki import CertificateAuthority


def _kubeconfig(tmp_path: Path, user: dict[str, Any], extension: dict[str, Any] | None) -> str:
    cluster: dict[str, Any] = {"server": "https://127.0.0.1:6443"}
    if extension is not None:
        cluster["extensions"] = [{"name": GRPC_EXTENSION, "extension": extension}]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
        "current-context": "x",
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


EXT = {"server": "10.0.0.1:8090", "client-certificate-server": "10.0.0.1:8091"}


def test_a_client_certificate_user_goes_to_the_client_certificate_port(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    cert, key = ca.issue("admin", common_name="admin", organization="system:masters", client=True)
    ext = {**EXT, "certificate-authority-data": base64.b64encode(ca.pem).decode()}
    conn = Connection(
        kubeconfig=_kubeconfig(tmp_path, {"client-certificate": str(cert), "client-key": str(key)}, ext)
    )
    assert conn.address == "10.0.0.1:8091"
    assert conn._client_certificate() == (cert.read_bytes(), key.read_bytes())
    assert conn._roots() == ca.pem
    assert conn.metadata() == []  # the certificate speaks for it
    assert conn.default_namespace() == "team-a"


def test_a_token_user_goes_to_the_token_port_with_its_token(tmp_path: Path) -> None:
    conn = Connection(kubeconfig=_kubeconfig(tmp_path, {"token": "abc"}, EXT))
    assert conn.address == "10.0.0.1:8090" and conn._client_certificate() is None
    assert conn.metadata() == [("authorization", "Bearer abc")]
    flagged = Connection(
        server="127.0.0.1:1", token="t", kubeconfig=_kubeconfig(tmp_path, {"token": "abc"}, EXT)
    )
    assert flagged.address == "127.0.0.1:1" and flagged.metadata() == [("authorization", "Bearer t")]


def test_no_address_anywhere_is_one_line_that_says_where_to_put_it(tmp_path: Path) -> None:
    conn = Connection(kubeconfig=_kubeconfig(tmp_path, {"token": "abc"}, None))
    with pytest.raises(ConfigError, match=r"pass --server or GANGCTL_SERVER, or add the gangplugin\.io/grpc"):
        _ = conn.address
    bare = Connection(server="127.0.0.1:1", token="t", kubeconfig=str(tmp_path / "absent"))
    assert bare.address == "127.0.0.1:1" and bare._roots() is None and bare.default_namespace() == "default"


def test_gangctl_silences_grpc_logs_and_does_not_load_the_local_cluster_launcher() -> None:
    code = (
        "import os, sys; import gangplugin.cli.main as m; m._register();"
        "assert os.environ['GRPC_VERBOSITY'] == 'NONE';"
        "assert not [n for n in sys.modules if n.startswith('gangplugin.localcluster')], 'imported'"
    )
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
