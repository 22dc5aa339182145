"""What one gang is submitted as to each system, as each system's docs and admission checks want
it: the same pods (4 GPUs, the gang label), the topology asked for in each system's words."""

from _peers.systems import GANG_LABEL, SYSTEMS, kai_index, volcano_index
from _peers.workload import Gang, gang

US = "topology.k8s.aws/ultraserver-id"


def template(obj):
    spec = obj["spec"]
    return spec["template"] if "template" in spec else spec["tasks"][0]["template"]


def test_every_system_submits_the_same_pods():
    for name, system in SYSTEMS.items():
        objs = system.objects(gang("g", 8))
        pods = [template(o) for _, o in objs if o["kind"] in ("Job",)]
        assert pods, name
        for t in pods:
            assert t["metadata"]["labels"][GANG_LABEL] == "g", name
            (c,) = t["spec"]["containers"]
            assert c["resources"]["requests"]["nvidia.com/gpu"] == "4", name
            assert t["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "ml.p6e-gb200.36xlarge"}


def test_kueue_systems_ask_for_the_ultraserver_in_their_own_annotations():
    ours = template(SYSTEMS["gangplugin"].objects(gang("g", 8))[0][1])["metadata"]["annotations"]
    tas = template(SYSTEMS["kueue-tas"].objects(gang("g", 8))[0][1])["metadata"]["annotations"]
    assert ours == {"gangplugin.io/required-topology": US}
    assert tas == {"kueue.x-k8s.io/podset-required-topology": US}
    sliced = template(SYSTEMS["kueue-tas"].objects(gang("s", 32))[0][1])["metadata"]["annotations"]
    assert sliced == {
        "kueue.x-k8s.io/podset-slice-size": "16",
        "kueue.x-k8s.io/podset-slice-required-topology": US,
    }
    ((_, job),) = SYSTEMS["gangplugin"].objects(Gang("p", 4, priority="high"))
    assert (
        job["spec"]["suspend"] and job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "bench-high"
    )


def test_volcano_requires_tier_one_and_partitions_slices_as_its_webhook_checks():
    ((_, job),) = SYSTEMS["volcano"].objects(gang("g", 8))
    assert job["spec"]["minAvailable"] == 8 and job["spec"]["schedulerName"] == "volcano"
    assert job["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    ((_, sliced),) = SYSTEMS["volcano"].objects(gang("s", 24))
    (task,) = sliced["spec"]["tasks"]
    policy = task["partitionPolicy"]
    # its webhook: replicas = totalPartitions x partitionSize
    assert task["replicas"] == policy["totalPartitions"] * policy["partitionSize"] == 24
    assert policy["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    assert "networkTopology" not in sliced["spec"]
    assert volcano_index({"metadata": {"annotations": {"volcano.sh/task-index": "7"}}}) == 7


def test_kai_gangs_are_whole_and_slices_are_subgroups_of_one_podgroup():
    ((_, job),) = SYSTEMS["kai"].objects(gang("g", 8))
    assert job["metadata"]["annotations"]["kai.scheduler/batch-min-member"] == "8"
    assert job["metadata"]["annotations"]["kai.scheduler/topology-required-placement"] == US
    assert template(job)["spec"]["schedulerName"] == "kai-scheduler"
    objs = SYSTEMS["kai"].objects(gang("s", 32))
    kinds = [o["kind"] for _, o in objs]
    assert kinds == ["PodGroup", "Job", "Job"]  # the PodGroup first: its pods name it
    pg = objs[0][1]["spec"]
    assert pg["minSubGroup"] == 2 and [s["minMember"] for s in pg["subGroups"]] == [16, 16]
    second = objs[2][1]
    assert second["metadata"]["annotations"] == {"kai.scheduler/skip-podgrouper": "true"}
    labels = template(second)["metadata"]["labels"]
    assert labels["kai.scheduler/subgroup-name"] == "slice-1" and template(second)["metadata"][
        "annotations"
    ] == {"pod-group-name": "s"}
    pod = {"metadata": {"labels": labels, "annotations": {"batch.kubernetes.io/job-completion-index": "3"}}}
    assert kai_index(pod) == 19  # its index in the gang: the slice's first plus its own


def test_every_system_s_pods_leave_a_failed_node_alike():
    for name, system in SYSTEMS.items():
        for _, obj in system.objects(gang("g", 24)):
            if obj["kind"] != "Job":
                continue
            if obj["apiVersion"] == "batch/v1":  # a lost pod waits its index's backoff alone
                assert obj["spec"]["backoffLimitPerIndex"] and "backoffLimit" not in obj["spec"], name
            tolerations = template(obj)["spec"]["tolerations"]
            assert {t["key"]: t["tolerationSeconds"] for t in tolerations} == {
                "node.kubernetes.io/not-ready": 30,
                "node.kubernetes.io/unreachable": 30,
            }, name


def test_the_floor_answers_only_a_workload_waiting_for_its_check_with_quota_reserved():
    from _peers.noop_check import CHECK, waiting

    def wl(reserved, state):
        conditions = [{"type": "QuotaReserved", "status": "True"}] if reserved else []
        return {"status": {"conditions": conditions, "admissionChecks": [{"name": CHECK, "state": state}]}}

    assert waiting(wl(True, "Pending"))
    assert not waiting(wl(False, "Pending")) and not waiting(wl(True, "Ready"))
    ((_, job),) = SYSTEMS["noop-check"].objects(gang("g", 8))
    assert template(job)["metadata"]["annotations"] == {}  # no topology: it decides nothing
