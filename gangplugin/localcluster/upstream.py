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


def kueue_versions() -> tuple[str, str]:
    """The Kueue versions gangplugin supports and tests: the oldest (the local cluster's
    default) and the newest."""
    v = versions()
    return v["KUEUE_VERSION"], v["KUEUE_NEWEST_VERSION"]


def jobset_version(kueue_version: str) -> str:
    """The JobSet a supported Kueue is built against (its go.mod), so that its jobset
    integration reads the JobSet API that runs."""
    v = versions()
    pairs = {v["KUEUE_VERSION"]: v["JOBSET_VERSION"], v["KUEUE_NEWEST_VERSION"]: v["JOBSET_NEWEST_VERSION"]}
    if kueue_version not in pairs:
        raise ClusterError(
            f"Kueue {kueue_version} is not a version the local cluster runs: choose "
            f"{' or '.join(pairs)} (GANGPLUGIN_KUEUE_VERSION; hack/versions.env pins them)"
        )
    return pairs[kueue_version]


def cache_dir() -> Path:
    return Path(os.environ.get("GANGPLUGIN_CACHE", Path.home() / ".cache" / "gangplugin"))


def build(binaries: Iterable[Path], log: Callable[[str], None], groups: Iterable[str] = ("cluster",)) -> None:
    """Build (or reuse) the pinned programs of `groups` (hack/build-upstream.sh's) and of any other
    group a binary of `binaries` is still missing from; without Go, the cached `binaries` must
    all be there already."""
    if shutil.which("go") is None and not all(p.exists() for p in binaries):
        raise ClusterError(
            f"no Go toolchain on PATH and no cached binaries in {cache_dir() / 'bin'}; "
            "install Go >= 1.26 and run `make up` again"
        )
    binaries, groups = tuple(binaries), tuple(groups)
    # The groups the chosen components name; then `extras` (the newest Kueue and its JobSet, the
    # job controllers) only when a binary the cluster needs is still missing.
    for group in dict.fromkeys((*groups, "extras")):
        if group not in groups and all(p.exists() for p in binaries):
            return
        log(f"building or reusing the pinned upstream binaries (hack/build-upstream.sh {group})")
        script = REPO / "hack" / "build-upstream.sh"
        proc = subprocess.run(
            [str(script), group], stdout=subprocess.PIPE, stderr=None, text=True, check=False
        )
        if proc.returncode != 0:
            raise ClusterError(
                "building the upstream binaries failed (see the messages above); "
                "fix the cause and run `make up` again"
            )


def check_binaries(binaries: Iterable[Path]) -> None:
    missing = [str(p) for p in binaries if not os.access(p, os.X_OK)]
    if missing:
        raise ClusterError(
            f"missing binaries: {', '.join(missing)}; run hack/build-upstream.sh cluster extras"
        )
