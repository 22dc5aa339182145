"""What gangctl prints: `-o table|wide|json|yaml|name` as kubectl has them, checked in one place
(`output_option`) and printed by one printer (`emit`; tables by `core.table`).

Each command says which formats it has; a format it lacks is bad input like any other (exit 2,
one line naming --output and the formats it takes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click
import yaml

from gangplugin.core.errors import InputError

TABLE, WIDE, JSON, YAML, NAME = "table", "wide", "json", "yaml", "name"
#: The machine-readable formats: the document itself, the same for every command.
DOCUMENTS = (JSON, YAML)

_F = TypeVar("_F", bound=Callable[..., Any])


def check_output(value: str, formats: tuple[str, ...]) -> str:
    if value not in formats:
        raise InputError("--output", f"{value!r} is not one of {', '.join(formats)}")
    return value


def output_option(*formats: str) -> Callable[[_F], _F]:
    """`-o/--output` taking `formats` (the first is the default). Free text checked by us rather
    than click.Choice, so a bad value is one line naming the flag like every other error."""

    def check(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
        return check_output(value, formats)

    help_text = f"{', '.join(formats)} (default {formats[0]})"
    return click.option("-o", "--output", default=formats[0], callback=check, help=help_text)


def document(doc: Any, output: str) -> str:
    """`doc` as JSON (2-space indent, UTF-8 as is) or YAML (keys in their order)."""
    if output == JSON:
        return json.dumps(doc, indent=2, ensure_ascii=False)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).rstrip("\n")


def emit(doc: Any, output: str, text: Callable[[], str]) -> None:
    """Print `doc` in a machine-readable format, else what `text` renders (table, wide, name;
    nothing at all for `-o name` of no objects, as kubectl)."""
    out = document(doc, output) if output in DOCUMENTS else text()
    if out:
        click.echo(out)


def message_doc(message: Any) -> dict[str, Any]:
    """A gRPC reply as the JSON the API's proto3 mapping gives, every field present."""
    from google.protobuf.json_format import MessageToDict

    doc: dict[str, Any] = MessageToDict(message, always_print_fields_with_no_presence=True)
    return doc


def age(seconds: int) -> str:
    """kubectl's short ages: 45s, 3m12s, 47m, 5h3m, 30h, 3d5h, 12d."""
    m, h, d = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if m < 10:
        return f"{m}m{seconds % 60}s" if seconds % 60 else f"{m}m"
    if h < 3:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d"
