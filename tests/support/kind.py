"""`make kind-up`'s cluster config as hack/kind-config.sh renders it."""

from __future__ import annotations

import subprocess

from gangplugin.localcluster.cluster import REPO

RENDER = REPO / "hack" / "kind-config.sh"


def render(cgroup: str) -> str:
    """hack/kind-config.sh's config for a host of cgroup v`cgroup`."""
    out = subprocess.run([str(RENDER), cgroup], capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout
