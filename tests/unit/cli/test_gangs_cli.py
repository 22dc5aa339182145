"""`gangctl get gangs`, `explain` and `wait` as a user types them, against a GangService on
loopback fed plain objects: KIND/NAME of the owning job, -o wide|name, -w, and waiting for a job
whose Workload Kueue has not made yet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gangplugin.kube.client import PODS, WORKLOADS
from tests.support.caches import Caches, owned, pod, served, standard, workload
from tests.support.cli import GANGCTL, Running


@pytest.fixture
def caches() -> Caches:
    c = standard()
    c.put(
        WORKLOADS,
        workload("run", 2, check="Ready", admitted=True, pinned={"topology.k8s.aws/ultraserver-id": "us-1"}),
    )
    for i in range(2):
        c.put(PODS, pod(f"run-{i}", "run", node=f"us1-{i}", ready=True))
    c.put(WORKLOADS, owned(workload("job-train-1a2b3", 3)))
    c.put(PODS, pod("pg-0", "pg", node="us2-0", size=2))
    return c


@pytest.fixture
def address(caches: Caches) -> Iterator[str]:
    with served(caches) as addr:
        yield addr


def args(address: str, *command: str) -> list[str]:
    return [*GANGCTL, *command, "--server", address, "--plaintext", "--token", "t"]


@pytest.fixture
def gangctl(gangctl: Any) -> Any:
    """The conftest's in-process runner, against the loopback server at `address`."""
    return lambda address, *command: gangctl(*args(address, *command)[len(GANGCTL) :])


def test_kind_name_of_the_owning_job_wide_and_name(address: str, gangctl: Any) -> None:
    code, out, err = gangctl(address, "get", "gangs", "job/train", "-n", "team-a", "-o", "wide")
    assert code == 0, err
    head, row = out.splitlines()
    assert head.split("  ")[0] == "NAME" and head.endswith("CLUSTER QUEUE  OWNER")
    assert "BIND MODE" in head and row.startswith("job-train-1a2b3") and row.endswith("job/train")
    _, out, _ = gangctl(address, "get", "gang", "jobs.batch/train", "-n", "team-a", "-o", "json")
    (gang,) = json.loads(out)["gangs"]
    assert (
        gang["owner"] == {"group": "batch", "kind": "Job", "name": "train"} and gang["bindMode"] == "Ungate"
    )
    _, out, _ = gangctl(address, "get", "gangs", "-n", "team-a", "-o", "name")
    assert out.splitlines() == ["gang/team-a/job-train-1a2b3", "gang/team-a/pg", "gang/team-a/run"]
    code, out, _ = gangctl(address, "explain", "job/train", "-n", "team-a")
    assert code == 0 and "Owner:     job/train" in out


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            ["explain", "pytorchjb/llama", "-n", "team-a"],
            "error: GANG: 'pytorchjb' in 'pytorchjb/llama' is not one of job, jobset, pytorchjob, trainjob, "
            "leaderworkerset, rayjob, raycluster, workload; did you mean pytorchjob/llama?",
        ),
        (["get", "gangs", "job/", "-n", "team-a"], "error: GANG: 'job/' is not KIND/NAME (e.g. job/train-1)"),
        (
            ["get", "gangs", "-n", "team-a", "-o", "wid"],
            "error: --output: 'wid' is not one of table, wide, json, yaml, name",
        ),
        (
            ["explain", "run", "-n", "team-a", "-o", "wide"],
            "error: --output: 'wide' is not one of table, json, yaml",
        ),
        (
            ["get", "gangs", "run", "-A"],
            "error: --all-namespaces: a gang is named in one namespace: give -n with GANG",
        ),
        (
            ["wait", "run", "-n", "team-a", "--timeout", "0s"],
            "error: --timeout: '0s' is not a duration above 0",
        ),
    ],
)
def test_bad_input_is_one_line(address: str, gangctl: Any, command: list[str], message: str) -> None:
    code, out, err = gangctl(address, *command)
    assert code == 2 and out == "", err
    assert err.startswith(message) and len(err.splitlines()) == 1, err


def test_a_job_with_no_gang_is_not_found(address: str, gangctl: Any) -> None:
    code, _, err = gangctl(address, "explain", "job/nothing", "-n", "team-a")
    assert code == 1  # an answer from the server, as kubectl's NotFound
    assert err.startswith("error: NOT_FOUND: owner: Job.batch 'nothing' owns no gang in namespace 'team-a'")


def test_get_watch_prints_a_row_per_change(caches: Caches, address: str) -> None:
    watch = Running(args(address, "get", "gangs", "-n", "team-a", "-w"))
    try:
        head = watch.next()
        rows = {watch.next().split()[0] for _ in range(3)}
        assert head.split() == ["NAME", "QUEUE", "READY", "DOMAIN", "PHASE", "AGE"]
        assert rows == {"job-train-1a2b3", "pg", "run"}
        caches.put(PODS, pod("pg-1", "pg", node="us2-1", ready=True, size=2))  # pg's 2nd pod is bound
        change = watch.next()
        assert change.split()[:5] == ["pg", "-", "1/2", "us-2", "Admitted"]
        assert change.index("Admitted") == head.index("PHASE")  # aligned under the header
    finally:
        watch.stop()


def test_wait_for_a_job_typed_before_kueue_made_its_workload(caches: Caches, address: str) -> None:
    wait = Running(args(address, "wait", "job/fresh", "-n", "team-a", "--timeout", "1m"))
    try:
        assert wait.next() == "waiting for the gang of job/fresh in namespace team-a to be ready (timeout 1m)"
        caches.put(
            WORKLOADS, owned(workload("job-fresh-4c5d6", 1, check="Ready", admitted=True), name="fresh")
        )
        assert wait.next().endswith("job-fresh-4c5d6: Admitted    0/1 bound, 0/1 Ready")
        caches.put(PODS, pod("fresh-0", "job-fresh-4c5d6", node="us2-3", ready=True))
        while not (line := wait.next()).startswith("gang "):
            pass
        assert line == "gang team-a/job-fresh-4c5d6 is ready: 1/1 pods Ready"
        assert wait.proc.wait(timeout=30) == 0
    finally:
        wait.stop()


def test_wait_names_what_never_came(address: str, gangctl: Any) -> None:
    code, out, err = gangctl(address, "wait", "job/never", "-n", "team-a", "--timeout", "1s")
    assert code == 1
    assert err.strip().endswith(
        "Kueue made no Workload of job/never (does it carry the kueue.x-k8s.io/queue-name label?)"
    )
    code, out, _ = gangctl(address, "wait", "run", "-n", "team-a", "-o", "name")
    assert (code, out) == (0, "gang/team-a/run\n")
