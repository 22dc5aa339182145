"""`make kind-up`'s cluster config, checked as far as this machine can: rendered for a cgroup v1
and a cgroup v2 host (hack/kind-config.sh), and given to kind itself (the pinned binary, with its
podman provider: no Docker engine here), which loads it strictly and validates it before it
provisions anything, and then stops at the node image, which no registry here serves. What kind
would do next (start the nodes, kubeadm init with the KubeletConfiguration patch) cannot run
here; the real nodes run the same kubelet with the same failCgroupV1 setting on this cgroup v1
machine (tests/e2e/test_real_nodes.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from gangplugin.localcluster.cluster import REPO, cache_dir, versions

RENDER = REPO / "hack" / "kind-config.sh"


def render(cgroup: str) -> str:
    out = subprocess.run([str(RENDER), cgroup], capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def kind_create(config: Path, name: str) -> subprocess.CompletedProcess[str]:
    kind = cache_dir() / "bin" / "kind"
    assert kind.exists(), f"{kind} is missing: hack/build-upstream.sh nodes builds it"
    return subprocess.run(
        [
            str(kind),
            "create",
            "cluster",
            "--name",
            name,
            "--config",
            str(config),
            "--image",
            versions()["KIND_NODE_IMAGE"],
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "KIND_EXPERIMENTAL_PROVIDER": "podman"},
    )


def test_the_config_gives_kubelets_fail_cgroup_v1_false_on_a_cgroup_v1_host_only() -> None:
    v1, v2 = yaml.safe_load(render("1")), yaml.safe_load(render("2"))
    (patch,) = v1["kubeadmConfigPatches"]
    assert yaml.safe_load(patch) == {"kind": "KubeletConfiguration", "failCgroupV1": False}
    assert "kubeadmConfigPatches" not in v2
    assert {k: v for k, v in v1.items() if k != "kubeadmConfigPatches"} == v2
    assert len(v2["nodes"]) == 7 and sum(n["role"] == "worker" for n in v2["nodes"]) == 6
    failed = subprocess.run([str(RENDER), "3"], capture_output=True, text=True, check=False)
    assert failed.returncode == 2 and "neither 1 nor 2" in failed.stderr


def test_kind_loads_and_validates_the_config_and_stops_only_at_the_node_image(tmp_path: Path) -> None:
    config = tmp_path / "kind.yaml"
    config.write_text(render("1"))
    out = kind_create(config, "gangplugin-config-check")
    assert out.returncode != 0, "a node image was found: this machine cannot run kind's nodes"
    image = versions()["KIND_NODE_IMAGE"]
    assert f"Ensuring node image ({image})" in out.stderr, out.stderr
    assert "failed to pull image" in out.stderr, out.stderr


def test_kind_refuses_a_config_it_does_not_know(tmp_path: Path) -> None:
    config = tmp_path / "kind.yaml"
    config.write_text(render("1").replace("kubeadmConfigPatches:", "kubeadmConfigPatch:"))
    out = kind_create(config, "gangplugin-config-check")
    assert out.returncode != 0 and 'unknown field "kubeadmConfigPatch"' in out.stderr, out.stderr
    assert "Ensuring node image" not in out.stderr, "validated before provisioning"
