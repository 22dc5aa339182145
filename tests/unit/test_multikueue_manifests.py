"""The chart on a MultiKueue manager (`multikueue.manager: true`), rendered by the pinned helm:
the dispatcher runs with the API and the webhook, with only the reads the dispatcher adds; by
default none of it renders (a worker, or a single cluster)."""

from __future__ import annotations

from typing import Any

import yaml

from gangplugin.server.main import COMPONENTS, serve
from tests.support.manifests import template


def render(*flags: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(template(*flags)) if o]


def args(objs: list[dict[str, Any]]) -> list[str]:
    (deploy,) = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "gangplugin"]
    found: list[str] = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    return found


MANAGER = ("--set", "multikueue.manager=true", "--set", "multikueue.answerTimeout=90s")


def test_the_manager_runs_the_dispatcher_the_api_and_the_webhook() -> None:
    given = args(render(*MANAGER))
    (components,) = [a.split("=", 1)[1] for a in given if a.startswith("--components=")]
    assert components.split(",") == ["multikueue", "api", "webhook"]
    assert set(components.split(",")) <= set(COMPONENTS)
    assert "--multikueue-answer-timeout=90s" in given and "--multikueue-namespace=kueue-system" in given
    options = {opt for p in serve.params for opt in p.opts}
    assert {a.split("=", 1)[0] for a in given[1:]} <= options


def test_by_default_nothing_of_the_manager_renders() -> None:
    objs = render()
    assert not [a for a in args(objs) if a.startswith(("--components", "--multikueue"))]
    assert not [o for o in objs if "multikueue" in o["metadata"]["name"]]


def test_worker_kubeconfigs_are_readable_only_in_kueue_s_namespace() -> None:
    objs = render(*MANAGER)
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
