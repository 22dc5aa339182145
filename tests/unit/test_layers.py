"""Imports only go downward: core <- kube <- runtime <- readmodel <- components <- assembly
(server, cli, localcluster). A module importing upward, or a component importing another
component, fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "gangplugin"
LAYERS = ("core", "kube", "runtime", "readmodel")  # each may import the ones before it
COMPONENTS = {"admission", "extender", "plans", "webhook", "api", "sim", "multikueue", "console"}
ASSEMBLY = {"server", "cli", "localcluster"}


def allowed(package: str) -> set[str]:
    if package in LAYERS:
        return set(LAYERS[: LAYERS.index(package) + 1])
    if package in COMPONENTS:
        return {*LAYERS, package}  # never another component
    return {*LAYERS, *COMPONENTS, *ASSEMBLY} - ({"localcluster"} if package == "cli" else set())


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gangplugin."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.module == "gangplugin":
            out.update(a.name for a in node.names if (ROOT / a.name).is_dir())
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("gangplugin."))
    return out


@pytest.mark.parametrize(
    "path", sorted(p for p in ROOT.rglob("*.py") if p.parent != ROOT and "gen" not in p.parts), ids=str
)
def test_imports_go_downward(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    wrong = imports(path) - allowed(package)
    assert not wrong, f"{path.relative_to(ROOT)} ({package}) imports {sorted(wrong)}"


def test_a_component_importing_another_is_caught() -> None:
    """The rule above, on the edge the gangs API once had (it read the admission check's view)."""
    assert "admission" not in allowed("api")
    assert "readmodel" in allowed("api") and "readmodel" not in allowed("runtime")
