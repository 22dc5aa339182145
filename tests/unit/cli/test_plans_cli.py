"""`gangctl plans`: the offline output contracts and exit statuses, and the online commands over a
PlanService on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangplugin.kube.resources import TRAINING_PLANS
from tests.support.caches import served, standard

FIXTURES = Path(__file__).parent.parent / "fixtures" / "plans"
INVENTORY = str(FIXTURES / "inventory.yaml")
NOW = "2026-11-20T10:07:00Z"

BLOCK_KEYS = ["instanceType", "instanceCount", "availabilityZone", "startTime", "endTime"]
BLOCK_KEYS += ["durationHours", "durationMinutes"]


def search_args(*extra: str, **flags: str) -> list[str]:
    base = {
        "--inventory": INVENTORY,
        "--instance-type": "ml.p5.48xlarge",
        "--instance-count": "16",
        "--duration-hours": "48",
        "--start-after": "2026-12-01T11:30:00Z",
        "--end-before": "2026-12-20T11:30:00Z",
        "--target-resource": "training-job",
        "--now": NOW,
    }
    base.update({f"--{k.replace('_', '-')}": v for k, v in flags.items()})
    args = ["plans", "search"]
    for k, v in base.items():
        if v:
            args += [k, v]
    return args + list(extra)


@pytest.fixture
def gangctl(gangctl: Any) -> Any:
    """The conftest's runner, taking the arguments as one list."""
    return lambda args: gangctl(*args)


# --- search ---


def test_search_json_contract(gangctl: Any) -> None:
    code, out, err = gangctl(search_args("-o", "json"))
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert list(doc) == ["offerings"]
    offerings = doc["offerings"]
    assert 1 <= len(offerings) <= 3
    first = offerings[0]
    assert list(first) == [
        "trainingPlanOfferingId",
        "targetResources",
        "durationHours",
        "durationMinutes",
        "reservedCapacityOfferings",
    ]
    assert first["targetResources"] == ["training-job"]
    assert first["trainingPlanOfferingId"].startswith("tpo-")
    (block,) = first["reservedCapacityOfferings"]
    assert list(block) == BLOCK_KEYS
    # Zone a has 16 of 32 free on Dec 1-3: the earliest block is there, from Dec 1.
    assert block == {
        "instanceType": "ml.p5.48xlarge",
        "instanceCount": 16,
        "availabilityZone": "us-east-1a",
        "startTime": "2026-12-01T11:30:00Z",
        "endTime": "2026-12-03T11:30:00Z",
        "durationHours": 48,
        "durationMinutes": 0,
    }
    assert (first["durationHours"], first["durationMinutes"]) == (48, 0)


def test_search_is_deterministic_and_yaml_matches_json(gangctl: Any) -> None:
    _, out1, _ = gangctl(search_args("-o", "json"))
    _, out2, _ = gangctl(search_args("-o", "yaml"))
    assert yaml.safe_load(out2) == json.loads(out1)
    _, out3, _ = gangctl(search_args("-o", "json"))
    assert out3 == out1


def test_search_minutes_when_start_is_not_1130(gangctl: Any) -> None:
    code, out, _ = gangctl(search_args("-o", "json", start_after="2026-12-10T08:00:00Z", duration_hours="24"))
    block = json.loads(out)["offerings"][0]["reservedCapacityOfferings"][0]
    assert code == 0
    assert (block["startTime"], block["endTime"]) == ("2026-12-10T08:00:00Z", "2026-12-11T11:30:00Z")
    assert (block["durationHours"], block["durationMinutes"]) == (27, 30)


def test_search_ultra_servers(gangctl: Any) -> None:
    args = search_args(
        "-o",
        "json",
        instance_type="",
        instance_count="",
        duration_hours="24",
        target_resource="hyperpod-cluster",
    )
    code, out, err = gangctl([*args, "--ultra-server-type", "ml.u-p6e-gb200x72", "--ultra-server-count", "2"])
    assert (code, err) == (0, "")
    (offering,) = json.loads(out)["offerings"]
    (block,) = offering["reservedCapacityOfferings"]
    assert list(block) == [*BLOCK_KEYS, "ultraServerType", "ultraServerCount"]
    assert block["instanceCount"] == 36 and block["ultraServerCount"] == 2
    assert block["startTime"] == "2026-12-02T11:30:00Z"


