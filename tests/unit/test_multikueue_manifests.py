"""The MultiKueue manager's install (deploy/manifests/multikueue-manager), rendered by the pinned
kubectl: the base running the dispatcher, with only the reads the dispatcher adds."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

from gangplugin.localcluster.cluster import REPO
from gangplugin.server.main import COMPONENTS
from tests.unit.test_manifests import kubectl

OVERLAY = REPO / "deploy" / "manifests" / "multikueue-manager"


def render() -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(kubectl()), "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(OVERLAY)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, f"kubectl kustomize failed: {out.stderr}"
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def test_the_manager_runs_the_dispatcher_the_api_and_the_webhook() -> None:
    objs = render()
    (deploy,) = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "gangplugin"]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    (components,) = [a.split("=", 1)[1] for a in args if a.startswith("--components=")]
    assert components.split(",") == ["multikueue", "api", "webhook"]
    assert set(components.split(",")) <= set(COMPONENTS)


def test_worker_kubeconfigs_are_readable_only_in_kueue_s_namespace() -> None:
    objs = render()
    roles = [o for o in objs if o["kind"] == "Role" and any("secrets" in r["resources"] for r in o["rules"])]
    assert [(r["metadata"]["namespace"], r["rules"]) for r in roles] == [
        ("kueue-system", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]}])
    ]
    cluster_wide = [o for o in objs if o["kind"] == "ClusterRole"]
    assert not any("secrets" in r["resources"] for o in cluster_wide for r in o["rules"])
    (mk,) = [o for o in cluster_wide if o["metadata"]["name"] == "gangplugin-multikueue"]
    assert mk["rules"] == [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["multikueueclusters", "multikueueconfigs"],
            "verbs": ["list", "watch"],
        }
    ]
    bound = {
        (o["kind"], o["roleRef"]["name"]): o["subjects"]
        for o in objs
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and o["roleRef"]["name"].startswith("gangplugin-multikueue")
    }
    sa = [{"kind": "ServiceAccount", "name": "gangplugin", "namespace": "gangplugin-system"}]
    assert bound == {
        ("ClusterRoleBinding", "gangplugin-multikueue"): sa,
        ("RoleBinding", "gangplugin-multikueue-kubeconfigs"): sa,
    }
