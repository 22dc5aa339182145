"""The training samples in deploy/samples/, as files: each a job of a kind Kueue integrates,
through the LocalQueue, read by `gangctl place` as Kueue reads it, every pod template asking for
one UltraServer, and the torchrun of a Job sample meeting pod 0 of the Job through its headless
Service. tests/e2e/test_jobs_samples.py runs them and checks what the controllers inject."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gangplugin.core.topology import ULTRASERVER_LABEL
from gangplugin.kube.job_records import gang_of

SAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "samples"
# The ClusterTrainingRuntime the TrainJob sample names, as Trainer v2.2.1 ships it (its node Job).
TORCH_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed"},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}},
                        },
                    }
                ]
            }
        },
    },
}


def documents(file: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((SAMPLES / file).read_text()) if d]


@pytest.mark.parametrize(
    ("file", "podsets"),
    [
        ("pytorchjob-gang.yaml", [("master", 1), ("worker", 7)]),
        ("trainjob-gang.yaml", [("node", 8)]),
        ("jobset-gang.yaml", [("leader", 1), ("workers", 4)]),
        ("leaderworkerset-gang.yaml", [("main", 8)]),
        ("rayjob-gang.yaml", [("head", 1), ("gpu", 7)]),
    ],
)
def test_each_job_sample_is_one_gang_in_one_ultraserver_through_the_local_queue(
    file: str, podsets: list[tuple[str, int]]
) -> None:
    job = documents(file)[0]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    runtime = TORCH_RUNTIME if job["kind"] == "TrainJob" else None
    gang = gang_of(job, runtime=runtime).gang
    assert [(ps.name, ps.count) for ps in gang.podsets] == podsets
    assert {ps.required_topology for ps in gang.podsets} == {ULTRASERVER_LABEL}
    assert all(ps.requests.get("nvidia.com/gpu") in (None, 4) for ps in gang.podsets)


@pytest.mark.parametrize("file", ["gang-job.yaml", "checkpoint-job.yaml"])
def test_a_job_sample_meets_pod_0_behind_its_headless_service(file: str) -> None:
    job, service = documents(file)
    name, spec = job["metadata"]["name"], job["spec"]
    pod = spec["template"]["spec"]
    assert spec["completionMode"] == "Indexed" and spec["parallelism"] == spec["completions"]
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["name"] == pod["subdomain"]
    assert service["metadata"]["namespace"] == job["metadata"]["namespace"]
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": name}
    (container,) = pod["containers"]
    flags = dict(a[2:].split("=", 1) for a in container["command"] if a.startswith("--") and "=" in a)
    # Pod i of an Indexed Job with a subdomain is <job>-<i>.<subdomain>; its rank the index.
    assert flags["master-addr"] == f"{name}-0.{pod['subdomain']}"
    assert flags["node-rank"] == "$(JOB_COMPLETION_INDEX)"
    assert flags["nnodes"] == str(spec["parallelism"]) and flags["master-port"].isdigit()


def test_the_jobset_sample_meets_at_its_coordinator() -> None:
    (js,) = documents("jobset-gang.yaml")
    assert js["spec"]["coordinator"] == {"replicatedJob": "leader", "jobIndex": 0, "podIndex": 0}
    pods = sum(rj["replicas"] * rj["template"]["spec"]["parallelism"] for rj in js["spec"]["replicatedJobs"])
    for rj in js["spec"]["replicatedJobs"]:
        (container,) = rj["template"]["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
        assert env["COORDINATOR"] == "metadata.annotations['jobset.sigs.k8s.io/coordinator']"
        assert "--rdzv-endpoint=$(COORDINATOR):29500" in container["command"]
        assert "--rdzv-backend=c10d" in container["command"] and f"--nnodes={pods}" in container["command"]