def test_search_none_found_exits_zero(gangctl: Any) -> None:
    code, out, _ = gangctl(search_args("-o", "json", instance_count="64"))
    assert code == 0 and json.loads(out) == {"offerings": []}
    code, out, _ = gangctl(search_args(instance_count="64"))
    assert code == 0 and "no offerings" in out


def test_search_table(gangctl: Any) -> None:
    code, out, _ = gangctl(search_args())
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["OFFERING", "BLOCK", "INSTANCE"]
    assert "us-east-1a" in lines[1] and "48h00m" in lines[1]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"instance_count": "3"}, "--instance-count: 3 is not one of 1, 2, 4, 8, 16, 32, 64"),
        ({"instance_count": "many"}, "--instance-count: 'many' is not a whole number"),
        ({"instance_count": ""}, "--instance-count: is required"),
        ({"duration_hours": "0"}, "--duration-hours: 0 is outside 1..4368"),
        ({"start_after": "tomorrow"}, "--start-after: 'tomorrow' is not an RFC 3339 time"),
        ({"end_before": "2026-11-30T00:00:00Z"}, "--end-before: 2026-11-30T00:00:00Z is not after"),
        ({"target_resource": "notebook"}, "--target-resource: 'notebook' is not one of"),
        ({"target_resource": ""}, "--target-resource: is required"),
        ({"now": "2026-11-20"}, "--now: '2026-11-20' is not an RFC 3339 time"),
        ({"inventory": "/nonexistent/inv.yaml"}, "--inventory: cannot read /nonexistent/inv.yaml"),
        ({"instance_type": ""}, "--instance-type: is required"),
    ],
)
def test_search_bad_input_exits_2(gangctl: Any, flags: dict[str, str], message: str) -> None:
    code, out, err = gangctl(search_args(**flags))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_search_bad_output_and_both_kinds(gangctl: Any) -> None:
    code, _, err = gangctl(search_args("-o", "xml"))
    assert code == 2 and "--output: 'xml' is not one of table, json, yaml" in err
    code, _, err = gangctl(search_args("--ultra-server-count", "2"))
    assert code == 2 and "--ultra-server-count: goes with --ultra-server-type" in err
    code, _, err = gangctl(search_args("--ultra-server-type", "ml.u-p6e-gb200x72"))
    assert code == 2 and "--ultra-server-type: give either --instance-type or --ultra-server-type" in err


