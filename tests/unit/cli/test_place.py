"""`gangctl place` end to end: real kubectl-shaped files in, the documented JSON out."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.cli import gangctl_process

FIXTURES = Path(__file__).parent.parent / "fixtures"


def gangctl(*args, cwd=FIXTURES):
    return gangctl_process("place", *args, cwd=cwd, timeout=60)


def place_json(*args, cwd=FIXTURES):
    """`gangctl place ... -o json`'s answer; it must exit 0."""
    out = gangctl(*args, "-o", "json", cwd=cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_preferred_fits_across_two_ultraservers():
    result = place_json(
        "--nodes",
        "gb200_nodes.yaml",
        "--workload",
        "workload_36_preferred.yaml",
        "--topology",
        "topology_hyperpod.yaml",
    )
    assert list(result) == ["feasible", "level", "domains", "assignments", "reason"]
    assert result["feasible"] is True
    assert result["level"] == "topology.k8s.aws/network-node-layer-2" and result["domains"] == ["nn-4d5e6f"]
    assert len({a["node"] for a in result["assignments"]}) == 36
    assert result["assignments"][0] == {"podSet": "main", "index": 0, "node": "hyperpod-i-10000000000000000"}


def test_required_is_answered_infeasible_with_exit_0():
    result = place_json(
        "--nodes",
        "gb200_nodes.yaml",
        "--pods",
        "gb200_pods.yaml",
        "--workload",
        "workload_36_required.yaml",
        "--policy",
        "gangpolicy_spares.yaml",
    )
    assert result["feasible"] is False and result["assignments"] == [] and result["level"] is None
    # 36 pods in UltraServers of 18 nodes: not a wait, a gang that can never start whole
    assert result["reason"].startswith(
        "can never start whole: it needs 36 pods (144 GPUs) in one topology.k8s.aws/ultraserver-id; "
        "the largest, us-1, has room for 17 of its 36 pods (18 nodes, 1 held as spare); split it into slices"
    )
    assert "gangplugin.io/preferred-topology instead of required-topology" in result["reason"]


def test_spares_and_bound_pods_with_yaml_and_table_output():
    args = [
        "--nodes",
        "gb200_nodes.yaml",
        "--pods",
        "gb200_pods.yaml",
        "--workload",
        "workload_16_required.yaml",
        "--policy",
        "gangpolicy_spares.yaml",
        "--topology",
        "topology_hyperpod.yaml",
    ]
    out = gangctl(*args, "-o", "yaml")
    assert out.returncode == 0, out.stderr
    result = yaml.safe_load(out.stdout)
    assert result["feasible"] and result["domains"] == ["us-2"]
    nodes = {a["node"] for a in result["assignments"]}
    # us-2's first node runs another job and its highest-named idle node is the spare
    assert "hyperpod-i-20000000000000000" not in nodes and "hyperpod-i-20000000000000011" not in nodes
    table = gangctl(*args)
    assert table.returncode == 0
    assert "feasible: yes" in table.stdout and "PODSET" in table.stdout and "hyperpod-i-2" in table.stdout


def test_job_manifest():
    result = place_json("--nodes", "gb200_nodes.yaml", "--workload", "job_4.yaml")
    assert result["feasible"] and [a["index"] for a in result["assignments"]] == [0, 1, 2, 3]
    assert {a["podSet"] for a in result["assignments"]} == {"main"}


def _copy_with(tmp_path, name, edit):
    doc = yaml.safe_load((FIXTURES / name).read_text())
    edit(doc)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda w: w["spec"].update(podSets=[]), "spec.podSets"),
        (lambda w: w["spec"]["podSets"][0].update(count=0), "spec.podSets[0].count"),
        (
            lambda w: w["spec"]["podSets"][0]["template"]["metadata"]["annotations"].update(
                {"gangplugin.io/required-topology": "example.com/rack"}
            ),
            "spec.podSets[0].template.metadata.annotations.gangplugin.io/required-topology",
        ),
        (
            lambda w: w["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"][
                "requests"
            ].update(cpu="sixty-four"),
            "spec.podSets[0].template.spec.containers[0].resources.requests.cpu",
        ),
    ],
)
def test_bad_workload_exits_2_naming_the_field(tmp_path, edit, field):
    for name in ("gb200_nodes.yaml",):
        shutil.copy(FIXTURES / name, tmp_path / name)
    w = _copy_with(tmp_path, "workload_36_required.yaml", edit)
    out = gangctl("--nodes", "gb200_nodes.yaml", "--workload", str(w), "-o", "json", cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in out.stderr
    assert out.stdout == ""


def test_job_unknown_label_names_the_job_field(tmp_path):
    job = _copy_with(
        tmp_path,
        "job_4.yaml",
        lambda j: j["spec"]["template"]["metadata"]["annotations"].update(
            {"gangplugin.io/required-topology": "example.com/rack"}
        ),
    )
    out = gangctl("--nodes", str(FIXTURES / "gb200_nodes.yaml"), "--workload", str(job), cwd=tmp_path)
    assert out.returncode == 2
    assert "spec.template.metadata.annotations.gangplugin.io/required-topology" in out.stderr


def test_files_that_are_not_yaml_or_bad_quantities(tmp_path):
    bad = tmp_path / "nodes.yaml"
    bad.write_text("items: [\n  - {")
    out = gangctl("--nodes", str(bad), "--workload", str(FIXTURES / "job_4.yaml"))
    # file:line:column of the syntax error, what an editor jumps to
    assert out.returncode == 2 and f"error: {bad}:2:3: did not find expected node content" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    nodes = _copy_with(
        tmp_path, "gb200_nodes.yaml", lambda d: d["items"][3]["status"]["allocatable"].update(memory="1Gb")
    )
    out = gangctl("--nodes", str(nodes), "--workload", str(FIXTURES / "job_4.yaml"))
    assert out.returncode == 2 and "items[3].status.allocatable.memory" in out.stderr
    out = gangctl("--nodes", str(tmp_path / "missing.yaml"), "--workload", str(FIXTURES / "job_4.yaml"))
    assert out.returncode == 2 and "missing.yaml" in out.stderr


def test_policy_naming_another_topology(tmp_path):
    pol = _copy_with(tmp_path, "gangpolicy_spares.yaml", lambda p: p["spec"].update(topologyName="other"))
    out = gangctl(
        "--nodes",
        "gb200_nodes.yaml",
        "--workload",
        "job_4.yaml",
        "--policy",
        str(pol),
        "--topology",
        "topology_hyperpod.yaml",
    )
    assert out.returncode == 2 and "spec.topologyName" in out.stderr


@pytest.mark.parametrize(("size", "feasible"), [(9, True), (12, False)])
def test_slices_per_ultraserver_fit_or_are_explained_per_slice(tmp_path, size, feasible):
    wl = yaml.safe_load((FIXTURES / "workload_36_preferred.yaml").read_text())
    wl["spec"]["podSets"][0]["template"]["metadata"]["annotations"] = {
        "gangplugin.io/required-topology": "topology.k8s.aws/network-node-layer-2",
        "kueue.x-k8s.io/podset-slice-required-topology": "topology.k8s.aws/ultraserver-id",
        "kueue.x-k8s.io/podset-slice-size": str(size),
    }
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(wl))
    result = place_json("--nodes", "gb200_nodes.yaml", "--workload", str(path))
    assert result["feasible"] is feasible
    if feasible:
        assert "4 slices of 9 over 2 topology.k8s.aws/ultraserver-id" in result["reason"]
    else:
        assert (
            "2 of 3 slices of 12 fit in one topology.k8s.aws/ultraserver-id under nn-4d5e6f; "
            "the 3rd has room for 6 at most" in result["reason"]
        )


