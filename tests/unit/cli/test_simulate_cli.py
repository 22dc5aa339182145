"""`gangctl simulate` end to end: shape and trace files in, the documented JSON out."""

import json
from pathlib import Path

import yaml

from tests.support.cli import gangctl_process

REPO = Path(__file__).resolve().parents[3]
POLICY_KEYS = ["policy", "gpuUtilization", "waitSeconds", "neverRan", "strandedGpuHours", "makespanSeconds"]

SHAPE = {
    "apiVersion": "gangplugin.io/v1alpha1",
    "kind": "LocalClusterShape",
    "spec": {
        "groups": [
            {
                "name": "gb200",
                "instanceType": "ml.p6e-gb200.36xlarge",
                "availabilityZone": "us-east-1a",
                "ultraServerCount": 2,
                "instancesPerUltraServer": 4,
                "instancesPerNetworkLayer": [8, 8, 4],
                "allocatable": {"cpu": "144", "pods": "110", "nvidia.com/gpu": "4"},
            }
        ]
    },
}
TRACE = """job_id,arrival_time,gpu_workers,gpu_per_worker,duration
a,0,4,4,100
b,10,4,4,50
c,20,8,4,10
d,30,2,4,10
"""


def gangctl(*args, cwd):
    return gangctl_process("simulate", *args, cwd=cwd, timeout=120)


def files(tmp_path, trace=TRACE):
    (tmp_path / "shape.yaml").write_text(yaml.safe_dump(SHAPE))
    (tmp_path / "jobs.csv").write_text(trace)
    return ["--cluster", "shape.yaml", "--trace", "jobs.csv"]


