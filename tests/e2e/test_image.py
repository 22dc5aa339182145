"""The image `make image` builds, run as deploy/manifests/base's Deployment runs it.

- The image: `gangplugin --version` is pyproject.toml's, it runs as a non-root UID and holds no
  compiler.
- Two containers of it (podman, or Docker where an engine answers: hack/container.sh) with the
  Deployment's args, env, volume mounts and securityContext read from the manifest (read-only root
  filesystem, no capabilities, its UID), each with a TokenRequest token of the base's
  ServiceAccount, the cluster CA and the namespace at the in-cluster path, and
  KUBERNETES_SERVICE_HOST/PORT at the local cluster's API server. Host networking stands in for
  pod networking, so each replica's listeners move to ports of its own on 127.0.0.1; the
  extender's port is shared, as the extender Service is: only the leader binds it. The pods they
  stand for exist as API objects (the Deployment's template, which no scheduler serves), so the
  leader labels its own pod as in a cluster.
- Both answer /healthz, exactly one holds the Lease, a gang goes through Kueue, their admission
  check, the base's second kube-scheduler and their extender; killing the leader's container hands
  the Lease over within the protocol's worst case (tests/support/leases.py: acquireTime - last
  renewTime <= D + 2*J*P + 4T, and never before the renew deadline, so two leaders never act at
  once); no log line says the API server refused a request.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from gangplugin.core.leader import ElectionConfig
from gangplugin.core.names import LEADER_LABEL
from gangplugin.kube.client import PODS, ApiError, Client
from gangplugin.kube.lease import LEASES
from gangplugin.localcluster.cluster import REPO, LocalCluster
from tests.support import base_install, containers
from tests.support.base_install import NAMESPACE, refused, run_gang
from tests.support.cluster import E2ECluster
from tests.support.containers import build_image, engine
from tests.support.grpcauth import service_account_token
from tests.support.kube import gang_queues, unique, wait_for
from tests.support.leases import REQUEST_TIMEOUT, watch_handover, worst_case_handover
from tests.support.manifests import render

ELECTION = ElectionConfig()  # serve's --leader-election-* defaults, which the Deployment keeps


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()


def test_image_is_the_version_runs_non_root_and_holds_no_compiler(image: str) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    out = engine("run", "--rm", image, "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"gangplugin, version {version}"
    out = engine("run", "--rm", "--entrypoint", "sh", image, "-c", "id -u; command -v gcc cc c++ clang ld as")
    uid, *compilers = out.stdout.split()
    assert uid == str(_deployment()["spec"]["template"]["spec"]["securityContext"]["runAsUser"]), out.stdout
    assert compilers == [], out.stdout


def _deployment() -> dict[str, Any]:
    return next(o for o in render() if o["kind"] == "Deployment")


def _bind_ports(local: LocalCluster, replica: int) -> dict[str, int]:
    """Where each listener of replica `replica` binds on the host network: the local cluster's
    ports for its gangplugin replicas (the first's webhook port is the one the API server calls),
    and for every replica the one extender port kube-scheduler calls (the leader's alone)."""
    health, grpc, webhook = local.ports.gangplugin_replica(replica)
    return {"health": health, "grpc": grpc, "webhook": webhook, "extender": local.ports.gangplugin_extender}


@dataclass(frozen=True)
class Replica:
    name: str  # the container's and the pod object's
    health: int
    log: Path


def _run_argv(
    cluster: E2ECluster, local: LocalCluster, image: str, name: str, replica: int, tmp_path: Path
) -> tuple[list[str], int]:
    """The engine's `run` for one replica of the Deployment, and its health port."""
    ports = _bind_ports(local, replica)
    pki = local.pki_dir
    # The local cluster's stand-ins for what cert-manager issues.
    secrets = {
        "gangplugin-serving-tls": {
            "tls.crt": (pki / "webhook.crt").read_bytes(),
            "tls.key": (pki / "webhook.key").read_bytes(),
        },
        "gangplugin-extender-client-ca": {"ca.crt": (local.extender_clients_dir / "ca.crt").read_bytes()},
    }
    deployment = _deployment()
    token = service_account_token(
        cluster.client, NAMESPACE, deployment["spec"]["template"]["spec"]["serviceAccountName"]
    )
    account = {
        "token": token.encode(),
        "ca.crt": (pki / "ca.crt").read_bytes(),
        "namespace": NAMESPACE.encode(),
    }
    argv = containers.run_argv(
        deployment, image, name, NAMESPACE, ports, secrets, account, local.ports.apiserver, tmp_path
    )
    return argv, ports["health"]


@contextlib.contextmanager
def _replicas(
    cluster: E2ECluster, local: LocalCluster, image: str, tmp_path: Path
) -> Iterator[list[Replica]]:
    """The Deployment's two pods as API objects, and their containers started one after the other
    (the first leads); on the way out the containers' logs are kept and everything is removed."""
    template = _deployment()["spec"]["template"]
    replicas: list[Replica] = []
    try:
        for n in (1, 2):
            name = unique("gangplugin-image")
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {**template["metadata"], "name": name, "namespace": NAMESPACE},
                # No scheduler serves this name: the pod object stands for the container run here.
                "spec": {**template["spec"], "schedulerName": "e2e-runs-it-as-a-container"},
            }
            argv, health = _run_argv(cluster, local, image, name, n, tmp_path)
            replica = Replica(name, health, tmp_path / f"{name}.log")
            replicas.append(replica)
            cluster.client.create(PODS, pod, NAMESPACE)
            out = engine(*argv)
            assert out.returncode == 0, out.stderr
            wait_for(partial(_healthy, replica, local), 120, f"{name} to answer /healthz")
            if n == 1:
                wait_for(partial(_leads, cluster.client, name), 60, f"{name} to lead")
        yield replicas
    finally:
        for r in replicas:
            containers.keep_logs_and_remove(r.name, r.log)
            with contextlib.suppress(ApiError):
                cluster.client.delete(PODS, r.name, NAMESPACE)


def _ca(local: LocalCluster) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(local.pki_dir / "ca.crt"))


