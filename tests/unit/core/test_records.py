"""gangplugin.kube.records: raw Kubernetes dicts to core records."""

from pathlib import Path

import pytest
import yaml

from gangplugin.core.eligibility import Requirement, Taint, Toleration
from gangplugin.core.errors import InputError
from gangplugin.kube import records
from tests.support.objects import gang_policy

FIXTURES = Path(__file__).parent.parent / "fixtures"


def load(name):
    return yaml.safe_load((FIXTURES / name).read_text())


def test_nodes_from_kubectl_list():
    nodes = records.nodes_from_k8s(load("gb200_nodes.yaml"))
    assert len(nodes) == 36
    n = nodes[0]
    assert n.ready and not n.unschedulable
    assert n.allocatable["nvidia.com/gpu"] == 4 and n.allocatable["cpu"] == 143_900
    assert n.allocatable["memory"] == 884_763_524 * 1024
    assert n.labels["topology.k8s.aws/ultraserver-id"] == "us-1"


def test_node_details():
    obj = {
        "kind": "Node",
        "metadata": {"name": "a"},
        "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "2"}, "conditions": [{"type": "Ready", "status": "False"}]},
    }
    (n,) = records.nodes_from_k8s(obj)
    assert n.unschedulable and not n.ready and n.taints == (Taint("k", "", "NoSchedule"),)
    assert n.allocatable == {"cpu": 2000}
    with pytest.raises(InputError) as err:
        records.nodes_from_k8s({"kind": "List", "items": [{"kind": "Node", "metadata": {}}]})
    assert err.value.field == "items[0].metadata.name"
    with pytest.raises(InputError) as err:
        records.nodes_from_k8s({"kind": "List", "items": [{**obj, "status": {"allocatable": {"cpu": "x"}}}]})
    assert err.value.field == "items[0].status.allocatable.cpu"
    with pytest.raises(InputError):
        records.nodes_from_k8s({"kind": "PodList"})


def test_bound_pods_skip_unbound_and_finished():
    pods = records.bound_pods_from_k8s(load("gb200_pods.yaml"))
    names = {p.name for p in pods}
    assert "other-job-0" in names and "old-job-0" not in names and "pending-0" not in names
    other = next(p for p in pods if p.name == "other-job-0")
    assert other.requests == {
        "cpu": 100_000,
        "memory": 800 * 2**30,
        "nvidia.com/gpu": 4,
        "vpc.amazonaws.com/efa": 17,
    }


def test_pod_requests_init_sidecars_overhead():
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"resources": {"limits": {"cpu": "500m"}}},
        ],
        "initContainers": [
            {"resources": {"requests": {"cpu": "4"}}},
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "1Mi"}}},
            {"resources": {"requests": {"memory": "8Gi"}}},
        ],
        "overhead": {"cpu": "10m"},
    }
    # cpu: max(1.5 + 0.1 sidecar, 4 init) + 0.01; memory: max(1Gi + 1Mi, 8Gi + 1Mi)
    assert records.pod_requests(spec) == {"cpu": 4010, "memory": 8 * 2**30 + 2**20}


def test_workload_podsets_and_annotations():
    gang = records.gang_from_k8s(load("workload_36_required.yaml"))
    (ps,) = gang.podsets
    assert ps.count == 36 and ps.required_topology == "topology.k8s.aws/ultraserver-id"
    assert ps.preferred_topology is None
    assert ps.requests["nvidia.com/gpu"] == 4 and ps.requests["vpc.amazonaws.com/efa"] == 16
    assert ps.constraints.tolerations == (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
    assert ps.constraints.node_selector == (("node.kubernetes.io/instance-type", "ml.p6e-gb200.36xlarge"),)


def test_workload_v1beta1_topology_request_and_affinity():
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "spec": {
            "podSets": [
                {
                    "name": "workers",
                    "count": 2,
                    "topologyRequest": {"preferred": "topology.k8s.aws/ultraserver-id"},
                    "template": {
                        "spec": {
                            "affinity": {
                                "nodeAffinity": {
                                    "requiredDuringSchedulingIgnoredDuringExecution": {
                                        "nodeSelectorTerms": [
                                            {
                                                "matchExpressions": [
                                                    {"key": "gen", "operator": "Gt", "values": ["4"]}
                                                ],
                                                "matchFields": [
                                                    {
                                                        "key": "metadata.name",
                                                        "operator": "NotIn",
                                                        "values": ["x"],
                                                    }
                                                ],
                                            }
                                        ]
                                    }
                                }
                            },
                            "containers": [{"resources": {"requests": {"cpu": "1"}}}],
                        }
                    },
                }
            ]
        },
    }
    (ps,) = records.gang_from_k8s(obj).podsets
    assert ps.preferred_topology == "topology.k8s.aws/ultraserver-id"
    assert ps.constraints.affinity_terms == (
        (Requirement("gen", "Gt", ("4",)), Requirement("metadata.name", "NotIn", ("x",), True)),
    )


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda w: w["spec"].update(podSets=[]), "spec.podSets"),
        (lambda w: w["spec"]["podSets"][0].update(count=0), "spec.podSets[0].count"),
        (lambda w: w["spec"]["podSets"][0].update(count="many"), "spec.podSets[0].count"),
        (lambda w: w["spec"]["podSets"][0].pop("name"), "spec.podSets[0].name"),
        (lambda w: w.update(apiVersion="kueue.x-k8s.io/v1alpha9"), "apiVersion"),
        (lambda w: w.update(kind="Deployment"), "kind"),
        (
            lambda w: w["spec"]["podSets"][0]["template"]["spec"].update(
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]
                        }
                    }
                }
            ),
            "spec.podSets[0].template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
    ],
)
def test_bad_workloads(mutate, field):
    w = load("workload_36_required.yaml")
    mutate(w)
    with pytest.raises(InputError) as err:
        records.gang_from_k8s(w)
    assert err.value.field == field


def test_topology_and_policy():
    levels = records.levels_from_topology(load("topology_hyperpod.yaml"))
    assert levels[-2:] == ("topology.k8s.aws/ultraserver-id", "kubernetes.io/hostname")
    assert records.topology_name(load("topology_hyperpod.yaml")) == "hyperpod"
    policy, name = records.policy_from_k8s(load("gangpolicy_spares.yaml"))
    assert policy.spares_per_ultraserver == 1 and name == "hyperpod"
    with pytest.raises(InputError) as err:
        records.policy_from_k8s(gang_policy("bad", sparesPerUltraServer=-1))
    assert err.value.field == "spec.sparesPerUltraServer"
    with pytest.raises(InputError) as err:
        records.levels_from_topology(
            {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "spec": {"levels": [{}]}}
        )
    assert err.value.field == "spec.levels[0].nodeLabel"
