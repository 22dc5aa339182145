"""The pinned upstream programs: their versions (`hack/versions.env`), the cache they are built
into (`~/.cache/gangplugin`, or GANGPLUGIN_CACHE) and the build that fills it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from gangplugin.localcluster.errors import ClusterError

REPO = Path(__file__).resolve().parents[2]


def versions() -> dict[str, str]:
    """hack/versions.env as a dict (KUEUE_VERSION -> v0.17.0, ...)."""
    out: dict[str, str] = {}
    for line in (REPO / "hack" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def cache_dir() -> Path:
    return Path(os.environ.get("GANGPLUGIN_CACHE", Path.home() / ".cache" / "gangplugin"))


def build(binaries: Iterable[Path], log: Callable[[str], None]) -> None:
    """Build (or reuse) every pinned program with hack/build-upstream.sh; without Go, the cached
    `binaries` must all be there already."""
    if shutil.which("go") is None and not all(p.exists() for p in binaries):
        raise ClusterError(
            f"no Go toolchain on PATH and no cached binaries in {cache_dir() / 'bin'}; "
            "install Go >= 1.26 and run `make up` again"
        )
    log("building or reusing the pinned upstream binaries (hack/build-upstream.sh)")
    script = REPO / "hack" / "build-upstream.sh"
    proc = subprocess.run([str(script)], stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if proc.returncode != 0:
        raise ClusterError(
            "building the upstream binaries failed (see the messages above); "
            "fix the cause and run `make up` again"
        )


def check_binaries(binaries: Iterable[Path]) -> None:
    missing = [str(p) for p in binaries if not os.access(p, os.X_OK)]
    if missing:
        raise ClusterError(f"missing binaries: {', '.join(missing)}; run hack/build-upstream.sh")
