"""How gangctl reaches gangplugin's gRPC API: one place for the address, TLS and the token, and
for turning a failed call into a message that says what to do.

Settings, each from a flag or else the environment:
  --server     GANGCTL_SERVER     host:port (default: the local cluster's, 127.0.0.1:<base+613>)
  --ca-file    GANGCTL_CA_FILE    CA bundle that signed the server's certificate (default: system CAs)
  --plaintext  GANGCTL_PLAINTEXT  the server runs without TLS (never on an untrusted network)
  --token      GANGCTL_TOKEN      bearer token (a ServiceAccount token: `kubectl create token <sa>`)
  --token-file GANGCTL_TOKEN_FILE file holding it
With neither token setting, the current kubeconfig user's token (or tokenFile) is used when it has
one, as kubectl would send it; client-certificate users must pass a token.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import grpc
import yaml

from gangplugin.core.errors import InputError

_F = TypeVar("_F", bound=Callable[..., Any])


def default_server() -> str:
    from gangplugin.localcluster.cluster import Ports

    return f"127.0.0.1:{Ports(base=int(os.environ.get('GANGPLUGIN_PORT_BASE', '21000'))).gangplugin_grpc}"


def _kubeconfig() -> dict[str, Any]:
    paths = (os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")).split(os.pathsep)
    for path in paths:
        try:
            doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(doc, dict):
            return doc
    return {}


def _context() -> dict[str, Any]:
    cfg = _kubeconfig()
    name = cfg.get("current-context")
    return next((c.get("context") or {} for c in cfg.get("contexts") or [] if c.get("name") == name), {})


def kubeconfig_token() -> str | None:
    """The current kubeconfig user's bearer token, if it has one."""
    user_name = _context().get("user")
    user = next(
        (u.get("user") or {} for u in _kubeconfig().get("users") or [] if u.get("name") == user_name), {}
    )
    if user.get("token"):
        return str(user["token"])
    if user.get("tokenFile"):
        try:
            return Path(user["tokenFile"]).read_text(encoding="utf-8").strip() or None
        except OSError:
            return None
    return None


def default_namespace() -> str:
    """The current kubeconfig context's namespace, else "default" (as kubectl does)."""
    return str(_context().get("namespace") or "default")


@dataclass(frozen=True, slots=True)
class Connection:
    """`server` is None when neither --server nor GANGCTL_SERVER was given (`address` then falls
    back to the local cluster's); offline commands use that to pick their mode."""

    server: str | None = None
    token: str | None = None
    token_file: str | None = None
    ca_file: str | None = None
    plaintext: bool = False

    @property
    def address(self) -> str:
        return self.server or default_server()

    def bearer(self) -> str | None:
        if self.token:
            return self.token
        if self.token_file:
            try:
                return Path(self.token_file).read_text(encoding="utf-8").strip()
            except OSError as err:
                raise InputError("--token-file", f"cannot read {self.token_file}: {err.strerror}") from None
        return kubeconfig_token()

    def channel(self) -> grpc.Channel:
        if self.plaintext:
            return grpc.insecure_channel(self.address)
        roots = None
        if self.ca_file:
            try:
                roots = Path(self.ca_file).read_bytes()
            except OSError as err:
                raise InputError("--ca-file", f"cannot read {self.ca_file}: {err.strerror}") from None
        return grpc.secure_channel(self.address, grpc.ssl_channel_credentials(root_certificates=roots))

    def metadata(self) -> list[tuple[str, str]]:
        token = self.bearer()
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
            else f"the default {self.address} (no --server/GANGCTL_SERVER)"
        )
        if code == grpc.StatusCode.UNAVAILABLE:
            if any(s in detail for s in ("Ssl", "SSL", "TLS", "handshake", "CERTIFICATE")):
                return (
                    f"TLS with {where} failed: give the CA that signed its certificate with --ca-file or "
                    "GANGCTL_CA_FILE (the local cluster's is .local/cluster/pki/ca.crt), or --plaintext "
                    "if that server runs without TLS"
                )
            return (
                f"gangplugin's gRPC API is not reachable at {where}. Set the address with --server or "
                "GANGCTL_SERVER. In a cluster, forward the Service's port first:\n"
                "  kubectl -n <gangplugin namespace> port-forward svc/gangplugin 8090:8090 &\n"
                "  export GANGCTL_SERVER=127.0.0.1:8090\n"
                "The local cluster (`make up`) serves it on 127.0.0.1:<port base + 613>, "
                "e.g. 127.0.0.1:21613."
            )
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return (
                "pass a Kubernetes token: --token, --token-file or GANGCTL_TOKEN, e.g.\n"
                "  export GANGCTL_TOKEN=$(kubectl create token <serviceaccount> -n <namespace>)"
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
        **kwargs: Any,
    ) -> Any:
        return f(*args, conn=Connection(server or None, token, token_file, ca_file, plaintext), **kwargs)

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
    ]
    out: Any = wrapper
    for option in reversed(options):
        out = option(out)
    return out  # type: ignore[no-any-return]