def _healthy(r: Replica, local: LocalCluster) -> bool:
    return base_install.ok(f"https://127.0.0.1:{r.health}/healthz", verify=_ca(local))


def _holder(client: Client) -> str | None:
    lease = client.get_or_none(LEASES, "gangplugin", NAMESPACE) or {}
    holder = lease.get("spec", {}).get("holderIdentity")
    return str(holder) if holder else None


def _ready(r: Replica, local: LocalCluster) -> str | None:
    """None until /readyz answers 200, then whether the replica stands by or leads."""
    with contextlib.suppress(httpx.HTTPError):
        answer = httpx.get(f"https://127.0.0.1:{r.health}/readyz", verify=_ca(local), timeout=5)
        if answer.status_code == 200:
            return "standby" if "standby" in answer.text else "leading"
    return None


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        return True
    return False


def _leads(client: Client, pod: str) -> bool:
    return _holder(client) == pod


def _leader_label(client: Client, pod: str) -> str | None:
    labels = client.get(PODS, pod, NAMESPACE)["metadata"].get("labels") or {}
    return labels.get(LEADER_LABEL)


def test_two_containers_elect_a_leader_run_a_gang_and_hand_over(
    cluster: E2ECluster, namespace: str, image: str, tmp_path: Path
) -> None:
    client = cluster.client
    with (
        base_install.installed_rbac(cluster),
        base_install.local_gangplugin_stopped(cluster) as local,
        _replicas(cluster, local, image, tmp_path) as replicas,
    ):
        first, second = replicas
        assert all(_healthy(r, local) for r in replicas)
        assert _holder(client) == first.name
        wait_for(lambda: _leader_label(client, first.name) == "true", 30, "the leader's pod labeled")
        # Ready once its caches synced, standing by for the leader-only components.
        wait_for(lambda: _ready(second, local), 60, f"{second.name} ready")
        assert _ready(first, local) == "leading" and _ready(second, local) == "standby"
        assert _leader_label(client, second.name) is None
        # The securityContext in force inside: its UID, no capabilities, a read-only root.
        out = engine("exec", first.name, "sh", "-c", "id -u; grep CapEff /proc/1/status; touch /probe")
        uid = _deployment()["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
        assert out.stdout.split() == [str(uid), "CapEff:", "0000000000000000"], out.stdout
        assert "Read-only file system" in out.stderr, out.stderr

        with (
            base_install.gangplugin_scheduler(cluster, local, tmp_path) as sched_log,
            gang_queues(client, namespace) as make_queue,
        ):
            run_gang(client, namespace, make_queue(gpu_quota=64))

        before = client.get(LEASES, "gangplugin", NAMESPACE)
        assert before["spec"]["leaseDurationSeconds"] == ELECTION.lease_duration, before["spec"]
        killed = time.monotonic()
        out = engine("kill", "--signal=KILL", first.name)
        assert out.returncode == 0, out.stderr
        bound = worst_case_handover(ELECTION)
        handover = watch_handover(
            client, NAMESPACE, "gangplugin", before, second.name, bound + 2 * REQUEST_TIMEOUT
        )
        print(
            f"handover: {handover.seconds:.1f}s from the last renewal to the new holder's acquireTime, "
            f"{time.monotonic() - killed:.1f}s from the kill to the test seeing it"
        )
        assert ELECTION.renew_deadline <= handover.seconds <= bound, (handover, bound)
        assert handover.spec["leaseTransitions"] == before["spec"]["leaseTransitions"] + 1
        wait_for(lambda: _leader_label(client, second.name) == "true", 30, "the new leader's pod labeled")
        wait_for(partial(_listening, local.ports.gangplugin_extender), 30, "the new leader's extender")
        wait_for(lambda: _ready(second, local) == "leading", 30, "the new leader ready with every component")
    for r in replicas:
        assert r.log.stat().st_size > 0, r.log
        assert refused(r.log) == [], f"{r.name} was refused by the API server ({r.log})"
    assert refused(sched_log) == [], f"the gangplugin-scheduler was refused ({sched_log})"
