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
  the Lease over within the protocol's worst case (tests/e2e/leases.py: acquireTime - last
  renewTime <= D + 2*J*P + 4T, and never before the renew deadline, so two leaders never act at
  once); no log line says the API server refused a request.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import subprocess
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
from gangplugin.localcluster.cluster import REPO, LocalCluster
from tests.e2e import base_install
from tests.e2e.base_install import LEASES, NAMESPACE, refused, run_gang
from tests.e2e.conftest import E2ECluster
from tests.e2e.grpcauth import service_account_token
from tests.e2e.kube import gang_queues, unique, wait_for
from tests.e2e.leases import REQUEST_TIMEOUT, watch_handover, worst_case_handover
from tests.unit.test_manifests import render

ENGINE = str(REPO / "hack" / "container.sh")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
ELECTION = ElectionConfig()  # serve's --leader-election-* defaults, which the Deployment keeps


def engine(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENGINE, *args], capture_output=True, text=True, check=False, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> str:
    """`make image`'s build (hack/image.sh): cached by content, so a warm run takes seconds."""
    out = subprocess.run(
        [str(REPO / "hack" / "image.sh")], capture_output=True, text=True, check=False, timeout=1800
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout.strip().splitlines()[-1]


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


def _security_flags(pod_spec: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """The engine flags for the pod's and the container's securityContext; a field this does not
    translate fails the test, so the manifest cannot gain one the containers here would ignore."""
    pod_sc = dict(pod_spec.get("securityContext") or {})
    sc = dict(container.get("securityContext") or {})
    assert pod_sc.pop("runAsNonRoot") is True and pod_sc["runAsUser"] != 0
    flags = [f"--user={pod_sc.pop('runAsUser')}:{pod_sc.pop('runAsGroup')}"]
    # RuntimeDefault is the engine's default seccomp profile: no flag.
    assert pod_sc.pop("seccompProfile") == {"type": "RuntimeDefault"}
    if sc.pop("allowPrivilegeEscalation") is False:
        flags.append("--security-opt=no-new-privileges")
    if sc.pop("readOnlyRootFilesystem") is True:
        flags.append("--read-only")
        if engine().stdout.strip() == "podman":  # else it adds writable /tmp, /run, /var/tmp
            flags.append("--read-only-tmpfs=false")
    caps = sc.pop("capabilities")
    assert set(caps) == {"drop"}, f"capabilities the image test does not apply: {caps}"
    flags += [f"--cap-drop={c}" for c in caps["drop"]]
    assert pod_sc == {} and sc == {}, f"securityContext fields the image test does not apply: {pod_sc} {sc}"
    return flags


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


def _files(directory: Path, files: dict[str, bytes]) -> Path:
    """A directory the container's non-root UID can read (as a Secret volume's files are)."""
    directory.mkdir(mode=0o755)
    for name, data in files.items():
        (directory / name).write_bytes(data)
        (directory / name).chmod(0o644)
    return directory


def _run_argv(
    cluster: E2ECluster, local: LocalCluster, image: str, name: str, replica: int, tmp_path: Path
) -> tuple[list[str], int]:
    """The engine's `run` for one replica of the Deployment, and its health port."""
    spec = _deployment()["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    ports = _bind_ports(local, replica)
    args = []
    for arg in container["args"]:
        m = re.fullmatch(r"--(\w+)-bind=0\.0\.0\.0:\d+", arg)
        args.append(f"--{m[1]}-bind=127.0.0.1:{ports[m[1]]}" if m else arg)
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(local.ports.apiserver)}
    fields = {"metadata.name": name, "metadata.namespace": NAMESPACE}
    for var in container["env"]:
        env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
    pki = local.pki_dir
    # Secret -> (volume name, files): the local cluster's stand-ins for what cert-manager issues.
    secrets = {
        "gangplugin-serving-tls": (
            "tls",
            {"tls.crt": (pki / "webhook.crt").read_bytes(), "tls.key": (pki / "webhook.key").read_bytes()},
        ),
        "gangplugin-extender-client-ca": (
            "extender-client-ca",
            {"ca.crt": (local.extender_clients_dir / "ca.crt").read_bytes()},
        ),
    }
    sources = {vol: _files(tmp_path / f"{name}-{vol}", files) for vol, files in secrets.values()}
    mounts = []
    for vol_mount in container["volumeMounts"]:
        volume = next(v for v in spec["volumes"] if v["name"] == vol_mount["name"])
        if "emptyDir" in volume:
            size = volume["emptyDir"]["sizeLimit"].removesuffix("i").lower()
            mounts.append(f"--tmpfs={vol_mount['mountPath']}:rw,size={size}")
        else:
            assert volume["secret"]["secretName"] in secrets, volume
            mode = "ro" if vol_mount.get("readOnly") else "rw"
            mounts.append(f"--volume={sources[vol_mount['name']]}:{vol_mount['mountPath']}:{mode}")
    token = service_account_token(cluster.client, NAMESPACE, spec["serviceAccountName"])
    account = _files(
        tmp_path / f"{name}-serviceaccount",
        {"token": token.encode(), "ca.crt": (pki / "ca.crt").read_bytes(), "namespace": NAMESPACE.encode()},
    )
    mounts.append(f"--volume={account}:{SA_DIR}:ro")
    argv = [
        "run",
        "--detach",
        f"--name={name}",
        "--network=host",
        *_security_flags(spec, container),
        *mounts,
        *(f"--env={k}={v}" for k, v in env.items()),
        image,
        *args,
    ]
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
            logs = engine("logs", r.name)
            r.log.write_text(logs.stdout + logs.stderr)
            engine("rm", "--force", r.name)
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
