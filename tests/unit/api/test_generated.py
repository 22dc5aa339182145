"""The committed gRPC code (gangplugin/api/gen/, gangplugin/localcluster/realnodes/gen/) is what
proto/ generates with the pinned grpcio-tools and mypy-protobuf: regenerated into a temporary
folder and compared file by file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangplugin.api.generate import ROOT, TARGETS, generate


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen")
    assert generate(out) == 0
    return out


@pytest.mark.parametrize("package", sorted(TARGETS))
def test_committed_grpc_code_matches_proto(fresh: Path, package: str) -> None:
    new, committed = fresh / package, ROOT / package
    names = sorted(p.name for p in new.iterdir())
    assert names == sorted(p.name for p in committed.iterdir() if p.name != "__pycache__"), (
        f"{package}/ differs from what proto/ generates: run `make proto` and commit it"
    )
    stale = [n for n in names if (new / n).read_bytes() != (committed / n).read_bytes()]
    assert stale == [], f"stale generated files {stale}: run `make proto` and commit {package}/"
