"""gangplugin.kube.job_records: every job kind Kueue integrates -> the podsets Kueue v0.17 makes of
it (names, counts, order, templates and their annotations), and errors that name the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangplugin.core.eligibility import Toleration
from gangplugin.core.errors import InputError
from gangplugin.kube import job_records
from gangplugin.kube.job_records import gang_of, kind_named

FIXTURES = Path(__file__).parent.parent / "fixtures"
US = "topology.k8s.aws/ultraserver-id"
GPU4 = {"cpu": 32_000, "memory": 256 << 30, "nvidia.com/gpu": 4}


def load(name: str) -> Any:
    return yaml.safe_load((FIXTURES / name).read_text())


def shape(obj: Any, **kw: Any) -> list[tuple[str, int]]:
    return [(ps.name, ps.count) for ps in gang_of(obj, **kw).gang.podsets]


def test_job_counts_parallelism_capped_by_completions() -> None:
    job = load("job_4.yaml")
    (ps,) = gang_of(job).gang.podsets
    assert (ps.name, ps.count, ps.requests, ps.required_topology) == ("main", 4, {"nvidia.com/gpu": 4}, US)
    job["spec"]["completions"] = 2  # Kueue's podsCount: min(parallelism, completions)
    assert shape(job) == [("main", 2)]
    del job["spec"]["parallelism"], job["spec"]["completions"]
    assert shape(job) == [("main", 1)]


def test_jobset_one_podset_per_replicated_job() -> None:
    js = load("../../../deploy/samples/jobset-gang.yaml")
    assert shape(js) == [("leader", 1), ("workers", 4)]  # replicas 2 x parallelism 2
    assert all(ps.required_topology == US for ps in gang_of(js).gang.podsets)
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["completions"] = 1
    assert shape(js) == [("leader", 1), ("workers", 2)]


def test_pytorchjob_master_then_worker_in_lower_case() -> None:
    gang = gang_of(load("jobs/pytorchjob.yaml")).gang
    assert [(ps.name, ps.count) for ps in gang.podsets] == [("master", 1), ("worker", 7)]
    assert gang.name == "llama" and all(ps.requests == GPU4 for ps in gang.podsets)
    assert all(ps.required_topology == US for ps in gang.podsets)
    job = load("jobs/pytorchjob.yaml")
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["worker"] = specs.pop("Worker")  # the operator's defaulting writes CamelCase
    del specs["Master"]["replicas"]
    assert shape(job) == [("master", 1), ("worker", 7)]


def test_trainjob_podsets_come_from_its_runtime() -> None:
    runtime = load("jobs/clustertrainingruntime.yaml")
    gang = gang_of(load("jobs/trainjob.yaml"), runtime=runtime).gang
    init, node = gang.podsets
    assert (init.name, init.count, init.required_topology) == ("dataset-initializer", 1, None)
    assert (node.name, node.count, node.required_topology) == ("node", 16, US)
    assert node.requests == GPU4  # resourcesPerNode on the "node" container
    health = Toleration("sagemaker.amazonaws.com/node-health-status", "Equal", "Unschedulable", "NoSchedule")
    assert node.constraints.tolerations == (health,)  # its podTemplateOverride
    assert init.constraints.tolerations == ()
    # Without trainer.numNodes the runtime's mlPolicy.numNodes counts.
    tj = load("jobs/trainjob.yaml")
    del tj["spec"]["trainer"]["numNodes"]
    assert shape(tj, runtime=runtime) == [("dataset-initializer", 1), ("node", 1)]


def test_trainjob_runtime_patches_and_mpi_launcher_as_node() -> None:
    runtime = load("jobs/clustertrainingruntime.yaml")
    runtime["spec"]["mlPolicy"] = {"numNodes": 4, "mpi": {"runLauncherAsNode": True}}
    launcher = copy.deepcopy(runtime["spec"]["template"]["spec"]["replicatedJobs"][1])
    launcher["name"], launcher["template"]["metadata"]["labels"] = "launcher", {}
    runtime["spec"]["template"]["spec"]["replicatedJobs"].insert(1, launcher)
    tj = load("jobs/trainjob.yaml")
    tj["spec"]["trainer"]["numNodes"] = 8
    del tj["spec"]["podTemplateOverrides"]
    tj["spec"]["runtimePatches"] = [
        {
            "manager": "me",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}},
                            }
                        ]
                    }
                }
            },
        }
    ]
    gang = gang_of(tj, runtime=runtime).gang
    # MPI: the node Job runs numNodes - 1 pods when the launcher is one of the nodes.
    assert [(ps.name, ps.count) for ps in gang.podsets] == [
        ("dataset-initializer", 1),
        ("launcher", 1),
        ("node", 7),
    ]
    assert gang.podsets[2].constraints.node_selector == (("a", "b"),)


@pytest.mark.parametrize(
    ("edit", "field", "problem"),
    [
        (
            lambda tj, rt: rt["metadata"].update(name="other"),
            "--runtime",
            "is ClusterTrainingRuntime 'other'",
        ),
        (
            lambda tj, rt: tj["spec"]["runtimeRef"].update(kind="TrainingRuntime"),
            "--runtime",
            "names TrainingRuntime",
        ),
        (lambda tj, rt: rt.update(kind="TrainJob"), "rt.yaml: kind", "expected a ClusterTrainingRuntime"),
        (lambda tj, rt: tj["spec"]["trainer"].update(numNodes=-1), "tj.yaml: spec.trainer.numNodes", "-1"),
    ],
)
def test_trainjob_runtime_errors_name_the_file_and_field(edit: Any, field: str, problem: str) -> None:
    tj, rt = load("jobs/trainjob.yaml"), load("jobs/clustertrainingruntime.yaml")
    edit(tj, rt)
    with pytest.raises(InputError) as err:
        gang_of(tj, where="tj.yaml: ", runtime=rt, runtime_where="rt.yaml: ")
    assert err.value.field == field and problem in err.value.problem


def test_trainjob_without_its_runtime_says_which_to_give() -> None:
    with pytest.raises(InputError) as err:
        gang_of(load("jobs/trainjob.yaml"))
    assert err.value.field == "--runtime"
    assert "kubectl get clustertrainingruntime torch-distributed -o yaml" in err.value.problem


def test_leaderworkerset_is_one_group() -> None:
    lws = load("jobs/leaderworkerset.yaml")
    assert shape(lws) == [("leader", 1), ("worker", 3)]
    lws["spec"]["leaderWorkerTemplate"]["size"] = 1
    assert shape(lws) == [("leader", 1)]  # no worker pods: no worker podset
    del lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    lws["spec"]["leaderWorkerTemplate"]["size"] = 4
    assert shape(lws) == [("main", 4)]


def test_rayjob_head_worker_groups_and_submitter() -> None:
    gang = gang_of(load("jobs/rayjob.yaml")).gang
    assert [(ps.name, ps.count) for ps in gang.podsets] == [("head", 1), ("gpu-workers", 4), ("submitter", 1)]
    assert gang.podsets[2].requests == {"cpu": 500, "memory": 200 << 20}  # KubeRay's default submitter
    http = load("jobs/rayjob.yaml")
    http["spec"]["submissionMode"] = "HTTPMode"
    assert shape(http) == [("head", 1), ("gpu-workers", 4)]
    selector = load("jobs/rayjob.yaml")
    del selector["spec"]["rayClusterSpec"]
    with pytest.raises(InputError) as err:
        gang_of(selector)
    assert err.value.field == "spec.rayClusterSpec"


def test_raycluster_reads_kueue_topology_annotations() -> None:
    head, workers = gang_of(load("jobs/raycluster.yaml")).gang.podsets
    assert (head.name, head.count, head.required_topology) == ("head", 1, None)
    assert (workers.name, workers.count, workers.required_topology) == ("workers", 3, US)


def test_workload_files_still_read() -> None:
    jg = gang_of(load("workload_36_required.yaml"), where="wl.yaml: ")
    assert [(ps.name, ps.count) for ps in jg.gang.podsets] == [("main", 36)]
    assert jg.field("podSets[0].count") == "wl.yaml: spec.podSets[0].count"


def test_core_fields_map_to_the_job_file() -> None:
    jg = gang_of(load("jobs/pytorchjob.yaml"), where="pt.yaml: ")
    ann = "podSets[1].template.metadata.annotations.gangplugin.io/slice-size"
    assert (
        jg.field(ann)
        == "pt.yaml: spec.pytorchReplicaSpecs.Worker.template.metadata.annotations.gangplugin.io/slice-size"
    )
    assert jg.field("podSets[0].count") == "pt.yaml: spec.pytorchReplicaSpecs.Master.replicas"
    assert jg.field("something.else") == "something.else"


@pytest.mark.parametrize(
    ("doc", "field", "problem"),
    [
        (
            {"apiVersion": "apps/v1", "kind": "Deployment"},
            "kind",
            "'Deployment' is not a Kueue Workload or a job kind",
        ),
        ({"apiVersion": "batch/v2", "kind": "Job"}, "apiVersion", "'batch/v2' is not batch/v1"),
        (
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "spec": {"pytorchReplicaSpecs": {"Chief": {}}},
            },
            "spec.pytorchReplicaSpecs.Chief",
            "is not one of Master, Worker",
        ),
        (
            {"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": 0, "template": {}}},
            "spec",
            "the job has no pods",
        ),
        (
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "spec": {"replicatedJobs": [{"replicas": 1}]},
            },
            "spec.replicatedJobs[0].name",
            "needs a name",
        ),
        (
            {"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": "four"}},
            "spec.parallelism",
            "'four' is not a whole number",
        ),
    ],
)
def test_bad_jobs_name_the_field(doc: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(InputError) as err:
        gang_of(doc)
    assert err.value.field == field and problem in err.value.problem


def test_podset_names_are_unique_and_at_most_eight() -> None:
    def rj(name: str) -> dict[str, Any]:
        return {"name": name, "template": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}}

    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "spec": {"replicatedJobs": [rj("a"), rj("a")]},
    }
    with pytest.raises(InputError, match="podset name 'a'"):
        gang_of(js)
    js["spec"]["replicatedJobs"] = [rj(f"j{i}") for i in range(9)]
    with pytest.raises(InputError, match="at most 8"):
        gang_of(js)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("job", "Job"),
        ("jobs.batch", "Job"),
        ("PyTorchJob", "PyTorchJob"),
        ("pytorchjobs.kubeflow.org", "PyTorchJob"),
        ("lws", "LeaderWorkerSet"),
        ("leaderworkerset", "LeaderWorkerSet"),
        ("trainjob", "TrainJob"),
        ("rayjob", "RayJob"),
        ("raycluster", "RayCluster"),
        ("jobset", "JobSet"),
        ("kwl", "Workload"),
        ("workloads.kueue.x-k8s.io", "Workload"),
    ],
)
def test_kinds_as_kubectl_names_them(text: str, kind: str) -> None:
    found = kind_named(text)
    assert found is not None and found.kind == kind


def test_unknown_kinds() -> None:
    assert kind_named("jobs.apps") is None and kind_named("deployment") is None
    assert job_records.closest_kind("pytorchjb") == "pytorchjob"
