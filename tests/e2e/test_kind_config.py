"""`make kind-up`'s cluster config, checked as far as this machine can: rendered for a cgroup v1
and a cgroup v2 host (hack/kind-config.sh), and given to kind itself (the pinned binary, with its
podman provider: no Docker engine here), which loads it strictly and validates it before it
provisions anything, and then stops at the node image: the test names one no registry serves,
so that kind stops there on any machine (here no registry is reachable at all). What kind
would do next (start the nodes, kubeadm init with the KubeletConfiguration patch) cannot run
here; the real nodes run the same kubelet with the same failCgroupV1 setting on this cgroup v1
machine (tests/e2e/test_real_nodes.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gangplugin.localcluster.cluster import cache_dir
from tests.support.kind import render

# Pulled from a registry on this machine that does not exist: refused at once, everywhere.
NO_IMAGE = "localhost/gangplugin-no-such-kind-node:v0"


def kind_create(config: Path, name: str) -> subprocess.CompletedProcess[str]:
    kind = cache_dir() / "bin" / "kind"
    assert kind.exists(), f"{kind} is missing: hack/build-upstream.sh nodes builds it"
    argv = [str(kind), "create", "cluster", "--name", name, "--config", str(config), "--image", NO_IMAGE]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "KIND_EXPERIMENTAL_PROVIDER": "podman"},
    )


def test_kind_loads_and_validates_the_config_and_stops_only_at_the_node_image(tmp_path: Path) -> None:
    config = tmp_path / "kind.yaml"
    config.write_text(render("1"))
    out = kind_create(config, "gangplugin-config-check")
    assert out.returncode != 0, out.stderr
    assert f"Ensuring node image ({NO_IMAGE})" in out.stderr, out.stderr
    assert "failed to pull image" in out.stderr, out.stderr


def test_kind_refuses_a_config_it_does_not_know(tmp_path: Path) -> None:
    config = tmp_path / "kind.yaml"
    config.write_text(render("1").replace("kubeadmConfigPatches:", "kubeadmConfigPatch:"))
    out = kind_create(config, "gangplugin-config-check")
    assert out.returncode != 0, out.stderr
    assert "field kubeadmConfigPatch not found in type v1alpha4.Cluster" in out.stderr, out.stderr
    assert "Ensuring node image" not in out.stderr, "validated before provisioning"
