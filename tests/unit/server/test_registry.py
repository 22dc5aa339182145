"""`gangplugin serve` makes its components from one registry and one settings tree: each gets
its own settings when it is made, and says itself whether it needs the leader Lease."""

from __future__ import annotations

from typing import Any

import click
import pytest

from gangplugin.api.component import ApiSettings
from gangplugin.server.main import serve
from gangplugin.server.registry import DEFAULT_COMPONENTS, REGISTRY
from gangplugin.server.settings import ServeOptions, settings_of


def options(**changed: Any) -> ServeOptions:
    """`serve`'s defaults, as click gives them, with `changed`."""
    values = {p.name: p.default for p in serve.params if p.name is not None}
    return ServeOptions(**{**values, **changed})


def test_every_component_is_made_from_its_line_with_its_settings() -> None:
    settings = settings_of(
        options(
            grpc_bind="127.0.0.1:1",
            webhook_bind="127.0.0.1:2",
            extender_spares_per_ultraserver=2,
            console_bind="127.0.0.1:3",
            console_tls_cert="/tls.crt",
            console_tls_key="/tls.key",
        ),
        REGISTRY,
    )
    made = {name: make(settings) for name, make in REGISTRY.items()}
    leading = {name for name, c in made.items() if c.needs_leader}
    assert leading == {"admission", "extender", "ungater", "plans", "multikueue"}
    assert made["api"].settings.bind == "127.0.0.1:1"  # type: ignore[attr-defined]
    assert made["webhook"].settings.bind == "127.0.0.1:2"  # type: ignore[attr-defined]
    assert made["console"].settings.bind == "127.0.0.1:3"  # type: ignore[attr-defined]
    assert made["ungater"].reservation_settings.spares_per_ultraserver == 2  # type: ignore[attr-defined]
    assert made["extender"].reservation_settings is made["ungater"].reservation_settings  # type: ignore[attr-defined]
    assert all(callable(c.setup) and callable(c.start) for c in made.values())
    assert tuple(n for n in REGISTRY if n not in ("multikueue", "console")) == DEFAULT_COMPONENTS


def test_settings_of_a_component_not_run_are_not_read() -> None:
    bad = options(multikueue_answer_timeout="soon", grpc_mtls_bind="0.0.0.0:1")
    settings_of(bad, ["admission"])  # neither the dispatcher's nor the API's options are read
    with pytest.raises(click.BadParameter, match="soon"):
        settings_of(bad, ["multikueue"])
    with pytest.raises(click.BadParameter, match="--grpc-client-ca"):
        settings_of(bad, ["api"])


def test_api_settings_refuse_half_a_pair_naming_the_options() -> None:
    with pytest.raises(ValueError, match="--grpc-tls-cert and --grpc-tls-key go together"):
        ApiSettings(tls_cert="/c.pem")
    with pytest.raises(ValueError, match="--grpc-mtls-bind needs --grpc-tls-cert"):
        ApiSettings(mtls_bind="0.0.0.0:1", client_ca="/ca.pem")


def test_the_console_serves_https_only() -> None:
    settings_of(options(), ["admission"])  # its options are read only when it runs
    with pytest.raises(click.BadParameter, match="serves HTTPS only"):
        settings_of(options(), ["console"])
    with pytest.raises(click.BadParameter, match="give both or neither"):
        settings_of(options(console_tls_cert="/tls.crt"), ["console"])
