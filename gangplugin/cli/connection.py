"""How gangctl reaches gangplugin's gRPC API: as kubectl reaches the API server, from the
kubeconfig, with one place for the address, TLS and credentials, and for turning a failed call
into one line that says what to do.

Each setting comes from a flag, else the environment, else the current kubeconfig context
(--kubeconfig/KUBECONFIG, several files merged as kubectl merges them; --context):
  --server     GANGCTL_SERVER     host:port; else the `gangplugin.io/grpc` extension of the
                                  context's cluster (`make up` writes it; docs/api-and-cli.md)
  --ca-file    GANGCTL_CA_FILE    CA of the server's certificate; else the extension's
                                  certificate-authority(-data); else the system CAs
  --plaintext  GANGCTL_PLAINTEXT  the server runs without TLS (never on an untrusted network)
  --token      GANGCTL_TOKEN      bearer token
  --token-file GANGCTL_TOKEN_FILE file holding it
With neither token setting, the kubeconfig user's own credentials: its token, tokenFile or exec
plugin (EKS's `aws eks get-token`) as a bearer token; or its client certificate, presented to the
extension's client-certificate-server (the server's port that requires one).
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import grpc

from gangplugin.core.errors import InputError
from gangplugin.core.names import GRPC_EXTENSION
from gangplugin.kube.config import ClusterConfig, ConfigError, MalformedKubeconfig, load_config

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Connection:
    """`server` is None when neither --server nor GANGCTL_SERVER was given (the address then
    comes from the kubeconfig); offline commands use that to pick their mode."""

    server: str | None = None
    token: str | None = None
    token_file: str | None = None
    ca_file: str | None = None
    plaintext: bool = False
    kubeconfig: str | None = None
    context: str | None = None

    @functools.cached_property
    def cluster(self) -> ClusterConfig:
        return load_config(self.kubeconfig, self.context)

    def _extension(self) -> dict[str, Any]:
        """The cluster's gangplugin.io/grpc extension ({} without one, or without a kubeconfig:
        the flags must then say everything)."""
        try:
            ext = self.cluster.extensions.get(GRPC_EXTENSION)
        except MalformedKubeconfig:
            raise  # a kubeconfig that is there but broken is told, never skipped
        except ConfigError:
            return {}
        return ext if isinstance(ext, dict) else {}

    def default_namespace(self) -> str:
        """The current kubeconfig context's namespace, else "default" (as kubectl does)."""
        try:
            return self.cluster.namespace
        except MalformedKubeconfig:
            raise
        except ConfigError:
            return "default"

    @functools.cached_property
    def _bearer(self) -> str | None:
        if self.token:
            return self.token
        if self.token_file:
            try:
                return Path(self.token_file).read_text(encoding="utf-8").strip()
            except OSError as err:
                raise InputError("--token-file", f"cannot read {self.token_file}: {err.strerror}") from None
        value = self.cluster.credentials.authorization()
        return value.removeprefix("Bearer ") if value else None

    def _client_certificate(self) -> tuple[bytes, bytes] | None:
        """The kubeconfig user's certificate and key, when it has no token to send instead."""
        if self._bearer is not None or self.plaintext:
            return None
        cfg = self.cluster
        return (cfg.client_cert, cfg.client_key) if cfg.client_cert and cfg.client_key else None

    @property
    def address(self) -> str:
        if self.server:
            return self.server
        ext = self._extension()
        key = "client-certificate-server" if self._client_certificate() else "server"
        address = ext.get(key) or ext.get("server")
        if not address:
            raise ConfigError(
                f"no gangplugin gRPC address: pass --server or GANGCTL_SERVER, or add the "
                f"{GRPC_EXTENSION} extension to your kubeconfig's cluster "
                "(docs/api-and-cli.md, 'Where the server is')"
            )
        return str(address)

    def _roots(self) -> bytes | None:
        if self.ca_file:
            try:
                return Path(self.ca_file).read_bytes()
            except OSError as err:
                raise InputError("--ca-file", f"cannot read {self.ca_file}: {err.strerror}") from None
        ext = self._extension()
        if ext.get("certificate-authority-data"):
            return base64.b64decode(str(ext["certificate-authority-data"]))
        if ext.get("certificate-authority"):
            path = Path(str(ext["certificate-authority"])).expanduser()
            try:
                return path.read_bytes()
            except OSError as err:
                raise ConfigError(f"{GRPC_EXTENSION}: cannot read {path}: {err.strerror}") from None
        return None

    def channel(self) -> grpc.Channel:
        if self.plaintext:
            return grpc.insecure_channel(self.address)
        pair = self._client_certificate()
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self._roots(),
            private_key=pair[1] if pair else None,
            certificate_chain=pair[0] if pair else None,
        )
        return grpc.secure_channel(self.address, credentials)

    def metadata(self) -> list[tuple[str, str]]:
        token = self._bearer
        return [("authorization", f"Bearer {token}")] if token else []

    def call(self, stub_class: Any, method: str, request: Any, timeout: float = 30) -> Any:
        """One unary call; failures exit with a message (see `fail`)."""
        with self.channel() as channel:
            try:
                return getattr(stub_class(channel), method)(
                    request, timeout=timeout, metadata=self.metadata()
                )
            except grpc.RpcError as err:
                self.fail(err)

    def stream(self, stub_class: Any, method: str, request: Any, timeout: float | None) -> Iterator[Any]:
        with self.channel() as channel:
            try:
                yield from getattr(stub_class(channel), method)(
                    request, timeout=timeout, metadata=self.metadata()
                )
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise TimeoutError from None
                self.fail(err)

    def fail(self, err: grpc.RpcError) -> NoReturn:
        """Bad input exits 2 naming the field (like every gangctl error); the rest exit 1 with
        what to do about it."""
        code, detail = err.code(), err.details() or ""
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            field, _, problem = detail.partition(": ")
            raise InputError(field, problem) if problem else InputError("request", detail)
        click.echo(f"error: {code.name}: {detail}", err=True)
        hint = self.hint(code, detail)
        if hint:
            click.echo(hint, err=True)
        raise SystemExit(1)

    def hint(self, code: grpc.StatusCode, detail: str) -> str:
        where = (
            f"--server {self.server}"
            if self.server
            else f"{self.address} (from the kubeconfig's {GRPC_EXTENSION} extension)"
        )
        if code == grpc.StatusCode.UNAVAILABLE:
            if any(s in detail for s in ("Ssl", "SSL", "TLS", "handshake", "CERTIFICATE")):
                return (
                    f"TLS with {where} failed: give the CA that signed its certificate with --ca-file or "
                    f"GANGCTL_CA_FILE (or in the kubeconfig's {GRPC_EXTENSION} extension), or --plaintext "
                    "if that server runs without TLS"
                )
            return (
                f"gangplugin's gRPC API is not reachable at {where}. In a cluster, forward the "
                "Service's port first (kubectl -n gangplugin-system port-forward svc/gangplugin "
                "8090:8090) and point --server, GANGCTL_SERVER or the kubeconfig's "
                f"{GRPC_EXTENSION} extension at it (docs/api-and-cli.md, 'Where the server is')."
            )
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return (
                "the kubeconfig user has no credentials gangplugin accepts here: pass a token "
                "(--token, --token-file or GANGCTL_TOKEN, e.g. $(kubectl create token <serviceaccount>)) "
                "or use a user with a token, an exec plugin or a client certificate"
            )
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return "ask an admin for a (Cluster)RoleBinding that grants that verb on that resource"
        return ""


