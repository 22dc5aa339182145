"""gangctl's one output module and one table printer: every command checks -o the same way, and
tables are padded as kubectl pads them."""

from __future__ import annotations

import json
from typing import Any

import click
import pytest
import yaml

from gangplugin.cli import main as main_module
from gangplugin.cli.output import age, document
from gangplugin.core.table import column_widths, table


def test_table_pads_columns_and_shows_missing_values_as_dashes() -> None:
    out = table(["NAME", "READY", "DOMAIN"], [["a-long-name", "1/2", None], ["b", "10/10", "us-1"]])
    assert out.splitlines() == [
        "NAME         READY  DOMAIN",
        "a-long-name  1/2    -",
        "b            10/10  us-1",
    ]


def test_later_rows_keep_the_widths_of_the_first_table() -> None:
    header = ["NAME", "PHASE"]
    widths = column_widths(header, [["short", "Pending"]])
    assert table(header, [["x", "Running"]], widths, show_header=False) == "x      Running"
    # A longer cell widens its column rather than being cut.
    assert table(header, [["much-longer", "Running"]], widths, show_header=False) == "much-longer  Running"


def test_documents_keep_key_order_and_unicode() -> None:
    doc = {"z": 1, "a": ["é"]}
    assert json.loads(document(doc, "json")) == doc and '"é"' in document(doc, "json")
    assert yaml.safe_load(document(doc, "yaml")) == doc and document(doc, "yaml").startswith("z: 1")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45s"), (192, "3m12s"), (2820, "47m"), (18180, "5h3m"), (108000, "30h"), (1036800, "12d")],
)
def test_ages_as_kubectl_prints_them(seconds: int, text: str) -> None:
    assert age(seconds) == text


def _commands() -> list[tuple[list[str], click.Command]]:
    main_module._register()
    out = []

    def walk(path: list[str], cmd: click.Command) -> None:
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                walk([*path, name], sub)
        elif any("--output" in p.opts for p in cmd.params if isinstance(p, click.Option)):
            out.append((path, cmd))

    walk([], main_module.cli)
    return out


def test_every_command_with_output_checks_it_in_one_place(gangctl: Any) -> None:
    commands = _commands()
    assert {" ".join(p) for p, _ in commands} >= {
        "place",
        "plans search",
        "plans status",
        "plans describe",
        "plans list",
        "get gangs",
        "explain",
        "wait",
        "simulate",
    }
    for path, cmd in commands:
        option = next(p for p in cmd.params if isinstance(p, click.Option) and "--output" in p.opts)
        formats = option.help.split(" (default")[0] if option.help else ""
        code, out, err = gangctl(*path, "-o", "bogus")
        assert (code, out) == (2, ""), (path, err)
        assert err == f"error: --output: 'bogus' is not one of {formats}\n", path
