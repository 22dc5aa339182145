"""The committed gRPC code (gangplugin/api/gen/) is what proto/ generates with the pinned
grpcio-tools and mypy-protobuf: regenerated into a temporary folder and compared file by file."""

from __future__ import annotations

from pathlib import Path

from gangplugin.api.generate import GEN, generate


def test_committed_grpc_code_matches_proto(tmp_path: Path) -> None:
    assert generate(tmp_path) == 0
    fresh = tmp_path / "gangplugin" / "api" / "gen"
    names = sorted(p.name for p in fresh.iterdir())
    assert names == sorted(p.name for p in GEN.iterdir() if p.name != "__pycache__"), (
        "gangplugin/api/gen/ differs from what proto/ generates: run `make proto` and commit it"
    )
    stale = [n for n in names if (fresh / n).read_bytes() != (GEN / n).read_bytes()]
    assert stale == [], f"stale generated files {stale}: run `make proto` and commit gangplugin/api/gen/"
