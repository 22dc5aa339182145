"""`make kind-up`'s cluster config as hack/kind-config.sh renders it for a cgroup v1 and a cgroup v2
host; kind itself loads and validates it in tests/e2e/test_kind_config.py."""

from __future__ import annotations

import subprocess

import yaml

from tests.support.kind import RENDER, render


def test_the_config_gives_kubelets_fail_cgroup_v1_false_on_a_cgroup_v1_host_only() -> None:
    v1, v2 = yaml.safe_load(render("1")), yaml.safe_load(render("2"))
    (patch,) = v1["kubeadmConfigPatches"]
    assert yaml.safe_load(patch) == {"kind": "KubeletConfiguration", "failCgroupV1": False}
    assert "kubeadmConfigPatches" not in v2
    assert {k: v for k, v in v1.items() if k != "kubeadmConfigPatches"} == v2
    assert len(v2["nodes"]) == 7 and sum(n["role"] == "worker" for n in v2["nodes"]) == 6
    failed = subprocess.run([str(RENDER), "3"], capture_output=True, text=True, check=False)
    assert failed.returncode == 2 and "neither 1 nor 2" in failed.stderr
