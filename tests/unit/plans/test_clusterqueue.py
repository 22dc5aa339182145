"""ClusterQueue quota reading/writing and the plan status the controller writes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest

from gangplugin.core.errors import InputError
from gangplugin.core.names import PLAN_QUOTA_ANNOTATION
from gangplugin.core.plans import plan_state
from gangplugin.core.timeutil import parse_time
from gangplugin.kube.plan_records import parse_plan, plan_state_doc
from gangplugin.plans.clusterqueue import flavors, managed_quotas, nominal_quotas, quota_patch


def cq(annotation: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "training", "resourceVersion": "42"}
    if annotation is not None:
        meta["annotations"] = {PLAN_QUOTA_ANNOTATION: annotation}
    return {
        "metadata": meta,
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "gb200",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "10"},
                                {"name": "nvidia.com/gpu", "nominalQuota": "288"},
                            ],
                        },
                        {
                            "name": "p5",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 6144},
                                {"name": "nvidia.com/gpu", "nominalQuota": "256"},
                            ],
                        },
                    ],
                }
            ]
        },
    }


def test_reads_every_flavor_resource() -> None:
    q = nominal_quotas(cq())
    assert q[("p5", "cpu")] == "6144" and q[("gb200", "nvidia.com/gpu")] == "288"
    assert flavors(cq()) == {"gb200", "p5"}


def test_patch_changes_only_the_given_pairs_and_guards_the_version() -> None:
    patch = quota_patch(cq(), {("p5", "nvidia.com/gpu"): "32"}, {("p5", "nvidia.com/gpu"): "256"})
    assert patch["metadata"]["resourceVersion"] == "42"
    flavors_out = patch["spec"]["resourceGroups"][0]["flavors"]
    assert flavors_out[1]["resources"][1] == {"name": "nvidia.com/gpu", "nominalQuota": "32"}
    assert flavors_out[0] == cq()["spec"]["resourceGroups"][0]["flavors"][0]
    note = patch["metadata"]["annotations"][PLAN_QUOTA_ANNOTATION]
    assert orjson.loads(note) == {"p5/nvidia.com/gpu": "256"}
    # The annotation reads back as the same bookkeeping.
    assert managed_quotas(cq(note)) == {("p5", "nvidia.com/gpu"): "256"}


@pytest.mark.parametrize("bad", ["", "not json", "[1, 2]", '{"noslash": "1"}'])
def test_damaged_bookkeeping_counts_as_none(bad: str) -> None:
    assert managed_quotas(cq(bad)) == {}


def manifest(**spec: Any) -> dict[str, Any]:
    base = {
        "targetResource": "training-job",
        "clusterQueue": "training",
        "flavor": "p5",
        "resourcesPerInstance": {"nvidia.com/gpu": 8, "cpu": "192", "memory": "1900Gi"},
        "reservedCapacity": [
            {
                "instanceType": "ml.p5.48xlarge",
                "instanceCount": 4,
                "availabilityZone": "us-east-1b",
                "startTime": "2026-12-01T11:30:00Z",
                "endTime": "2026-12-01T11:31:00Z",
            }
        ],
    }
    base.update(spec)
    return {
        "apiVersion": "gangplugin.io/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": "p"},
        "spec": base,
        "status": {"blocks": [{"status": "Failed"}]},
    }


def test_parse_plan_ignores_its_own_status_and_reads_overrides() -> None:
    strict = parse_plan(manifest())
    # A one-minute block breaks the rules without the test override ...
    assert plan_state(strict, parse_time("2026-12-01T11:30:30Z", "t")).status.value == "Failed"
    relaxed = parse_plan(manifest(testOverrides={"anyBlockTimes": True, "terminationLead": "20s"}))
    assert relaxed.termination_lead == timedelta(seconds=20)
    assert relaxed.resources_per_instance == {"nvidia.com/gpu": 8, "cpu": 192_000, "memory": 1900 << 30}
    state = plan_state(relaxed, parse_time("2026-12-01T11:30:30Z", "t"))
    doc = plan_state_doc(state)
    assert doc["status"] == "Active" and doc["activeInstanceCount"] == 4
    assert doc["blocks"][0]["terminationStartsAt"] == "2026-12-01T11:30:40Z"
    assert doc["nextTransition"] == "2026-12-01T11:31:00Z"


def test_bad_override_names_the_field() -> None:
    with pytest.raises(InputError) as err:
        parse_plan(manifest(testOverrides={"terminationLead": "soon"}))
    assert err.value.field == "spec.testOverrides.terminationLead"
    with pytest.raises(InputError) as err:
        parse_plan(manifest(resourcesPerInstance={"cpu": "lots"}))
    assert err.value.field == "spec.resourcesPerInstance.cpu"