def connection_options(f: _F) -> _F:
    """Adds the connection flags and passes them to the command as one `conn: Connection`."""

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        server: str | None,
        token: str | None,
        token_file: str | None,
        ca_file: str | None,
        plaintext: bool,
        kubeconfig: str | None,
        context: str | None,
        **kwargs: Any,
    ) -> Any:
        conn = Connection(server or None, token, token_file, ca_file, plaintext, kubeconfig, context)
        return f(*args, conn=conn, **kwargs)

    options = [
        click.option(
            "--server", envvar="GANGCTL_SERVER", help="gangplugin gRPC address host:port (env GANGCTL_SERVER)"
        ),
        click.option("--token", envvar="GANGCTL_TOKEN", help="bearer token (env GANGCTL_TOKEN)"),
        click.option(
            "--token-file", envvar="GANGCTL_TOKEN_FILE", help="file with the token (env GANGCTL_TOKEN_FILE)"
        ),
        click.option(
            "--ca-file", envvar="GANGCTL_CA_FILE", help="CA of the server's certificate (env GANGCTL_CA_FILE)"
        ),
        click.option(
            "--plaintext",
            is_flag=True,
            envvar="GANGCTL_PLAINTEXT",
            help="no TLS (a server run without --grpc-tls-cert)",
        ),
        click.option("--kubeconfig", envvar="KUBECONFIG", help="kubeconfig file(s) (env KUBECONFIG)"),
        click.option("--context", help="kubeconfig context (default: its current-context)"),
    ]
    out: Any = wrapper
    for option in reversed(options):
        out = option(out)
    return out  # type: ignore[no-any-return]
