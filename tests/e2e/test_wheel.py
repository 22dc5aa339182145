"""gangplugin as users get it: the wheel, installed into a fresh venv outside the checkout, and
every gangctl command run from there as a user runs it.

- The wheel is built from the checkout (`pip wheel --no-deps`) and installed, not editable, into a
  venv in a temporary folder; every command runs with that folder as its working directory, so
  nothing can import from the checkout. pip's cache is reused: PyPI only for what it lacks.
- The package carries its generated gRPC code, and no code generator (grpcio-tools) comes with it.
- Offline commands (`place`, `plans search|status`, `simulate`) on the files the checkout ships;
  `simulate` without the `sim` extra runs the policies that need nothing more and says which
  extra adds `optimal` and `--plot`.
- Online commands (`get`, `explain`, `wait`, `plans list|search|create|describe`) against the e2e
  session's cluster with its kubeconfig alone (the gangplugin.io/grpc extension names the API).
- `kubectl gang ...` through the pinned kubectl, with the venv's bin on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangplugin.core.timeutil import format_time
from gangplugin.kube.client import JOBS
from gangplugin.kube.resources import TRAINING_PLANS
from gangplugin.localcluster.cluster import REPO
from tests.support.cluster import E2ECluster
from tests.support.kube import unique, wait_for, workload_of
from tests.support.manifests import kubectl
from tests.support.objects import gpu_job

US = "topology.k8s.aws/ultraserver-id"
FIXTURES = REPO / "tests" / "unit" / "fixtures"


@dataclass(frozen=True)
class Installed:
    bin: Path
    cwd: Path  # outside the checkout

    def run(
        self, *argv: str, env: dict[str, str] | None = None, timeout: float = 240
    ) -> subprocess.CompletedProcess[str]:
        # Only what a user's shell has: no GANGCTL_* settings, no PYTHONPATH into the checkout.
        clean = {
            k: v for k, v in os.environ.items() if not k.startswith(("GANGCTL_", "PYTHON", "VIRTUAL_ENV"))
        }
        clean["PATH"] = f"{self.bin}{os.pathsep}{clean.get('PATH', '')}"
        return subprocess.run(
            list(argv),
            cwd=self.cwd,
            env={**clean, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def gangctl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.bin / "gangctl"), *args, **kw)


def _pip(python: Path, *args: str, cwd: Path) -> None:
    out = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    assert REPO not in root.parents, root
    # What the wheel is built from, copied as the image's build does: setuptools' build/ folder in
    # the checkout could hold modules deleted since.
    src = root / "src"
    shutil.copytree(REPO / "gangplugin", src / "gangplugin", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    _pip(Path(sys.executable), "wheel", "--no-deps", "-q", "-w", str(root / "dist"), str(src), cwd=root)
    (wheel,) = (root / "dist").glob("gangplugin-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=300)
    python = root / "venv" / "bin" / "python"
    _pip(python, "install", "-q", str(wheel), cwd=root)
    yield Installed(root / "venv" / "bin", root)


def test_the_wheel_carries_the_grpc_code_and_no_generator(installed: Installed) -> None:
    probe = (
        "import importlib.util as u, gangplugin.api.proto as p; print(p.__file__); "
        "print(u.find_spec('grpc_tools') is None, u.find_spec('scipy') is None)"
    )
    out = installed.run(str(installed.bin / "python"), "-c", probe)
    assert out.returncode == 0, out.stderr
    where, absent = out.stdout.splitlines()
    assert "site-packages" in where and not where.startswith(str(REPO)), where
    assert absent == "True True", "grpcio-tools is a dev tool and scipy comes with the sim extra only"
    for script in ("gangctl", "gangplugin", "kubectl-gang"):
        assert (installed.bin / script).exists(), script


def test_offline_commands_on_the_shipped_files(installed: Installed) -> None:
    out = installed.gangctl(
        "place",
        "--nodes", str(FIXTURES / "gb200_nodes.yaml"),
        "--pods", str(FIXTURES / "gb200_pods.yaml"),
        "--workload", str(FIXTURES / "workload_16_required.yaml"),
        "-o", "json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    placed = json.loads(out.stdout)
    assert placed["feasible"] is True and len(placed["assignments"]) == 16, placed

    out = installed.gangctl(
        "plans", "search",
        "--inventory", str(FIXTURES / "plans" / "inventory.yaml"),
        "--instance-type", "ml.p5.48xlarge", "--instance-count", "8", "--duration-hours", "48",
        "--start-after", "2026-12-01T00:00:00Z", "--end-before", "2026-12-20T00:00:00Z",
        "--target-resource", "training-job", "--now", "2026-11-30T00:00:00Z", "-o", "json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    offerings = json.loads(out.stdout)["offerings"]
    assert offerings and offerings[0]["reservedCapacityOfferings"][0]["instanceType"] == "ml.p5.48xlarge"

    plan = FIXTURES / "plans" / "plan.yaml"
    out = installed.gangctl(
        "plans", "status", "--plan", str(plan), "--at", "2026-12-01T12:00:00Z", "-o", "json"
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] in {"Pending", "Scheduled", "Active", "Expired", "Failed"}

    shape, trace = (
        REPO / "deploy" / "local" / "cluster-shape.yaml",
        REPO / "deploy" / "traces" / "acme-kalos-converted.csv",
    )
    out = installed.gangctl("simulate", "--cluster", str(shape), "--trace", str(trace), "-o", "json")
    assert out.returncode == 0, out.stderr
    assert [p["policy"] for p in json.loads(out.stdout)["policies"]] == [
        "gangplugin",
        "best-fit",
        "first-fit",
    ]
    assert out.stderr.splitlines() == [
        "note: policy optimal left out: it and --plot need the sim extra (pip install 'gangplugin[sim]')"
    ]
    # Asked for by name, each says in one line what to install (exit 2: bad input), no traceback.
    for extra in (("--policy", "optimal"), ("--plot", str(installed.cwd / "plots"))):
        out = installed.gangctl("simulate", "--cluster", str(shape), "--trace", str(trace), *extra)
        assert out.returncode == 2, (extra, out.stderr)
        assert "Traceback" not in out.stderr, out.stderr
        line = out.stderr.splitlines()[-1]  # after the note, where the replay ran before --plot
        assert line.startswith(f"error: {extra[0]}:") and "pip install 'gangplugin[sim]'" in line, line


@pytest.fixture
def running_gang(cluster: E2ECluster, namespace: str, gang_queue: Any) -> str:
    """A 2-pod gang admitted in one UltraServer: its Workload's name."""
    job = unique("wheel")
    pinned = {"metadata": {"annotations": {"gangplugin.io/required-topology": US}}}
    cluster.client.create(JOBS, gpu_job(job, namespace, gang_queue(), pods=2, gpus=4, **pinned))
    wl = wait_for(lambda: workload_of(cluster.client, namespace, job), 60, "the Workload")
    return str(wl["metadata"]["name"])


