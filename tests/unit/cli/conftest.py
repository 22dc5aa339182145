"""gangctl's real entry point run in-process, as the CLI tests call it."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from gangplugin.cli import main as main_module


@pytest.fixture
def gangctl(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., tuple[int, str, str]]:
    """`gangctl(*args)` -> (exit status, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["gangctl", *args])
        try:
            main_module.main()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run