def test_json_has_exactly_the_documented_shape(tmp_path):
    out = gangctl(*files(tmp_path), "-o", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert list(doc) == ["jobs", "policies"] and doc["jobs"] == 4
    assert [p["policy"] for p in doc["policies"]] == ["gangplugin", "best-fit", "first-fit", "optimal"]
    for p in doc["policies"]:
        assert list(p) == POLICY_KEYS
        assert list(p["waitSeconds"]) == ["p50", "p95", "max"]
        assert 0 <= p["gpuUtilization"] <= 1
    ours = doc["policies"][0]
    # the hand-checked trace (see tests/unit/core/test_simulate.py): waits 0, 0, 80, 30
    assert ours["waitSeconds"] == {"p50": 0.0, "p95": 80.0, "max": 80.0}
    assert ours["neverRan"] == 0 and ours["makespanSeconds"] == 110.0
    assert ours["gpuUtilization"] == round(2800 / (32 * 110), 4)


def test_same_input_same_output_and_gangplugin_always_there(tmp_path):
    args = [*files(tmp_path), "--policy", "first-fit", "-o", "yaml"]
    first, second = gangctl(*args, cwd=tmp_path), gangctl(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert [p["policy"] for p in yaml.safe_load(first.stdout)["policies"]] == ["gangplugin", "first-fit"]


def test_a_missing_column_exits_2_naming_it(tmp_path):
    trace = "arrival_time,gpu_per_worker,duration\n0,4,10\n"
    out = gangctl(*files(tmp_path, trace), cwd=tmp_path)
    assert out.returncode == 2
    assert "gpu_workers" in out.stderr and "missing" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_bad_cell_and_a_bad_shape_exit_2_naming_the_field(tmp_path):
    out = gangctl(
        *files(tmp_path, "arrival_time,gpu_workers,gpu_per_worker,duration\n0,two,4,10\n"), cwd=tmp_path
    )
    assert out.returncode == 2 and "line 2: gpu_workers" in out.stderr
    args = files(tmp_path)
    bad = {**SHAPE, "spec": {"groups": [{**SHAPE["spec"]["groups"][0], "ultraServerCount": 0}]}}
    (tmp_path / "shape.yaml").write_text(yaml.safe_dump(bad))
    out = gangctl(*args, cwd=tmp_path)
    assert out.returncode == 2 and "spec.groups[0].ultraServerCount" in out.stderr


def test_the_table_names_why_jobs_never_ran(tmp_path):
    out = gangctl(*files(tmp_path, TRACE + "e,40,9,4,10\n"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "never ran under gangplugin:" in out.stdout
    assert "1 x never fits this cluster" in out.stdout


def test_sweep_answers_the_smallest_cluster(tmp_path):
    # c needs 8 nodes: with 1 UltraServer it never runs; with 2, p95 wait is 80s
    args = [*files(tmp_path), "--sweep", "ultraservers=1..3", "--max-p95-wait", "2m", "-o", "json"]
    out = gangctl(*args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [p["ultraServers"] for p in doc["sweep"]] == [1, 2, 3]
    assert doc["sweep"][0]["policies"][0]["neverRan"] == 1
    assert doc["smallestUltraServers"]["gangplugin"] == 2
    assert doc["maxP95WaitSeconds"] == 120


def test_plot_writes_three_pngs(tmp_path):
    out = gangctl(*files(tmp_path), "--plot", "plots", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for name in ("utilization.png", "wait-cdf.png", "queue.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_kalos_trace_in_the_repository_parses():
    from gangplugin.sim.trace import read_trace

    jobs = read_trace(str(REPO / "deploy/traces/acme-kalos-converted.csv"))
    assert len(jobs) == 319
    assert max(j.pods for j in jobs) == 128 and jobs[0].runtime == 208 * 0.5


def offering(oid, count):
    block = {
        "instanceType": "ml.p6e-gb200.36xlarge",
        "instanceCount": count,
        "availabilityZone": "us-east-1a",
        "startTime": "2026-01-01T11:30:00Z",
        "endTime": "2026-01-02T11:30:00Z",
        "durationHours": 24,
        "durationMinutes": 0,
    }
    return {
        "trainingPlanOfferingId": oid,
        "targetResources": ["training-job"],
        "reservedCapacityOfferings": [block],
    }


def test_offerings_name_the_one_that_runs_every_job_with_least_idle_capacity(tmp_path):
    # job c needs 8 pods of 4 GPUs (32 GPUs): 4 instances never run it; 8 and 16 do, 8 idles least
    doc = {"offerings": [offering("four", 4), offering("sixteen", 16), offering("eight", 8)]}
    (tmp_path / "offerings.json").write_text(json.dumps(doc))
    args = [*files(tmp_path), "--offerings", "offerings.json", "--preferred-topology", ""]
    out = gangctl(*args, "-o", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    by_id = {o["trainingPlanOfferingId"]: o for o in got["offerings"]}
    assert by_id["four"]["neverRan"] == 1 and by_id["eight"]["neverRan"] == 0
    assert by_id["eight"]["unusedReservedGpuHours"] < by_id["sixteen"]["unusedReservedGpuHours"]
    assert got["leastIdle"] == "eight"
    table = gangctl(*args, cwd=tmp_path)
    assert table.returncode == 0 and "least idle reserved capacity with every job run: eight" in table.stdout


def test_offerings_that_are_not_search_output_exit_2_naming_the_field(tmp_path):
    (tmp_path / "offerings.json").write_text(json.dumps({"offerings": [{"trainingPlanOfferingId": "x"}]}))
    out = gangctl(*files(tmp_path), "--offerings", "offerings.json", cwd=tmp_path)
    assert out.returncode == 2 and "offerings[0].reservedCapacityOfferings" in out.stderr


def test_a_cluster_queue_that_preempts_lets_the_high_priority_job_in_at_once(tmp_path):
    trace = (
        "job_id,arrival_time,gpu_workers,gpu_per_worker,duration,priority\n"
        "low,0,8,4,1000,0\nhigh,10,4,4,10,10\n"
    )
    args = [*files(tmp_path, trace), "--policy", "gangplugin", "-o", "json"]
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "training"},
        "spec": {"preemption": {"withinClusterQueue": "LowerPriority"}},
    }
    (tmp_path / "cq.yaml").write_text(yaml.safe_dump(cq))
    waited = json.loads(gangctl(*args, cwd=tmp_path).stdout)["policies"][0]["waitSeconds"]["max"]
    out = gangctl(*args, "--cluster-queue", "cq.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    preempting = json.loads(out.stdout)["policies"][0]["waitSeconds"]["max"]
    assert waited >= 990 and preempting < waited  # the low job, evicted, now waits instead
    cq["spec"]["preemption"]["withinClusterQueue"] = "Sometimes"
    (tmp_path / "cq.yaml").write_text(yaml.safe_dump(cq))
    bad = gangctl(*args, "--cluster-queue", "cq.yaml", cwd=tmp_path)
    assert (
        bad.returncode == 2
        and "withinClusterQueue 'Sometimes'" in bad.stderr
        and len(bad.stderr.splitlines()) == 1
    )


def test_a_misspelt_shape_field_or_trace_column_exits_2_naming_the_closest(tmp_path):
    """Issue 24: `instancesPerNetworkLayers` (misspelt) was ignored and changed the answer."""
    args = files(tmp_path)
    shape = yaml.safe_load((tmp_path / "shape.yaml").read_text())
    group = shape["spec"]["groups"][0]
    group["instancesPerNetworkLayers"] = group.pop("instancesPerNetworkLayer")
    (tmp_path / "shape.yaml").write_text(yaml.safe_dump(shape))
    out = gangctl(*args, cwd=tmp_path)
    (line,) = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "spec.groups[0].instancesPerNetworkLayers" in line
    assert "did you mean instancesPerNetworkLayer" in line
    args = files(tmp_path, TRACE.replace("duration", "duraton", 1))
    out = gangctl(*args, cwd=tmp_path)
    (line,) = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "column duraton" in line and "did you mean duration" in line
