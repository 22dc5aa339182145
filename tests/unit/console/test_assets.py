"""The browser libraries the console serves are the pinned ones, vendored unchanged (their
SHA256SUMS written by hack/vendor-console-assets.sh), and the pages load exactly those."""

from __future__ import annotations

import hashlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
VENDOR = REPO / "gangplugin" / "console" / "static" / "vendor"


def pins() -> dict[str, str]:
    lines = (REPO / "hack" / "versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_vendored_files_are_the_ones_checked_in() -> None:
    sums = dict(reversed(line.split("  ", 1)) for line in (VENDOR / "SHA256SUMS").read_text().splitlines())
    assert sorted(sums) == sorted(p.name for p in VENDOR.glob("*.js"))
    for name, digest in sums.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name


def test_pages_load_the_pinned_versions() -> None:
    v = pins()
    base = (REPO / "gangplugin" / "console" / "templates" / "base.html").read_text()
    for script in (f"htmx-{v['HTMX_VERSION']}.min.js", f"htmx-ext-sse-{v['HTMX_SSE_VERSION']}.min.js"):
        assert (VENDOR / script).exists() and f"/static/vendor/{script}" in base