def _write(tmp_path: Path, name: str, doc: object) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _inventory(**spec: object) -> dict[str, object]:
    return {"apiVersion": "gangplugin.io/v1alpha1", "kind": "CapacityInventory", "spec": spec}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"pools": [{"instanceType": "ml.p5.48xlarge", "instanceCount": 4}]},
            "spec.pools[0].availabilityZone",
        ),
        (
            {"pools": [{"instanceType": "x", "availabilityZone": "a", "instanceCount": "four"}]},
            "spec.pools[0].instanceCount: must be a whole number",
        ),
        (
            {"pools": [{"ultraServerType": "ml.u-other", "availabilityZone": "a", "ultraServerCount": 1}]},
            "spec.pools[0].instancesPerUltraServer: is required for ml.u-other",
        ),
        (
            {
                "pools": [{"instanceType": "x", "availabilityZone": "a", "instanceCount": 4}],
                "reservations": [
                    {
                        "instanceType": "y",
                        "availabilityZone": "a",
                        "instanceCount": 1,
                        "startTime": "2026-12-01T11:30:00Z",
                        "endTime": "2026-12-02T11:30:00Z",
                    }
                ],
            },
            "spec.reservations[0].instanceType: no pool of y instances in a",
        ),
        (
            {
                "pools": [{"instanceType": "x", "availabilityZone": "a", "instanceCount": 4}],
                "reservations": [
                    {
                        "instanceType": "x",
                        "availabilityZone": "a",
                        "instanceCount": 1,
                        "startTime": "2026-12-02T11:30:00Z",
                        "endTime": "2026-12-01T11:30:00Z",
                    }
                ],
            },
            "spec.reservations[0].endTime: 2026-12-01T11:30:00Z is not after startTime",
        ),
    ],
)
def test_bad_inventory_names_the_field(
    gangctl: Any, tmp_path: Path, spec: dict[str, object], message: str
) -> None:
    path = _write(tmp_path, "inv.yaml", _inventory(**spec))
    code, _, err = gangctl(search_args(inventory=path))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_not_yaml_and_wrong_kind(gangctl: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed\n")
    code, _, err = gangctl(search_args(inventory=str(bad)))
    assert (
        code == 2
        and err == f"error: {bad}:2:1: did not find expected ',' or ']' (while parsing a flow sequence)\n"
    )
    code, _, err = gangctl(search_args(inventory=str(FIXTURES / "plan.yaml")))
    assert code == 2 and "kind: 'TrainingPlan' is not CapacityInventory" in err


# --- status ---


def status(gangctl: Any, at: str, plan: str = str(FIXTURES / "plan.yaml"), *extra: str) -> Any:
    code, out, err = gangctl(["plans", "status", "--plan", plan, "--at", at, "-o", "json", *extra])
    assert (code, err) == (0, "")
    return json.loads(out)


def test_status_json_contract(gangctl: Any) -> None:
    doc = status(gangctl, "2026-12-01T11:30:00Z")
    assert doc == {
        "status": "Active",
        "blocks": [
            {
                "index": 0,
                "status": "Active",
                "startTime": "2026-12-01T11:30:00Z",
                "endTime": "2026-12-03T11:30:00Z",
                "terminationStartsAt": "2026-12-03T11:00:00Z",
            },
            {
                "index": 1,
                "status": "Scheduled",
                "startTime": "2026-12-05T11:30:00Z",
                "endTime": "2026-12-06T11:30:00Z",
                "terminationStartsAt": "2026-12-06T11:00:00Z",
            },
        ],
        "currentBlock": 0,
        "activeInstanceCount": 16,
        "nextTransition": "2026-12-03T11:30:00Z",
    }


def test_status_over_time(gangctl: Any) -> None:
    gap = status(gangctl, "2026-12-03T11:30:00Z")
    assert (gap["status"], gap["currentBlock"], gap["activeInstanceCount"]) == ("Scheduled", None, 0)
    assert gap["nextTransition"] == "2026-12-05T11:30:00Z"
    ultra = status(gangctl, "2026-12-05T12:00:00+00:00")
    assert (ultra["currentBlock"], ultra["activeInstanceCount"]) == (1, 36)  # 2 x 18 instances
    done = status(gangctl, "2026-12-06T11:30:00Z")
    assert (done["status"], done["nextTransition"]) == ("Expired", None)


def test_status_failed_blocks_and_hyperpod_lead(gangctl: Any) -> None:
    doc = status(gangctl, "2026-12-02T12:00:00Z", str(FIXTURES / "plan-failed-block.yaml"))
    assert [b["status"] for b in doc["blocks"]] == ["Failed", "Failed", "Scheduled"]
    assert doc["blocks"][0]["terminationStartsAt"] is None
    assert doc["blocks"][2]["terminationStartsAt"] == "2026-12-04T10:30:00Z"
    assert (doc["status"], doc["activeInstanceCount"]) == ("Scheduled", 0)
    assert doc["nextTransition"] == "2026-12-03T11:30:00Z"


def test_status_yaml_and_table(gangctl: Any) -> None:
    code, out, _ = gangctl(
        ["plans", "status", "--plan", str(FIXTURES / "plan.yaml"), "--at", NOW, "-o", "yaml"]
    )
    assert code == 0 and yaml.safe_load(out) == status(gangctl, NOW)
    code, out, _ = gangctl(
        [
            "plans",
            "status",
            "--plan",
            str(FIXTURES / "plan-failed-block.yaml"),
            "--at",
            "2026-12-03T12:00:00Z",
        ]
    )
    assert code == 0
    assert out.startswith("plan Active at 2026-12-03T12:00:00Z: 8 instances active")
    assert "instanceCount 3 is not one of" in out


def _plan(**spec: object) -> dict[str, object]:
    base: dict[str, object] = {
        "targetResource": "training-job",
        "reservedCapacity": [
            {
                "instanceType": "ml.p5.48xlarge",
                "instanceCount": 8,
                "availabilityZone": "a",
                "startTime": "2026-12-01T11:30:00Z",
                "endTime": "2026-12-02T11:30:00Z",
            }
        ],
    }
    base.update(spec)
    return {"apiVersion": "gangplugin.io/v1alpha1", "kind": "TrainingPlan", "spec": base}


def _block(**kw: object) -> dict[str, object]:
    block: dict[str, object] = {
        "instanceType": "ml.p5.48xlarge",
        "instanceCount": 8,
        "availabilityZone": "a",
        "startTime": "2026-12-01T11:30:00Z",
        "endTime": "2026-12-02T11:30:00Z",
    }
    block.update(kw)
    return {k: v for k, v in block.items() if v is not None}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"targetResource": "notebook"}, "spec.targetResource: 'notebook' is not one of"),
        ({"reservedCapacity": []}, "spec.reservedCapacity: lists no blocks"),
        (
            {"reservedCapacity": [_block(), _block(endTime="2026-12-01T11:30:00Z")]},
            "spec.reservedCapacity[1].endTime: 2026-12-01T11:30:00Z is not after startTime",
        ),
        ({"reservedCapacity": [_block(endTime="noon")]}, "spec.reservedCapacity[0].endTime: 'noon' is not"),
        (
            {"reservedCapacity": [_block(instanceCount=None)]},
            "spec.reservedCapacity[0].instanceCount: is required",
        ),
        (
            {"reservedCapacity": [_block(instanceType=None, ultraServerType="ml.u-p6e-gb200x72")]},
            "spec.reservedCapacity[0].ultraServerCount: is required",
        ),
    ],
)
def test_bad_plan_names_the_field(
    gangctl: Any, tmp_path: Path, spec: dict[str, object], message: str
) -> None:
    path = _write(tmp_path, "plan.yaml", _plan(**spec))
    code, out, err = gangctl(["plans", "status", "--plan", path, "--at", NOW])
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_bad_status_mark_and_at(gangctl: Any, tmp_path: Path) -> None:
    doc = _plan()
    doc["status"] = {"blocks": [{"status": "Broken"}]}
    code, _, err = gangctl(["plans", "status", "--plan", _write(tmp_path, "p.yaml", doc), "--at", NOW])
    assert code == 2 and "status.blocks[0].status: 'Broken' is not one of" in err
    code, _, err = gangctl(["plans", "status", "--plan", str(FIXTURES / "plan.yaml")])
    assert code == 2 and "--at: is required" in err


