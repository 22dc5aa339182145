"""Imports only go downward: core <- kube <- runtime <- components <- assembly (server, cli,
localcluster). A module importing upward, or a component importing another component, fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "gangplugin"
COMPONENTS = {"admission", "extender", "plans", "webhook", "api", "sim", "multikueue", "console"}
ASSEMBLY = {"server", "cli", "localcluster"}


def allowed(package: str) -> set[str]:
    if package == "core":
        return {"core"}
    if package == "kube":
        return {"core", "kube"}
    if package == "runtime":
        return {"core", "kube", "runtime"}
    if package in COMPONENTS:
        # the gangs API reads the admission check's view of gangs: the one sanctioned edge
        return {"core", "kube", "runtime", package} | ({"admission"} if package == "api" else set())
    return {"core", "kube", "runtime", *COMPONENTS, *ASSEMBLY} - (
        {"localcluster"} if package == "cli" else set()
    )


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gangplugin."):
            out.add(node.module.split(".")[1])
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