def test_slice_size_not_dividing_the_count_names_the_field(tmp_path):
    wl = yaml.safe_load((FIXTURES / "workload_36_preferred.yaml").read_text())
    wl["spec"]["podSets"][0]["template"]["metadata"]["annotations"] = {
        "gangplugin.io/slice-required-topology": "topology.k8s.aws/ultraserver-id",
        "gangplugin.io/slice-size": "10",
    }
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(wl))
    out = gangctl("--nodes", "gb200_nodes.yaml", "--workload", str(path))
    assert out.returncode == 2
    assert "spec.podSets[0].template.metadata.annotations.gangplugin.io/slice-size" in out.stderr
    assert "10 does not divide the podset's 36 pods" in out.stderr


@pytest.mark.parametrize(
    ("workload", "extra", "podsets"),
    [
        ("../../../deploy/samples/jobset-gang.yaml", [], {"leader": 1, "workers": 4}),
        ("jobs/pytorchjob.yaml", [], {"master": 1, "worker": 7}),
        (
            "jobs/trainjob.yaml",
            ["--runtime", "jobs/clustertrainingruntime.yaml"],
            {"dataset-initializer": 1, "node": 16},
        ),
        ("jobs/leaderworkerset.yaml", [], {"leader": 1, "worker": 3}),
        ("jobs/rayjob.yaml", [], {"head": 1, "gpu-workers": 4, "submitter": 1}),
        ("jobs/raycluster.yaml", [], {"head": 1, "workers": 3}),
    ],
)
def test_every_kind_kueue_integrates(workload, extra, podsets):
    result = place_json("--nodes", "gb200_nodes.yaml", "--workload", workload, *extra)
    assert result["feasible"] and result["level"] == "topology.k8s.aws/ultraserver-id"
    counts = {}
    for a in result["assignments"]:
        counts[a["podSet"]] = counts.get(a["podSet"], 0) + 1
    assert counts == podsets


