"""tests/support is the one home of what the tests, the benchmarks and the soak share: the suites
hold only tests and their pytest fixtures, no module imports a test module, and the home imports
none of the suites it serves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITES = ("tests/e2e", "tests/unit")
PYTEST_FILES = {"conftest.py", "__init__.py"}


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def imported(path: Path) -> set[str]:
    """The modules `path` imports (a relative import as "." and its module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            out.add("." * node.level + module)
            out.update(f"{module}.{a.name}" for a in node.names if not node.level)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_suites_hold_only_tests_and_their_fixtures() -> None:
    helpers = [
        str(p.relative_to(ROOT))
        for p in sources(*SUITES)
        if not p.name.startswith("test_") and p.name not in PYTEST_FILES
    ]
    assert helpers == [], f"helpers belong in tests/support/: {helpers}"


@pytest.mark.parametrize("folder", ["tests", "bench"])
def test_no_module_imports_a_test_module_or_imports_relatively(folder: str) -> None:
    wrong = {
        f"{p.relative_to(ROOT)}: {m}"
        for p in sources(folder)
        for m in imported(p)
        if m.startswith(".") or any(part.startswith("test_") for part in m.split("."))
    }
    assert not wrong, sorted(wrong)


def test_the_home_imports_none_of_the_suites_it_serves() -> None:
    wrong = {
        f"{p.relative_to(ROOT)}: {m}"
        for p in sources("tests/support")
        for m in imported(p)
        if m.startswith(("tests.e2e", "tests.unit", "tests.soak"))
    }
    assert not wrong, sorted(wrong)


def test_the_benches_share_only_the_home_and_run_the_soak() -> None:
    wrong = {
        f"{p.relative_to(ROOT)}: {m}"
        for p in sources("bench")
        for m in imported(p)
        if m.startswith("tests.") and not m.startswith(("tests.support", "tests.soak"))
    }
    assert not wrong, sorted(wrong)
