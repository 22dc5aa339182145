"""`gangplugin serve`'s options (`ServeOptions`, as click parses them) and the settings made of
them: one typed tree (`ServeSettings`), each component given its own branch when it is made (as
kopf passes its operator settings), and the leader election. Bad options are refused here,
naming the option, before anything touches the cluster."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import click

from gangplugin.api.component import ApiSettings
from gangplugin.console.component import ConsoleSettings
from gangplugin.core.durations import parse_duration
from gangplugin.core.errors import InputError
from gangplugin.core.leader import ElectionConfig
from gangplugin.extender.component import ExtenderSettings
from gangplugin.extender.shared import ReservationSettings
from gangplugin.multikueue.controller import DispatchSettings
from gangplugin.server.serving import Election
from gangplugin.webhook.component import WebhookSettings

_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeOptions:
    """The command line of `gangplugin serve`, one field per option (see its --help)."""

    kubeconfig: str | None
    components: str
    health_bind: str
    health_tls_cert: str | None
    health_tls_key: str | None
    log_level: str
    log_format: str
    leader_elect: bool
    leader_election_namespace: str | None
    leader_election_id: str
    leader_election_identity: str | None
    leader_election_lease_duration: str
    leader_election_renew_deadline: str
    leader_election_retry_period: str
    grpc_bind: str
    grpc_tls_cert: str | None
    grpc_tls_key: str | None
    grpc_mtls_bind: str | None
    grpc_client_ca: str | None
    extender_bind: str
    extender_tls_cert: str | None
    extender_tls_key: str | None
    extender_client_ca: str | None
    extender_barrier_timeout: float
    extender_spares_per_ultraserver: int
    webhook_bind: str
    webhook_tls_cert: str | None
    webhook_tls_key: str | None
    console_bind: str
    console_tls_cert: str | None
    console_tls_key: str | None
    multikueue_namespace: str
    multikueue_answer_timeout: str
    multikueue_refusal_ttl: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeSettings:
    """Every component's settings; each is made with its own branch (`server.registry`)."""

    api: ApiSettings
    extender: ExtenderSettings
    reservations: ReservationSettings  # the gang reservations the extender and ungater share
    webhook: WebhookSettings
    multikueue: DispatchSettings
    console: ConsoleSettings


def _duration(value: str, option: str) -> float:
    try:
        return parse_duration(value, option)
    except InputError as err:
        raise click.BadParameter(err.problem, param_hint=err.field) from None


def _pairs(o: ServeOptions) -> None:
    for flag, cert, key in (
        ("health", o.health_tls_cert, o.health_tls_key),
        ("extender", o.extender_tls_cert, o.extender_tls_key),
        ("webhook", o.webhook_tls_cert, o.webhook_tls_key),
        ("grpc", o.grpc_tls_cert, o.grpc_tls_key),
        ("console", o.console_tls_cert, o.console_tls_key),
    ):
        if (cert is None) != (key is None):
            raise click.BadParameter("give both or neither", param_hint=f"--{flag}-tls-cert/--{flag}-tls-key")
    if o.extender_client_ca and not o.extender_tls_cert:
        raise click.BadParameter(
            "needs --extender-tls-cert/--extender-tls-key: client certificates are checked in TLS",
            param_hint="--extender-client-ca",
        )


def _api(o: ServeOptions) -> ApiSettings:
    try:
        return ApiSettings(
            bind=o.grpc_bind,
            tls_cert=o.grpc_tls_cert,
            tls_key=o.grpc_tls_key,
            mtls_bind=o.grpc_mtls_bind,
            client_ca=o.grpc_client_ca,
        )
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--grpc-mtls-bind") from None


def _multikueue(o: ServeOptions) -> DispatchSettings:
    return DispatchSettings(
        kueue_namespace=o.multikueue_namespace,
        answer_timeout=_duration(o.multikueue_answer_timeout, "--multikueue-answer-timeout"),
        refusal_ttl=_duration(o.multikueue_refusal_ttl, "--multikueue-refusal-ttl"),
    )


def _console(o: ServeOptions) -> ConsoleSettings:
    if not o.console_tls_cert or not o.console_tls_key:
        raise click.BadParameter(
            "the console receives users' tokens and serves HTTPS only: give its certificate and key",
            param_hint="--console-tls-cert/--console-tls-key",
        )
    return ConsoleSettings(bind=o.console_bind, tls_cert=o.console_tls_cert, tls_key=o.console_tls_key)


def settings_of(o: ServeOptions, wanted: Collection[str]) -> ServeSettings:
    """The settings tree; click.BadParameter naming the option for anything unusable. The
    options of the gRPC API, the dispatcher and the console are read only when they run
    (`wanted`)."""
    _pairs(o)
    return ServeSettings(
        api=_api(o) if "api" in wanted else ApiSettings(),
        extender=ExtenderSettings(
            bind=o.extender_bind,
            tls_cert=o.extender_tls_cert,
            tls_key=o.extender_tls_key,
            client_ca=o.extender_client_ca,
            barrier_timeout=o.extender_barrier_timeout,
        ),
        reservations=ReservationSettings(
            spares_per_ultraserver=o.extender_spares_per_ultraserver,
            barrier_timeout=o.extender_barrier_timeout,
        ),
        webhook=WebhookSettings(bind=o.webhook_bind, tls_cert=o.webhook_tls_cert, tls_key=o.webhook_tls_key),
        multikueue=_multikueue(o) if "multikueue" in wanted else DispatchSettings(),
        console=_console(o) if "console" in wanted else ConsoleSettings(),
    )


def _default_namespace() -> str:
    """The pod's namespace in a cluster (downward API or the service account), else the one the
    manifests and the local cluster use."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return _SA_NAMESPACE.read_text().strip() or "gangplugin-system"
    except OSError:
        return "gangplugin-system"


def _default_identity() -> str:
    """The pod name (a container restarted in the same pod renews its own lease at once), else
    client-go's hostname_uuid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"


def election_of(o: ServeOptions) -> Election | None:
    """The leader election (None: --no-leader-elect); click.BadParameter for bad durations."""
    if not o.leader_elect:
        return None
    try:
        config = ElectionConfig(
            _duration(o.leader_election_lease_duration, "--leader-election-lease-duration"),
            _duration(o.leader_election_renew_deadline, "--leader-election-renew-deadline"),
            _duration(o.leader_election_retry_period, "--leader-election-retry-period"),
        ).validate()
    except InputError as err:
        raise click.BadParameter(err.problem, param_hint=err.field) from None
    return Election(
        o.leader_election_namespace or _default_namespace(),
        o.leader_election_id,
        o.leader_election_identity or _default_identity(),
        config,
        os.environ.get("POD_NAME") or None,
        o.kubeconfig,
    )
