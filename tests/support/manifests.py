"""The install's manifests rendered by the real programs of the binary cache: deploy/manifests by
kubectl (kustomize) as an admin's overlay renders it (the base, the scheduler's Component, the
scheduler's image set to the pinned Kubernetes, kubectl's default load restrictions), and the
Helm chart by helm."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gangplugin.localcluster.cluster import REPO, cache_dir

BASE = REPO / "deploy" / "manifests" / "base"
SCHEDULER_COMPONENT = REPO / "deploy" / "manifests" / "components" / "scheduler"
POD_GATE_COMPONENT = REPO / "deploy" / "manifests" / "components" / "pod-gate-policy"
CERT_MANAGER = "cert-manager.io/v1"
CHART = REPO / "deploy" / "helm" / "gangplugin"
KUBE_VERSION = "v1.33.5"  # a cluster helm template pretends to talk to


def cached_binary(name: str) -> Path:
    """A program built with the pinned upstream ones; fails loudly when it is missing."""
    path = cache_dir() / "bin" / name
    if not path.exists():
        raise AssertionError(f"{path} is missing: run `make build` (hack/build-upstream.sh) first")
    return path


def kubectl() -> Path:
    return cached_binary("kubectl")


def versions() -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in (REPO / "hack" / "versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )


def kustomize(directory: Path) -> str:
    """`kubectl kustomize` with its default load restrictor, as `kubectl apply -k` renders."""
    out = subprocess.run(
        [str(kubectl()), "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, f"kubectl kustomize {directory} failed: {out.stderr}"
    return out.stdout


def overlay_of(
    prefix: str,
    *,
    resources: Sequence[Path] = (),
    components: Sequence[Path] = (),
    images: Sequence[dict[str, str]] = (),
) -> Path:
    """A kustomization of these in a new directory outside the checkout (kustomize takes no
    absolute path: the others are named relative to it)."""
    directory = Path(tempfile.mkdtemp(prefix=f"gangplugin-{prefix}-"))
    fields = {
        "resources": [os.path.relpath(p, directory) for p in resources],
        "components": [os.path.relpath(p, directory) for p in components],
        "images": list(images),
    }
    body: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(body | {k: v for k, v in fields.items() if v})
    )
    return directory


@cache
def overlay() -> Path:
    """An admin's overlay with the second scheduler (docs/install.md), outside the checkout."""
    return overlay_of(
        "overlay",
        resources=[BASE],
        components=[SCHEDULER_COMPONENT],
        images=[{"name": "registry.k8s.io/kube-scheduler", "newTag": versions()["KUBERNETES_VERSION"]}],
    )


@cache
def render_text() -> str:
    """The base with the scheduler's Component, as an overlay renders it."""
    return kustomize(overlay())


@cache
def render() -> tuple[dict[str, Any], ...]:
    """The rendered objects, parsed once (tests only read them)."""
    return tuple(o for o in yaml.load_all(render_text(), Loader=yaml.CSafeLoader) if o)


def helm() -> Path:
    return cached_binary("helm")


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm()), *args], capture_output=True, text=True, check=False, timeout=120)


@cache
def template(*flags: str) -> str:
    out = run_helm(
        "template",
        "gangplugin",
        str(CHART),
        "--namespace",
        "gangplugin-system",
        "--kube-version",
        KUBE_VERSION,
        *flags,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout
