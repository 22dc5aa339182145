"""Where the API server is and who we are to it, read as kubectl and client-go read it.

- kubeconfig: every file of KUBECONFIG=a:b merged (the first file to name a cluster, user or
  context wins, and the first current-context), relative paths against the file that names them;
  users with a bearer `token`, a `tokenFile` (re-read once a minute, as client-go does), an `exec`
  plugin (EKS's `aws eks get-token`: run again when its token expires or the API server answers
  401), or a client certificate.
- in-cluster: the ServiceAccount's projected token, re-read once a minute (the kubelet rotates it,
  and EKS refuses tokens older than 90 days), the cluster CA, and KUBERNETES_SERVICE_HOST
  (bracketed when it is IPv6).

The `kubernetes` package merges the files and runs exec plugins; the TLS material is kept in
memory (a client key given inline is written only to a private temporary file that is deleted as
soon as `ssl` has read it), and requests themselves stay on httpx with raw JSON.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.exec_provider import ExecProvider
from kubernetes.config.kube_config import ConfigNode, KubeConfigMerger

from gangplugin.kube.yamldoc import syntax_error

log = logging.getLogger(__name__)

IN_CLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: client-go re-reads token files (the in-cluster one too) at most this often.
TOKEN_FILE_PERIOD = 60.0
#: An exec plugin's token is renewed this long before it expires.
EXPIRY_MARGIN = 10.0


class ConfigError(Exception):
    """The kubeconfig or in-cluster setup cannot be used: one line that says which and why."""


class MalformedKubeconfig(ConfigError):
    """A kubeconfig file that is not YAML, told as `file:line:column: problem` (bad input: the
    user's to fix, so gangctl exits 2 for it)."""


class Credentials:
    """The Authorization header to send now, from one source: a static token, a token file
    (re-read when older than `TOKEN_FILE_PERIOD`), or an exec plugin (re-run when its token
    expires). `invalidate` after a 401 makes the next call read or run again. Thread-safe."""

    def __init__(
        self,
        *,
        token: str | None = None,
        token_file: Path | None = None,
        exec_plugin: Callable[[], dict[str, Any]] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._token, self._file, self._exec = token, token_file, exec_plugin
        self._monotonic, self._wall = monotonic, wall
        self._lock = threading.Lock()
        self._read_at: float | None = None  # monotonic: when the token file was last read
        self._expires: float | None = None  # wall clock: an exec token's expirationTimestamp
        self._stale = exec_plugin is not None or token_file is not None

    @property
    def refreshable(self) -> bool:
        return self._file is not None or self._exec is not None

    def stale(self) -> bool:
        """True when `authorization` would read a file or run a plugin (callers on an event
        loop run it in a thread then)."""
        if self._stale:
            return True
        if self._file is not None and self._read_at is not None:
            return self._monotonic() - self._read_at >= TOKEN_FILE_PERIOD
        return self._expires is not None and self._wall() >= self._expires - EXPIRY_MARGIN

    def invalidate(self) -> None:
        with self._lock:
            self._stale = self.refreshable

    def authorization(self) -> str | None:
        with self._lock:
            if self.stale():
                self._refresh()
            return f"Bearer {self._token}" if self._token else None

    def headers(self) -> dict[str, str]:
        value = self.authorization()
        return {"Authorization": value} if value else {}

    def _refresh(self) -> None:
        if self._file is not None:
            try:
                self._token = self._file.read_text(encoding="utf-8").strip() or None
            except OSError as err:
                if self._token is None:
                    raise ConfigError(f"cannot read the token file {self._file}: {err.strerror}") from None
                # As client-go: keep the token we have (the kubelet may be mid-rotation), try later.
                log.warning("token file %s unreadable (%s); keeping the last token", self._file, err.strerror)
            self._read_at = self._monotonic()
        elif self._exec is not None:
            self._accept(self._exec())
        self._stale = False

    def _accept(self, status: dict[str, Any]) -> None:
        token = status.get("token")
        if not isinstance(token, str) or not token:
            raise ConfigError(
                "the kubeconfig's exec plugin returned no token (status.token); plugins that return "
                "client certificates are not supported: use one that returns a token"
            )
        self._token, self._stale = token, False
        expiry = status.get("expirationTimestamp")
        try:
            self._expires = datetime.fromisoformat(str(expiry).replace("Z", "+00:00")).timestamp()
        except ValueError:
            self._expires = None  # none or unreadable: kept until a 401 (as client-go does)


@dataclass(frozen=True)
class ClusterConfig:
    """What a client of one API server needs. `client_cert`/`client_key` (PEM) are kept for
    callers that build their own TLS (gangctl's gRPC channel); `extensions` are the kubeconfig
    cluster's, by name."""

    server: str
    ssl_context: ssl.SSLContext
    credentials: Credentials
    ca_pem: bytes | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = None
    namespace: str = "default"
    extensions: dict[str, Any] = field(default_factory=dict)
    #: Trusts the server as `ssl_context` does but presents no client certificate: for requests
    #: made as someone else (a console user's own token). None: `ssl_context` presents none.
    server_trust: ssl.SSLContext | None = None


def load_config(
    kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None
) -> ClusterConfig:
    """`kubeconfig` (a path, or several joined with os.pathsep), else $KUBECONFIG, else the
    in-cluster ServiceAccount when running in a pod, else ~/.kube/config."""
    paths = str(kubeconfig or os.environ.get("KUBECONFIG") or "")
    if not paths and os.environ.get("KUBERNETES_SERVICE_HOST") and (IN_CLUSTER_DIR / "token").exists():
        return in_cluster_config()
    return kubeconfig_config(paths or str(Path.home() / ".kube" / "config"), context)


def in_cluster_config(directory: Path = IN_CLUSTER_DIR) -> ClusterConfig:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set")
    ca = _read(directory / "ca.crt", "the in-cluster CA")
    namespace = (directory / "namespace").read_text().strip() if (directory / "namespace").exists() else ""
    return ClusterConfig(
        server=f"https://{join_host_port(host, port)}",
        ssl_context=ssl.create_default_context(cadata=ca.decode()),
        credentials=Credentials(token_file=directory / "token"),
        ca_pem=ca,
        namespace=namespace or "default",
    )


def join_host_port(host: str, port: str | int) -> str:
    """host:port, with an IPv6 host in brackets (Go's net.JoinHostPort)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def kubeconfig_config(paths: str, context: str | None = None) -> ClusterConfig:
    try:
        merger = KubeConfigMerger(paths)  # type: ignore[no-untyped-call]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise MalformedKubeconfig(str(syntax_error(err, mark.name if mark else paths))) from None
    except (OSError, ConfigException, ValueError) as err:
        raise ConfigError(f"kubeconfig {paths}: {err}") from None
    if merger.config is None:
        raise ConfigError(f"no kubeconfig found at {paths} (set KUBECONFIG or pass --kubeconfig)")
    merged = merger.config.value
    # kubectl: the first file that sets current-context wins (the library keeps the last).
    files = [merger.config_files[p] or {} for p in merger.paths]
    ctx_name = context or next((f["current-context"] for f in files if f.get("current-context")), None)
    if not ctx_name:
        raise ConfigError(f"kubeconfig {paths}: no current-context (set one with kubectl config use-context)")
    ctx_node = _named(merged.get("contexts"), ctx_name, "context", paths)
    ctx = ctx_node.value.get("context") or {}
    cluster_node = _named(merged.get("clusters"), ctx.get("cluster"), "cluster", paths)
    cluster: dict[str, Any] = cluster_node.value.get("cluster") or {}
    user_name = ctx.get("user")
    user_node = _named(merged.get("users"), user_name, "user", paths) if user_name else None
    user: dict[str, Any] = (user_node.value.get("user") or {}) if user_node else {}
    if not cluster.get("server"):
        raise ConfigError(f"kubeconfig cluster {ctx.get('cluster')!r} has no server")
    cluster_dir = _base_dir(cluster_node.path)
    user_dir = _base_dir(user_node.path if user_node else None)
    who = f"kubeconfig user {user_name!r}"

    ca = _file_or_data(cluster, "certificate-authority", cluster_dir, f"cluster {ctx.get('cluster')!r}")

    def trusting() -> ssl.SSLContext:
        if cluster.get("insecure-skip-tls-verify"):
            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE
            return insecure
        return ssl.create_default_context(cadata=ca.decode() if ca else None)

    context_ssl = trusting()

    cert = _file_or_data(user, "client-certificate", user_dir, who)
    key = _file_or_data(user, "client-key", user_dir, who)
    credentials = Credentials()
    if user.get("token"):
        credentials = Credentials(token=str(user["token"]))
    elif user.get("tokenFile"):
        credentials = Credentials(token_file=_resolve(str(user["tokenFile"]), user_dir))
    elif user.get("exec"):  # run at the first request, then again when its token expires
        credentials = Credentials(exec_plugin=_exec_plugin(user["exec"], cluster, user_dir, who))
    elif user.get("auth-provider"):
        name = (user["auth-provider"] or {}).get("name", "?")
        raise ConfigError(
            f"{who}: auth-provider {name!r} is not supported (kubectl dropped it too); use an exec plugin"
        )
    server_trust = None
    if cert and key:
        server_trust = trusting()
        load_cert_chain(context_ssl, cert, key)
    extensions = {
        str(e.get("name")): e.get("extension") for e in cluster.get("extensions") or [] if isinstance(e, dict)
    }
    return ClusterConfig(
        server=str(cluster["server"]).rstrip("/"),
        ssl_context=context_ssl,
        credentials=credentials,
        ca_pem=ca,
        client_cert=cert,
        client_key=key,
        namespace=str(ctx.get("namespace") or "default"),
        extensions=extensions,
        server_trust=server_trust,
    )


def load_cert_chain(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """`ssl` reads a key only from a file: a private directory that is gone when this returns."""
    directory = tempfile.mkdtemp(prefix="gangplugin-tls-")  # mode 0700
    try:
        cert_path, key_path = Path(directory, "tls.crt"), Path(directory, "tls.key")
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        context.load_cert_chain(str(cert_path), str(key_path))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _exec_plugin(
    spec: dict[str, Any], cluster: dict[str, Any], cwd: Path | None, who: str
) -> Callable[[], dict[str, Any]]:
    try:
        provider = ExecProvider(  # type: ignore[no-untyped-call]
            ConfigNode("exec", spec),  # type: ignore[no-untyped-call]
            str(cwd or ""),
            ConfigNode("cluster", cluster),  # type: ignore[no-untyped-call]
        )
    except ConfigException as err:
        raise ConfigError(f"{who}: {err}") from None
    command = spec.get("command")

    def run() -> dict[str, Any]:
        try:
            status: dict[str, Any] = provider.run()  # type: ignore[no-untyped-call]
        except (ConfigException, OSError) as err:
            raise ConfigError(f"{who}: exec plugin {command!r}: {err}") from None
        return status

    return run


def _named(items: Any, name: Any, kind: str, paths: str) -> Any:
    for item in items or []:
        if item.value.get("name") == name:
            return item
    raise ConfigError(f"kubeconfig {paths}: no {kind} named {name!r}")


def _base_dir(path: str | None) -> Path | None:
    return Path(path).resolve().parent if path else None


def _resolve(path: str, base: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base is None else base / p


def _file_or_data(section: dict[str, Any], key: str, base: Path | None, where: str) -> bytes | None:
    data = section.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(data)
        except ValueError:
            raise ConfigError(f"{where}: {key}-data is not base64") from None
    path = section.get(key)
    return _read(_resolve(str(path), base), f"{where}: {key}") if path else None


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{what}: cannot read {path}: {err.strerror}") from None
