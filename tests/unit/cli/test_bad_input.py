"""Bad input to gangctl is one line on stderr naming the field and exit status 2, never a
traceback, a late failure after the work, or a silent non-answer (issue 24's list and the like)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

FIXTURES = Path(__file__).parent.parent / "fixtures"
SHAPE = str(Path(__file__).resolve().parents[3] / "deploy/local/cluster-shape.yaml")
PLAN_SEARCH = [
    "plans",
    "search",
    "--inventory",
    str(FIXTURES / "plans/inventory.yaml"),
    "--duration-hours",
    "48",
    "--start-after",
    "2026-12-01T11:30:00Z",
    "--end-before",
    "2026-12-20T11:30:00Z",
    "--target-resource",
    "training-job",
    "--now",
    "2026-11-20T10:07:00Z",
]


def one_line(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "", (code, out, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


def test_plot_into_a_file_is_refused_before_the_replay(gangctl: Any, tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0\n")
    # The trace does not exist either: --plot is checked before any file is read or replayed.
    err = one_line(
        *gangctl("simulate", "--cluster", SHAPE, "--trace", "/nonexistent.csv", "--plot", str(passwd))
    )
    assert err == f"error: --plot: {passwd} is a file; give a directory for the PNGs"
    err = one_line(*gangctl("simulate", "--cluster", SHAPE, "--synthetic", "2", "--plot", f"{passwd}/sub"))
    assert err.startswith(f"error: --plot: cannot create {passwd}/sub:")
    err = one_line(
        *gangctl(
            "simulate", "--cluster", SHAPE, "--synthetic", "2", "--sweep", "ultraservers=1..2", "--plot", "p"
        )
    )
    assert err == "error: --plot: does not go with --sweep (one replay per UltraServer count)"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--required-max-pods", "-3"], "error: --required-max-pods: -3 is not a pod count >= 0 (0: none)"),
        (["--seed", "x"], "error: Invalid value for '--seed': 'x' is not a valid integer."),
        (
            ["--arrival-scale", "inf"],
            "error: --arrival-scale: inf is not a number above 0 (0.5: twice the load)",
        ),
        (
            ["--offerings", "o.json", "--sweep", "ultraservers=1..2"],
            "error: --offerings: does not go with --sweep",
        ),
    ],
)
def test_simulate_flags(gangctl: Any, flags: list[str], message: str) -> None:
    err = one_line(*gangctl("simulate", "--cluster", SHAPE, "--synthetic", "2", *flags))
    assert err.startswith(message)


def test_a_malformed_kubeconfig_is_its_file_line_and_column(gangctl: Any, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\nclusters: [\n  - {name: x\n")
    err = one_line(*gangctl("get", "gangs", "--kubeconfig", str(config)))
    assert err == f"error: {config}:3:3: expected the node content, but found '-' (while parsing a flow node)"
    # The same with a server given: the broken file is still told, not skipped.
    err = one_line(*gangctl("explain", "x", "--kubeconfig", str(config), "--server", "127.0.0.1:1"))
    assert err.startswith(f"error: {config}:3:3:")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--instance-type", "ml.p5.48xlarg", "--instance-count", "16"],
            "error: --instance-type: 'ml.p5.48xlarg' is not in the inventory; did you mean ml.p5.48xlarge?",
        ),
        (
            ["--ultra-server-type", "ml.u-p6e-gb200x7", "--ultra-server-count", "1"],
            "error: --ultra-server-type: 'ml.u-p6e-gb200x7' is not in the inventory; "
            "did you mean ml.u-p6e-gb200x72?",
        ),
    ],
)
def test_a_type_the_inventory_lacks_names_the_closest(gangctl: Any, flags: list[str], message: str) -> None:
    assert one_line(*gangctl(*PLAN_SEARCH, *flags)) == message


def test_plans_create_flags(gangctl: Any) -> None:
    create = ["plans", "create", "p", "--offering-id", "tpo-1", "--search-time", "2026-11-20T10:07:00Z"]
    err = one_line(*gangctl(*create, "--server", "127.0.0.1:1"))
    assert err == "error: --resources-per-instance: is required, e.g. nvidia.com/gpu=8,cpu=192,memory=1900Gi"
    spares = ["--resources-per-instance", "nvidia.com/gpu=8", "--spare-instances-per-ultra-server", "-1"]
    err = one_line(*gangctl(*create, *spares, "--server", "127.0.0.1:1"))
    assert err == "error: --spare-instances-per-ultra-server: -1 is not a count >= 0"


@pytest.mark.parametrize(
    "command",
    [
        ["place", "--nodes", "{bad}", "--workload", str(FIXTURES / "job_4.yaml")],
        ["place", "--nodes", str(FIXTURES / "gb200_nodes.yaml"), "--workload", "{bad}"],
        [
            "place",
            "--nodes",
            str(FIXTURES / "gb200_nodes.yaml"),
            "--workload",
            str(FIXTURES / "job_4.yaml"),
            "--policy",
            "{bad}",
        ],
        ["plans", "status", "--plan", "{bad}", "--at", "2026-12-01T11:30:00Z"],
        ["simulate", "--cluster", "{bad}", "--synthetic", "2"],
        [
            *PLAN_SEARCH[:2],
            "--inventory",
            "{bad}",
            *PLAN_SEARCH[4:],
            "--instance-type",
            "x",
            "--instance-count",
            "1",
        ],
    ],
)
def test_every_yaml_file_error_has_its_line_and_column(
    gangctl: Any, tmp_path: Path, command: list[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: List\nitems:\n  - name: a\n   nested: b\n")
    err = one_line(*gangctl(*[str(bad) if c == "{bad}" else c for c in command]))
    assert err == f"error: {bad}:4:4: did not find expected '-' indicator (while parsing a block collection)"


def test_a_file_that_is_not_there_names_the_flag(gangctl: Any) -> None:
    err = one_line(
        *gangctl("place", "--nodes", "/nonexistent.yaml", "--workload", str(FIXTURES / "job_4.yaml"))
    )
    assert err == "error: --nodes: cannot read /nonexistent.yaml: No such file or directory"


def test_a_list_of_several_objects_where_one_is_wanted(gangctl: Any, tmp_path: Path) -> None:
    two = tmp_path / "two.yaml"
    job = yaml.safe_load((FIXTURES / "job_4.yaml").read_text())
    two.write_text(yaml.safe_dump({"kind": "List", "items": [job, job]}))
    err = one_line(*gangctl("place", "--nodes", str(FIXTURES / "gb200_nodes.yaml"), "--workload", str(two)))
    assert err == f"error: {two}: items: the List holds 2 objects; give a file with one"