def test_installed_entry_point() -> None:
    gangctl = Path(sys.executable).parent / "gangctl"
    assert gangctl.exists(), f"{gangctl} missing: `make venv` installs the gangctl entry point"
    done = subprocess.run(
        [str(gangctl), *search_args("-o", "json", instance_count="5")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --instance-count: 5 is not one of 1, 2, 4, 8, 16, 32, 64"


# --- online, over a PlanService on loopback ---


def test_online_search_and_list(gangctl: Any) -> None:
    caches = standard()  # two UltraServers of 4 GPU nodes
    caches.put(TRAINING_PLANS, yaml.safe_load((FIXTURES / "plan.yaml").read_text()))
    day = datetime.now(UTC) + timedelta(days=2)
    window = [
        "--start-after",
        day.strftime("%Y-%m-%dT11:30:00Z"),
        "--end-before",
        (day + timedelta(days=10)).strftime("%Y-%m-%dT11:30:00Z"),
        "--duration-hours",
        "24",
        "--target-resource",
        "training-job",
    ]
    with served(caches) as address:
        server = ["--server", address, "--plaintext", "--token", "t"]
        asked = ["--ultra-server-type", "ml.p6e-gb200.36xlarge-x4", "--ultra-server-count", "1"]
        code, out, err = gangctl(["plans", "search", *asked, *window, *server, "-o", "json"])
        assert code == 0, err
        doc = json.loads(out)
        assert list(doc) == ["offerings", "searchTime"] and doc["offerings"]
        assert doc["offerings"][0]["reservedCapacityOfferings"][0]["ultraServerCount"] == 1
        typo = ["--instance-type", "ml.p6e-gb200.36xlarg", "--instance-count", "1"]
        code, out, err = gangctl(["plans", "search", *typo, *window, *server])
        assert (code, out) == (2, "")  # the server's field, told as the flag
        assert err == (
            "error: --instance-type: 'ml.p6e-gb200.36xlarg' is not in the inventory; "
            "did you mean ml.p6e-gb200.36xlarge?\n"
        )
        code, out, err = gangctl(["plans", "list", *server, "-o", "name"])
        assert (code, out) == (0, "trainingplan/llm-pretrain\n"), err