def test_trainjob_without_runtime_and_runtime_without_trainjob_exit_2():
    out = gangctl("--nodes", "gb200_nodes.yaml", "--workload", "jobs/trainjob.yaml")
    assert out.returncode == 2 and out.stderr.startswith(
        "error: --runtime: a TrainJob's pods come from its runtime"
    )
    assert len(out.stderr.splitlines()) == 1
    out = gangctl(
        "--nodes",
        "gb200_nodes.yaml",
        "--workload",
        "job_4.yaml",
        "--runtime",
        "jobs/clustertrainingruntime.yaml",
    )
    assert out.returncode == 2 and out.stderr == "error: --runtime: goes with a TrainJob, not a Job\n"


def test_a_placement_error_names_the_field_in_the_job_file(tmp_path):
    job = yaml.safe_load((FIXTURES / "jobs/pytorchjob.yaml").read_text())
    annotations = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    annotations.update(
        {"gangplugin.io/slice-size": "2", "gangplugin.io/slice-required-topology": "kubernetes.io/hostname"}
    )
    path = tmp_path / "pt.yaml"
    path.write_text(yaml.safe_dump(job))
    out = gangctl("--nodes", "gb200_nodes.yaml", "--workload", str(path))
    assert out.returncode == 2, out.stdout
    field = "spec.pytorchReplicaSpecs.Worker.template.metadata.annotations.gangplugin.io/slice-size"
    assert f"error: {path}: {field}" in out.stderr


def test_a_misspelt_annotation_key_exits_2_naming_it_and_the_closest_known_one(tmp_path):
    """Issue 24's 36-pod Job: `required-toplogy` would have dropped the UltraServer requirement
    and placed the gang across UltraServers, feasible: the typo is refused instead."""

    def misspell(j):
        j["spec"]["template"]["metadata"]["annotations"] = {
            "gangplugin.io/required-toplogy": "topology.k8s.aws/ultraserver-id"
        }

    job = _copy_with(tmp_path, "job_4.yaml", misspell)
    out = gangctl("--nodes", str(FIXTURES / "gb200_nodes.yaml"), "--workload", str(job), cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert "spec.template.metadata.annotations" in line
    assert "unknown key gangplugin.io/required-toplogy: did you mean gangplugin.io/required-topology?" in line


def test_a_misspelt_kueue_podset_key_on_a_workload_is_refused_too(tmp_path):
    w = _copy_with(
        tmp_path,
        "workload_36_required.yaml",
        lambda w: w["spec"]["podSets"][0]["template"]["metadata"]["annotations"].update(
            {"kueue.x-k8s.io/podset-required-topolgy": "topology.k8s.aws/ultraserver-id"}
        ),
    )
    out = gangctl("--nodes", str(FIXTURES / "gb200_nodes.yaml"), "--workload", str(w), cwd=tmp_path)
    assert out.returncode == 2
    assert "spec.podSets[0].template.metadata.annotations" in out.stderr
    assert "did you mean kueue.x-k8s.io/podset-required-topology?" in out.stderr


def test_a_pytorchjob_one_ultraserver_cannot_hold_is_told_it_can_never_start_whole(tmp_path):
    """Issue 33's held-out job: 1 master + 18 workers required in one UltraServer of 18 nodes
    with one spare never fits; `place` says so with the numbers and the fix, as the check does."""

    def eighteen(j):
        j["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 18

    (tmp_path / "jobs").mkdir()
    job = _copy_with(tmp_path, "jobs/pytorchjob.yaml", eighteen)
    args = ["--nodes", str(FIXTURES / "gb200_nodes.yaml"), "--workload", str(job)]
    out = gangctl(*args, "--policy", str(FIXTURES / "gangpolicy_spares.yaml"), "-o", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    reason = json.loads(out.stdout)["reason"]
    assert reason.startswith(
        "can never start whole: it needs 19 pods (76 GPUs) in one topology.k8s.aws/ultraserver-id; "
        "the largest, us-1, has room for 17 of its 19 pods (18 nodes, 1 held as spare); split it into slices"
    )
