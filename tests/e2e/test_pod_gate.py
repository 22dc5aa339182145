"""The placement gate, both ways a cluster can put a gang pod behind it as it is created: the
MutatingAdmissionPolicy the API server runs (the chart's podGate policy, what the local cluster
uses where Kubernetes serves it) and gangplugin's mutating webhook (podGate webhook, any
version). Both must answer every pod as the webhook's rule says (`gate_patch`, unit-tested in
tests/unit/webhook/test_review.py): the same pods gated, other gates kept, the gate never twice,
a PodGroup gang's pod in its PodGroup, no other pod touched. Pods are created as dry runs: the
answer is what admission made of them, nothing is stored."""

from __future__ import annotations

import copy
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from gangplugin.core.names import BIND_MODE_LABEL, GANG_LABEL
from gangplugin.kube.client import PODS, Client
from gangplugin.kube.discovery import serves
from gangplugin.kube.resources import PODGROUPS
from gangplugin.localcluster.components.gangplugin import MUTATING_POLICIES, gate_pods
from gangplugin.webhook.review import gate_patch
from tests.support.cluster import E2ECluster, local_of

POLICY = "gangplugin-placement-gate"


def _pod(name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


def _gang(mode: str, gang: str = "g") -> dict[str, str]:
    return {GANG_LABEL: gang, BIND_MODE_LABEL: mode}


CASES = [
    _pod("ungate", _gang("Ungate")),
    _pod("ungate-other-gate", _gang("Ungate"), schedulingGates=[{"name": "example.com/other"}]),
    _pod("ungate-gated-already", _gang("Ungate"), schedulingGates=[{"name": "gangplugin.io/placement"}]),
    _pod("podgroup", _gang("PodGroup")),
    _pod("ungate-created-bound", _gang("Ungate"), nodeName="node-1"),
    _pod("ungate-no-gang", _gang("Ungate", gang="")),
    _pod("extender", _gang("Extender")),
    _pod("plain", {"app": "web"}),
]


def _expected(pod: dict[str, Any]) -> tuple[list[str], str | None]:
    """The gates and PodGroup `gate_patch` gives the pod (its JSON patch applied)."""
    spec = copy.deepcopy(pod["spec"])
    for op in gate_patch(pod):
        field = op["path"].removeprefix("/spec/")
        if field == "schedulingGates/-":
            spec["schedulingGates"].append(op["value"])
        else:
            spec[field] = op["value"]
    return _result({"spec": spec})


def _result(pod: dict[str, Any]) -> tuple[list[str], str | None]:
    group = pod["spec"].get("schedulingGroup") or {}
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []], group.get("podGroupName")


def _admitted(client: Client, namespace: str, pod: dict[str, Any]) -> tuple[list[str], str | None]:
    made = client.request("POST", PODS.path(namespace), body=pod, params={"dryRun": "All"})
    return _result(made)


@pytest.fixture
def webhook_gate(cluster: E2ECluster) -> Iterator[None]:
    """The cluster's gate swapped for the webhook, and back to the policy afterwards."""
    local = local_of(cluster)
    try:  # the policy comes back even when the swap fails half-way
        gate_pods(cluster.client, local.spec, policy=False)
        yield
    finally:
        gate_pods(cluster.client, local.spec, policy=True)


def _answers(client: Client, namespace: str) -> dict[str, tuple[list[str], str | None]]:
    answers = {p["metadata"]["name"]: _admitted(client, namespace, p) for p in CASES}
    with_groups = serves(client, PODGROUPS)  # else the API server drops spec.schedulingGroup
    for pod in CASES:
        gates, group = _expected(pod)
        assert answers[pod["metadata"]["name"]] == (gates, group if with_groups else None), pod
    return answers


def test_the_policy_gates_what_the_webhook_rule_says(cluster: E2ECluster, namespace: str) -> None:
    client = cluster.client
    assert client.get_or_none(MUTATING_POLICIES, POLICY) is not None, "Kubernetes >= 1.36: the policy"
    answers = _answers(client, namespace)
    assert answers["ungate"][0] == ["gangplugin.io/placement"]
    assert answers["ungate-other-gate"][0] == ["example.com/other", "gangplugin.io/placement"]
    assert answers["ungate-gated-already"][0] == ["gangplugin.io/placement"]
    assert answers["plain"] == ([], None) and answers["extender"] == ([], None)


def test_the_webhook_gates_the_same_pods(cluster: E2ECluster, namespace: str, webhook_gate: None) -> None:
    client = cluster.client
    assert client.get_or_none(MUTATING_POLICIES, POLICY) is None
    answers = _answers(client, namespace)
    assert answers["ungate"][0] == ["gangplugin.io/placement"]


def test_the_policy_gates_gang_pods_while_gangplugin_is_killed(cluster: E2ECluster, namespace: str) -> None:
    """docs/install.md: with the policy, gang pods are still created behind the gate while no
    gangplugin replica answers (the webhook fails closed then); every replica killed -9."""
    local = local_of(cluster)
    try:
        for replica in local.gangplugin_replicas():
            local.stop_process(replica, signal.SIGKILL)  # forgotten: the keeper leaves it stopped
        assert not set(local.gangplugin_replicas()) & set(local.running_processes())
        _answers(cluster.client, namespace)
    finally:
        local.restart("gangplugin")
