"""tests/support is the one home of what the tests, the benchmarks and the soak share: the suites
hold only tests and their pytest fixtures, no module imports a test module, and the home imports
none of the suites it serves."""

from __future__ import annotations

import ast
from collections.abc import Callable
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


def imports_where(folder: str, wrong: Callable[[str], bool]) -> list[str]:
    """Where a module under `folder` imports one that `wrong` holds for."""
    return sorted({f"{p.relative_to(ROOT)}: {m}" for p in sources(folder) for m in imported(p) if wrong(m)})


@pytest.mark.parametrize("folder", ["tests", "bench"])
def test_no_module_imports_a_test_module_or_imports_relatively(folder: str) -> None:
    def test_module_or_relative(m: str) -> bool:
        return m.startswith(".") or any(part.startswith("test_") for part in m.split("."))

    assert imports_where(folder, test_module_or_relative) == []


def test_the_home_imports_none_of_the_suites_it_serves() -> None:
    assert (
        imports_where("tests/support", lambda m: m.startswith(("tests.e2e", "tests.unit", "tests.soak")))
        == []
    )


def test_the_benches_share_only_the_home_and_run_the_soak() -> None:
    def other_tests(m: str) -> bool:
        return m.startswith("tests.") and not m.startswith(("tests.support", "tests.soak"))

    assert imports_where("bench", other_tests) == []