def test_online_commands_with_the_kubeconfig_alone(
    installed: Installed, cluster: E2ECluster, namespace: str, running_gang: str
) -> None:
    assert cluster.local, (
        "the kubeconfig of a cluster KUBECONFIG names may lack the gangplugin.io/grpc extension"
    )
    env = {"KUBECONFIG": str(cluster.kubeconfig)}
    out = installed.gangctl(
        "wait", running_gang, "-n", namespace, "--for", "ready", "--timeout", "3m", env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == f"gang {namespace}/{running_gang} is ready: 2/2 pods Ready"
    out = installed.gangctl("get", "gangs", "-n", namespace, "-o", "json", env=env)
    assert out.returncode == 0, out.stderr
    (gang,) = json.loads(out.stdout)["gangs"]
    assert (gang["name"], gang["phase"], gang["domainLevel"]) == (running_gang, "Running", US)
    out = installed.gangctl("explain", running_gang, "-n", namespace, "-o", "json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["summary"].startswith(f"Running in {US}=")

    now = datetime.now(UTC)
    search = [
        "--instance-type", "ml.p5.48xlarge", "--instance-count", "1", "--duration-hours", "24",
        "--start-after", format_time(now + timedelta(days=40)),
        "--end-before", format_time(now + timedelta(days=55)),
        "--target-resource", "training-job",
    ]  # fmt: skip
    # Online search takes --server (without it, search is offline and wants --inventory): the
    # address the kubeconfig's extension gives a client-certificate user such as this admin.
    kubeconfig = yaml.safe_load(cluster.kubeconfig.read_text())
    (ext,) = [e["extension"] for c in kubeconfig["clusters"] for e in c["cluster"].get("extensions", [])]
    search.append(f"--server={ext['client-certificate-server']}")
    out = installed.gangctl("plans", "search", *search, "-o", "json", env=env)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    offering = found["offerings"][0]
    name = unique("wheel-plan")
    try:
        out = installed.gangctl(
            "plans", "create", name, "--offering-id", offering["trainingPlanOfferingId"],
            "--search-time", found["searchTime"], "--cluster-queue", "training", "--flavor", "p5",
            "--resources-per-instance", "nvidia.com/gpu=8", *search, env=env,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert cluster.client.get(TRAINING_PLANS, name)["spec"]["clusterQueue"] == "training"
        out = installed.gangctl("plans", "describe", name, "-o", "json", env=env)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["status"] == "Scheduled"
        out = installed.gangctl("plans", "list", "-o", "json", env=env)
        assert out.returncode == 0, out.stderr
        assert name in out.stdout
    finally:
        cluster.client.delete(TRAINING_PLANS, name)


def test_kubectl_gang_is_the_same_cli_as_a_kubectl_plugin(
    installed: Installed, cluster: E2ECluster, namespace: str, running_gang: str
) -> None:
    kc = str(kubectl())
    env = {"KUBECONFIG": str(cluster.kubeconfig)}
    out = installed.run(kc, "plugin", "list", "--name-only")
    assert out.returncode == 0, out.stderr
    assert "kubectl-gang" in out.stdout.split(), out.stdout
    out = installed.run(kc, "gang", "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Usage: kubectl gang [OPTIONS] COMMAND [ARGS]..."), out.stdout
    for command in ("get", "explain", "wait", "place", "plans", "simulate"):
        assert f"  {command} " in out.stdout or out.stdout.count(f"\n  {command}") == 1, (command, out.stdout)
    out = installed.run(kc, "gang", "plans", "search", "--help")
    assert out.stdout.startswith("Usage: kubectl gang plans search [OPTIONS]"), out.stdout
    out = installed.run(
        kc, "gang", "wait", running_gang, "-n", namespace, "--for", "ready", "--timeout", "3m", env=env
    )
    assert out.returncode == 0, out.stderr
    out = installed.run(kc, "gang", "get", "gangs", "-n", namespace, "-o", "json", env=env)
    assert out.returncode == 0, out.stderr
    assert [g["name"] for g in json.loads(out.stdout)["gangs"]] == [running_gang]
    out = installed.run(kc, "gang", "explain", running_gang, "-n", namespace, env=env)
    assert out.returncode == 0 and f"{namespace}/{running_gang}" in out.stdout, out.stderr
    out = installed.run(
        kc, "gang", "place", "--nodes", str(FIXTURES / "gb200_nodes.yaml"),
        "--workload", str(FIXTURES / "workload_16_required.yaml"), "-o", "json",
    )  # fmt: skip
    assert out.returncode == 0 and json.loads(out.stdout)["feasible"] is True, out.stderr
    out = installed.run(
        kc,
        "gang",
        "plans",
        "status",
        "--plan",
        str(FIXTURES / "plans" / "plan.yaml"),
        "--at",
        "2026-12-01T12:00:00Z",
    )
    assert out.returncode == 0, out.stderr
    out = installed.run(
        kc, "gang", "simulate", "--cluster", str(REPO / "deploy" / "local" / "cluster-shape.yaml"),
        "--synthetic", "20", "-o", "json",
    )  # fmt: skip
    assert out.returncode == 0 and json.loads(out.stdout)["jobs"] == 20, out.stderr
    # Bad input through kubectl: the plugin's own one line and exit status.
    out = installed.run(kc, "gang", "simulate", "--cluster", "/nonexistent.yaml", "--synthetic", "1")
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
