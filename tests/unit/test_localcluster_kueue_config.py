"""One source for Kueue's configuration: the shipped patch adds what gangplugin needs to a
Configuration (frameworks unioned, never replaced), and the local cluster's own Configuration
is its local settings plus that very patch."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gangplugin.localcluster.cluster import LocalCluster
from gangplugin.localcluster.components import kueue
from gangplugin.localcluster.kueue_config import merge, shipped_patch

# The part of Kueue v0.17.0's own default Configuration (config/components/manager) a merge touches.
KUEUE_DEFAULT: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "controller": {
        "groupKindConcurrency": {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5},
    },
    "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob", "pod"]},
}


def contains(whole: Any, part: Any) -> bool:
    """Every setting of `part` is in `whole` (lists: every item)."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and contains(whole[k], v) for k, v in part.items())
    if isinstance(part, list):
        return isinstance(whole, list) and all(any(contains(w, p) for w in whole) for p in part)
    return bool(whole == part)


def test_maps_merge_lists_union_and_the_patch_s_values_hold() -> None:
    base = {"a": {"x": 1, "y": [1, 2]}, "frameworks": ["batch/job", "pod"], "keep": True}
    patch = {"a": {"y": [2, 3], "z": 0}, "frameworks": ["jobset.x-k8s.io/jobset", "batch/job"], "keep": False}
    before = copy.deepcopy((base, patch))
    merged = merge(base, patch)
    assert merged == {
        "a": {"x": 1, "y": [1, 2, 3], "z": 0},
        "frameworks": ["batch/job", "pod", "jobset.x-k8s.io/jobset"],
        "keep": False,
    }
    assert (base, patch) == before, "neither input changes"
    merged["a"]["y"].append(4)
    assert base["a"]["y"] == [1, 2] and patch["a"]["y"] == [2, 3], "the result shares nothing with them"


def test_the_shipped_patch_adds_to_kueue_s_default_and_drops_nothing() -> None:
    patch = shipped_patch()
    merged = merge(KUEUE_DEFAULT, patch)
    concurrency = merged["controller"]["groupKindConcurrency"]
    before = KUEUE_DEFAULT["controller"]["groupKindConcurrency"]
    assert all(concurrency[kind] >= n for kind, n in before.items()), "concurrency only ever raised"
    # as Kueue v0.19.2's own manifests have it (v0.17.0's run one Workload reconcile less)
    assert concurrency == {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10}
    rest = {k: v for k, v in KUEUE_DEFAULT.items() if k != "controller"}
    assert contains(merged, rest), "every other setting of the cluster's Configuration stays"
    assert contains(merged, patch), "and every setting gangplugin needs is there"
    assert merged["integrations"] == KUEUE_DEFAULT["integrations"]
    assert merged["waitForPodsReady"] == {
        "timeout": "8760h",
        "blockAdmission": False,
        "recoveryTimeout": "0s",
    }


@pytest.mark.parametrize(
    ("components", "frameworks"),
    [
        (None, ["batch/job", "jobset.x-k8s.io/jobset", "pod"]),
        (("kube-controller-manager", "kueue"), ["batch/job", "pod"]),
    ],
    ids=["default", "control-plane-and-kueue"],
)
def test_the_local_configuration_is_its_settings_plus_the_shipped_patch(
    tmp_path: Path, components: tuple[str, ...] | None, frameworks: list[str]
) -> None:
    cluster = LocalCluster(state_dir=tmp_path, components=components)
    config = kueue.configuration(cluster.spec)
    assert contains(config, shipped_patch())
    assert config["integrations"]["frameworks"] == frameworks, "the frameworks of the controllers that run"
    assert config["webhook"]["port"] == cluster.ports.kueue_webhook
    assert config["leaderElection"] == {"leaderElect": False}
