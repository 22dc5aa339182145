"""Start and stop the local cluster as plain processes.

Each component runs detached in its own process group with its log in
`<state>/logs/`; `<state>/state.json` records what runs so `down` (from any shell)
stops exactly that and a second `up` finds the running cluster instead of
starting another. Any failure during `up` stops whatever had been started.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from gangplugin.core.names import GRPC_EXTENSION
from gangplugin.kube.client import NODES, ApiError, Client, Resource
from gangplugin.kube.shape import nodes_from_shape
from gangplugin.localcluster.pki import CertificateAuthority, service_account_keys

REPO = Path(__file__).resolve().parents[2]
FIELD_MANAGER = "gangplugin-localcluster"
KUEUE_NAMESPACE = "kueue-system"
# Where `gangplugin serve` keeps its leader Lease (as in deploy/manifests).
GANGPLUGIN_NAMESPACE = "gangplugin-system"
# Kueue integrations the local cluster enables; their webhooks are installed, no others.
KUEUE_FRAMEWORKS = ("batch/job", "pod", "jobset.x-k8s.io/jobset")
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# deploy/admission/kueue-config.yaml documents the same setting for real clusters.
KUEUE_WAIT_FOR_PODS_READY = {"timeout": "8760h", "blockAdmission": False, "recoveryTimeout": "0s"}
_KUEUE_WEBHOOK_PATHS = ("kueue-x-k8s-io", "-batch-v1-job", "--v1-pod", "jobset-x-k8s-io")
JOBSET_NAMESPACE = "jobset-system"
# Opt-in (GANGPLUGIN_GENERIC_WORKLOAD=1): Kubernetes' GenericWorkload feature gate (beta, off by
# default in 1.37) on kube-apiserver, kube-controller-manager and kube-scheduler, and the
# scheduling.k8s.io/v1beta1 API it serves PodGroups in (a beta API is off unless asked for).
# kube-scheduler's default plugins then include GangScheduling: bindMode PodGroup needs it.
GENERIC_WORKLOAD_ENV = "GANGPLUGIN_GENERIC_WORKLOAD"
GENERIC_WORKLOAD_GATE = "--feature-gates=GenericWorkload=true"
GENERIC_WORKLOAD_API = "--runtime-config=scheduling.k8s.io/v1beta1=true"
# Concurrent node creates: enough to keep kube-apiserver busy on 2 cores, few enough not to queue.
NODE_WRITERS = 16


class ClusterError(RuntimeError):
    """`up` or `down` could not do its work; the message says what failed and what to do."""


def _versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (REPO / "hack" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def cache_dir() -> Path:
    return Path(os.environ.get("GANGPLUGIN_CACHE", Path.home() / ".cache" / "gangplugin"))


@dataclass(frozen=True, slots=True)
class Ports:
    """Every port the cluster listens on, as offsets from one base (GANGPLUGIN_PORT_BASE)."""

    base: int = 21000

    @property
    def etcd(self) -> int:
        return self.base + 379

    @property
    def etcd_peer(self) -> int:
        return self.base + 380

    @property
    def apiserver(self) -> int:
        return self.base + 443

    @property
    def controller_manager(self) -> int:
        return self.base + 257

    @property
    def scheduler(self) -> int:
        return self.base + 259

    @property
    def kwok(self) -> int:
        return self.base + 247

    @property
    def kueue_webhook(self) -> int:
        return self.base + 943

    @property
    def kueue_metrics(self) -> int:
        return self.base + 880

    @property
    def kueue_health(self) -> int:
        return self.base + 881

    @property
    def jobset_webhook(self) -> int:
        return self.base + 945

    @property
    def jobset_metrics(self) -> int:
        return self.base + 882

    @property
    def jobset_health(self) -> int:
        return self.base + 883

    @property
    def gangplugin_health(self) -> int:
        return self.base + 610

    @property
    def gangplugin_extender(self) -> int:
        return self.base + 611

    @property
    def gangplugin_webhook(self) -> int:
        return self.base + 612

    @property
    def gangplugin_grpc(self) -> int:
        return self.base + 613

    @property
    def gangplugin_grpc_mtls(self) -> int:
        """Replica 1's gRPC port for client-certificate callers (kubectl's admin user)."""
        return self.base + 609

    def gangplugin_replica(self, n: int) -> tuple[int, int, int]:
        """Health, gRPC and webhook ports of `gangplugin serve` replica n (1 has the ones above).
        Replicas share the extender's port: only the leader binds it, as a Service would pick
        the leader. The API server calls replica 1's webhook."""
        if n == 1:
            return self.gangplugin_health, self.gangplugin_grpc, self.gangplugin_webhook
        first = self.base + 614 + 3 * (n - 2)
        return first, first + 1, first + 2

    def named(self) -> dict[str, int]:
        return {
            "etcd": self.etcd,
            "etcd peer": self.etcd_peer,
            "kube-apiserver": self.apiserver,
            "kube-controller-manager": self.controller_manager,
            "kube-scheduler": self.scheduler,
            "kwok": self.kwok,
            "kueue webhook": self.kueue_webhook,
            "kueue metrics": self.kueue_metrics,
            "kueue health": self.kueue_health,
            "jobset webhook": self.jobset_webhook,
            "jobset metrics": self.jobset_metrics,
            "jobset health": self.jobset_health,
            "gangplugin health": self.gangplugin_health,
            "gangplugin extender": self.gangplugin_extender,
            "gangplugin webhook": self.gangplugin_webhook,
            "gangplugin grpc": self.gangplugin_grpc,
            "gangplugin grpc mtls": self.gangplugin_grpc_mtls,
        }


@dataclass(slots=True)
class Component:
    """A program to start, and how to tell it is healthy."""

    name: str
    argv: list[str]
    health: Callable[[], bool]
    env: dict[str, str] = field(default_factory=dict)
    startup_timeout: float = 60.0


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_port_free(port: int, timeout: float = 30.0) -> None:
    """Until 127.0.0.1:`port` can be bound (a killed process's sockets are closed), or `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
                return
            except OSError:
                time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes, once all its threads are gone: a killed multi-threaded
    # process shows its leader as a zombie while other threads still hold its files (its
    # listening sockets among them), and a replacement started then cannot bind its port.
    try:
        if Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
            return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class LocalCluster:
    """The local cluster rooted at `state_dir` (default `<repo>/.local/cluster`)."""

    def __init__(
        self,
        state_dir: Path | None = None,
        ports: Ports | None = None,
        log: Callable[[str], None] = print,
        *,
        generic_workload: bool | None = None,
    ) -> None:
        self.state_dir = (
            state_dir or Path(os.environ.get("GANGPLUGIN_STATE", REPO / ".local" / "cluster"))
        ).resolve()
        self.ports = ports or Ports(int(os.environ.get("GANGPLUGIN_PORT_BASE", "21000")))
        self.pki_dir = self.state_dir / "pki"
        # The CA of the extender's only client, kube-scheduler: it signs nothing else, so the
        # extender (--extender-client-ca) answers no other certificate of the cluster.
        self.extender_clients_dir = self.pki_dir / "extender-clients"
        self.log_dir = self.state_dir / "logs"
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.state_file = self.state_dir / "state.json"
        self.bin_dir = cache_dir() / "bin"
        self._log = log
        self._started: dict[str, int] = {}
        # Not given: GANGPLUGIN_GENERIC_WORKLOAD, else what the running cluster was started with
        # (a `restart` from another shell keeps the gate on the components it starts again).
        if generic_workload is None:
            env = os.environ.get(GENERIC_WORKLOAD_ENV)
            recorded = bool(self._read_state().get("genericWorkload", False))
            generic_workload = env == "1" if env is not None else recorded
        self.generic_workload = generic_workload

    # ---- state ---------------------------------------------------------------------------

    def _read_state(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads(self.state_file.read_text())
            return state
        except (OSError, ValueError):
            return {}

    def _write_state(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "processes": self._started,
                    "ports": self.ports.base,
                    "genericWorkload": self.generic_workload,
                },
                indent=2,
            )
        )
        tmp.replace(self.state_file)

    def running_processes(self) -> dict[str, int]:
        """Recorded processes that still run and are still ours (pids get reused)."""
        procs = self._read_state().get("processes", {})
        return {n: p for n, p in procs.items() if _alive(p) and str(self.state_dir) in _cmdline(p)}

    def is_running(self) -> bool:
        procs = self.running_processes()
        return bool(procs) and set(procs) == set(self._read_state().get("processes", {}))

    # ---- up ------------------------------------------------------------------------------

    def up(self, *, build: bool = True) -> bool:
        """Start the cluster; False when it was already running (nothing started)."""
        if self.is_running():
            self._log(f"cluster already running (state in {self.state_dir}); `make down` stops it")
            return False
        if self.running_processes():
            self._log("a previous cluster is half-running; stopping what is left of it")
            self.down()
        if build:
            self.build()
        self._check_binaries()
        self._check_ports()
        try:
            self._start_all()
        except BaseException:
            self._log("start failed; stopping everything that was started")
            self.down(quiet=True)
            raise
        return True

    def build(self) -> None:
        if shutil.which("go") is None and not self._binaries_present():
            raise ClusterError(
                "no Go toolchain on PATH and no cached binaries in "
                f"{self.bin_dir}; install Go >= 1.26 and run `make up` again"
            )
        script = REPO / "hack" / "build-upstream.sh"
        self._log("building or reusing the pinned upstream binaries (hack/build-upstream.sh)")
        proc = subprocess.run([str(script)], stdout=subprocess.PIPE, stderr=None, text=True, check=False)
        if proc.returncode != 0:
            raise ClusterError(
                "building the upstream binaries failed (see the messages above); "
                "fix the cause and run `make up` again"
            )

    def _binaries(self) -> dict[str, Path]:
        names = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue", "kwok")
        return {n: self.bin_dir / n for n in names}

    def _binaries_present(self) -> bool:
        return all(p.exists() for p in self._binaries().values())

    def _check_binaries(self) -> None:
        missing = [str(p) for p in self._binaries().values() if not os.access(p, os.X_OK)]
        if missing:
            raise ClusterError(f"missing binaries: {', '.join(missing)}; run hack/build-upstream.sh")

    def _check_ports(self) -> None:
        busy = [f"{name} ({port})" for name, port in self.ports.named().items() if not _port_free(port)]
        if busy:
            raise ClusterError(
                f"port in use: {', '.join(busy)}; stop what holds it, or choose other ports with "
                f"GANGPLUGIN_PORT_BASE=<n> (now {self.ports.base})"
            )

    def _start_all(self) -> None:
        for sub in (self.log_dir, self.state_dir / "etcd"):
            sub.mkdir(parents=True, exist_ok=True)
        self._write_pki_and_kubeconfig()
        t0 = time.monotonic()
        self._start(self._etcd())
        self._start(self._apiserver())
        client = Client.from_kubeconfig(self.kubeconfig)
        try:
            self._start(self._controller_manager())
            self._start(self._scheduler())
            self._start(self._kwok())
            self._install_kueue(client)
            # before Kueue starts: its jobset integration needs the JobSet CRD
            self._install_jobset(client)
            self._install_gangplugin_crds(client)
            self._start(self._jobset())
            self._start(self._kueue())
            self._wait_kueue_webhooks(client)
            self._create_nodes(client)
            # A cluster that died with gangplugin's webhooks registered keeps them in etcd; with
            # gangplugin not serving yet they would refuse the GangPolicy applied next.
            self._unregister_gangplugin_webhooks(client)
            self.apply_file(client, REPO / "deploy" / "local" / "queues.yaml")
            client.apply(
                _NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GANGPLUGIN_NAMESPACE}},
                field_manager=FIELD_MANAGER,
            )
            gangplugin = self._gangplugin()
            if gangplugin:
                self._start(gangplugin)
                self._register_gangplugin_webhook(client)
        finally:
            client.close()
        self._log(f"cluster up in {time.monotonic() - t0:.1f}s; export KUBECONFIG={self.kubeconfig}")

    def _start(self, comp: Component) -> None:
        logf = self.log_dir / f"{comp.name}.log"
        with logf.open("ab") as out:
            proc = subprocess.Popen(
                comp.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # survives this shell; stopped by `down`
                env={**os.environ, **comp.env},
                cwd=self.state_dir,
            )
        self._started[comp.name] = proc.pid
        self._write_state()
        deadline = time.monotonic() + comp.startup_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ClusterError(
                    f"{comp.name} exited with status {proc.returncode} while starting; "
                    f"last lines of {logf}:\n{_tail(logf)}"
                )
            with contextlib.suppress(httpx.HTTPError, OSError, ssl.SSLError):
                if comp.health():
                    self._log(f"  {comp.name} healthy (pid {proc.pid})")
                    return
            time.sleep(0.3)
        raise ClusterError(
            f"{comp.name} did not become healthy within {comp.startup_timeout:.0f}s; "
            f"last lines of {logf}:\n{_tail(logf)}"
        )

    # ---- components ----------------------------------------------------------------------

    def _write_pki_and_kubeconfig(self) -> None:
        ca = CertificateAuthority(self.pki_dir)
        grpc, grpc_mtls = self.ports.gangplugin_grpc, self.ports.gangplugin_grpc_mtls
        ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            hosts=(
                "127.0.0.1",
                "localhost",
                "10.96.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
        )
        ca.issue("admin", common_name="kubernetes-admin", organization="system:masters", client=True)
        ca.issue("webhook", common_name="gangplugin-local-webhooks", hosts=("127.0.0.1", "localhost"))
        clients = CertificateAuthority(
            self.extender_clients_dir, common_name="gangplugin-local-extender-clients"
        )
        clients.issue("kube-scheduler", common_name="kube-scheduler", client=True)
        service_account_keys(self.pki_dir)
        # Kueue expects tls.crt/tls.key in its certDir, and (with its own certificate
        # management off) its metrics certificate at a fixed path.
        kueue_certs = self.state_dir / "kueue-certs"
        for directory in (kueue_certs, KUEUE_METRICS_CERT_DIR):
            try:
                directory.mkdir(parents=True, exist_ok=True)
                shutil.copy(self.pki_dir / "webhook.crt", directory / "tls.crt")
                shutil.copy(self.pki_dir / "webhook.key", directory / "tls.key")
            except OSError as err:
                raise ClusterError(
                    f"cannot write Kueue's certificates to {directory} ({err.strerror}); Kueue reads its "
                    "metrics certificate from that fixed path: make it writable for this user or run as root"
                ) from err
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gangplugin-local",
                    "cluster": {
                        "server": f"https://127.0.0.1:{self.ports.apiserver}",
                        "certificate-authority": str(ca.cert_path),
                        # Where gangctl finds gangplugin's gRPC API (README: Credentials).
                        "extensions": [
                            {
                                "name": GRPC_EXTENSION,
                                "extension": {
                                    "server": f"127.0.0.1:{grpc}",
                                    "client-certificate-server": f"127.0.0.1:{grpc_mtls}",
                                    "certificate-authority": str(ca.cert_path),
                                },
                            }
                        ],
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(self.pki_dir / "admin.crt"),
                        "client-key": str(self.pki_dir / "admin.key"),
                    },
                }
            ],
            "contexts": [
                {"name": "gangplugin-local", "context": {"cluster": "gangplugin-local", "user": "admin"}}
            ],
            "current-context": "gangplugin-local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _https_ok(self, port: int, path: str, *, client_cert: bool = True) -> bool:
        cert = (str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key")) if client_cert else None
        ctx = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        if cert:
            ctx.load_cert_chain(*cert)
        if port not in (self.ports.apiserver, self.ports.kueue_webhook):
            # kube-controller-manager and kube-scheduler serve self-signed certificates.
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        r = httpx.get(f"https://127.0.0.1:{port}{path}", verify=ctx, timeout=2.0)
        return r.status_code == 200

    def _generic_workload_flags(self, *flags: str) -> tuple[str, ...]:
        return flags if self.generic_workload else ()

    def _etcd(self) -> Component:
        p = self.ports
        return Component(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=local",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{p.etcd}",
                f"--advertise-client-urls=http://127.0.0.1:{p.etcd}",
                f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                f"--initial-cluster=local=http://127.0.0.1:{p.etcd_peer}",
                "--unsafe-no-fsync=true",  # a throwaway test cluster: durability is not worth the latency
                "--quota-backend-bytes=4294967296",
            ],
            health=lambda: httpx.get(f"http://127.0.0.1:{p.etcd}/health", timeout=2.0).status_code == 200,
        )

    def _apiserver(self) -> Component:
        pki, p = self.pki_dir, self.ports
        return Component(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{p.etcd}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p.apiserver}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                f"--cert-dir={self.state_dir / 'apiserver-certs'}",
                *self._generic_workload_flags(GENERIC_WORKLOAD_GATE, GENERIC_WORKLOAD_API),
            ],
            health=lambda: self._https_ok(p.apiserver, "/readyz"),
            startup_timeout=120.0,
        )

    def _controller_manager(self) -> Component:
        pki, p = self.pki_dir, self.ports
        return Component(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p.controller_manager}",
                f"--cert-dir={self.state_dir / 'kcm-certs'}",
                "--leader-elect=false",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                "--use-service-account-credentials=false",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--profiling=false",
                # kwok renews every lease at a quarter of its duration: as kubelet, 50 s of grace
                # for 40 s leases, and leases that last longer on a large shape (`_node_lease`).
                f"--node-monitor-grace-period={self._node_lease() * 5 // 4}s",
                *self._generic_workload_flags(GENERIC_WORKLOAD_GATE),
            ],
            health=lambda: self._https_ok(p.controller_manager, "/healthz", client_cert=False),
        )

    def extender_tls_config(self) -> dict[str, str]:
        """kube-scheduler's extender tlsConfig: the CA of the extender's serving certificate,
        and the client certificate the extender asks for (mutual TLS)."""
        client = self.extender_clients_dir
        return {
            "caFile": str(self.pki_dir / "ca.crt"),
            "certFile": str(client / "kube-scheduler.crt"),
            "keyFile": str(client / "kube-scheduler.key"),
        }

    def _scheduler(self, *, extender: bool = True) -> Component:
        """kube-scheduler with deploy/scheduler/local.yaml: the gangplugin extender on
        Ports.gangplugin_extender over mutual TLS (`extender_tls_config`); `extender=False`
        drops it."""
        p = self.ports
        config = self.state_dir / "scheduler-config.yaml"
        cfg = yaml.safe_load((REPO / "deploy" / "scheduler" / "local.yaml").read_text())
        cfg["clientConnection"]["kubeconfig"] = str(self.kubeconfig)
        for ext in cfg["extenders"]:
            ext["urlPrefix"] = f"https://127.0.0.1:{p.gangplugin_extender}"
            ext["tlsConfig"] = self.extender_tls_config()
        if not extender:
            del cfg["extenders"]
        config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return Component(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--config={config}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p.scheduler}",
                f"--cert-dir={self.state_dir / 'scheduler-certs'}",
                "--profiling=false",
                *self._generic_workload_flags(GENERIC_WORKLOAD_GATE),
            ],
            health=lambda: self._https_ok(p.scheduler, "/healthz", client_cert=False),
        )

    def _kwok(self) -> Component:
        p = self.ports
        return Component(
            "kwok",
            [
                str(self.bin_dir / "kwok"),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={REPO / 'deploy' / 'kwok' / 'stages.yaml'}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.0.0.1/16",
                "--node-ip=10.0.0.1",
                f"--node-lease-duration-seconds={self._node_lease()}",
                f"--server-address=127.0.0.1:{p.kwok}",
            ],
            health=lambda: httpx.get(f"http://127.0.0.1:{p.kwok}/healthz", timeout=2.0).status_code == 200,
        )

    def _kueue(self) -> Component:
        p = self.ports
        config = self.state_dir / "kueue-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                    "kind": "Configuration",
                    "namespace": KUEUE_NAMESPACE,
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{p.kueue_health}"},
                    "metrics": {"bindAddress": f"127.0.0.1:{p.kueue_metrics}"},
                    "webhook": {
                        "port": p.kueue_webhook,
                        "host": "127.0.0.1",
                        "certDir": str(self.state_dir / "kueue-certs"),
                    },
                    "leaderElection": {"leaderElect": False},
                    "internalCertManagement": {"enable": False},
                    "manageJobsWithoutQueueName": False,
                    "managedJobsNamespaceSelector": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "NotIn",
                                "values": ["kube-system", KUEUE_NAMESPACE],
                            }
                        ]
                    },
                    "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
                    "clientConnection": {"qps": 100, "burst": 200},
                    # On only so Kueue keeps each Workload's PodsReady condition, which the gang
                    # check's watchdog reads; its timeouts never fire (ours are per GangPolicy).
                    "waitForPodsReady": KUEUE_WAIT_FOR_PODS_READY,
                    # Kueue's workload controller runs one reconcile at a time by default; with
                    # admission checks each gang needs two of them (list the checks, admit).
                    "controller": {"groupKindConcurrency": {"Workload.kueue.x-k8s.io": 5}},
                },
                sort_keys=False,
            )
        )
        return Component(
            "kueue",
            [
                str(self.bin_dir / "kueue"),
                f"--config={config}",
                # The visibility API needs an APIService routed into the cluster; not here.
                "--feature-gates=VisibilityOnDemand=false",
            ],
            env={"KUBECONFIG": str(self.kubeconfig)},
            health=lambda: (
                httpx.get(f"http://127.0.0.1:{p.kueue_health}/readyz", timeout=2.0).status_code == 200
            ),
        )

    def _gangplugin(
        self, replica: int = 1, extra: tuple[str, ...] = (), *, lead: bool = True
    ) -> Component | None:
        """`gangplugin serve` (the console script, as a user runs it) with every registered
        component (or GANGPLUGIN_COMPONENTS). Replica 1 is the one `up` starts and waits to lead
        (`lead=False`: ready as a follower too, when another replica holds the Lease);
        `restart("gangplugin-2")` starts a second one, a follower until the first is gone."""
        p = self.ports
        components = ",".join(self._gangplugin_components())
        if not components:
            return None
        health, grpc, webhook = p.gangplugin_replica(replica)
        ca = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))

        def ready() -> bool:
            r = httpx.get(f"https://127.0.0.1:{health}/readyz", verify=ca, timeout=2.0)
            # Replica 1 must lead (the tests expect working controllers); others may stand by.
            return r.status_code == 200 and (replica > 1 or not lead or "standby" not in r.text)

        return Component(
            "gangplugin" if replica == 1 else f"gangplugin-{replica}",
            [
                str(Path(sys.executable).parent / "gangplugin"),
                "serve",
                f"--kubeconfig={self.kubeconfig}",
                f"--components={components}",
                f"--health-bind=127.0.0.1:{health}",
                f"--health-tls-cert={self.pki_dir / 'webhook.crt'}",
                f"--health-tls-key={self.pki_dir / 'webhook.key'}",
                "--log-format=text",
                f"--leader-election-namespace={GANGPLUGIN_NAMESPACE}",
                # Stable per replica: a restarted replica renews its own lease at once.
                f"--leader-election-identity=local-gangplugin-{replica}",
                f"--grpc-bind=127.0.0.1:{grpc}",
                f"--grpc-tls-cert={self.pki_dir / 'webhook.crt'}",
                f"--grpc-tls-key={self.pki_dir / 'webhook.key'}",
                *(
                    [
                        f"--grpc-mtls-bind=127.0.0.1:{p.gangplugin_grpc_mtls}",
                        f"--grpc-client-ca={self.pki_dir / 'ca.crt'}",
                    ]
                    if replica == 1
                    else []
                ),
                f"--extender-bind=127.0.0.1:{p.gangplugin_extender}",
                f"--extender-tls-cert={self.pki_dir / 'webhook.crt'}",
                f"--extender-tls-key={self.pki_dir / 'webhook.key'}",
                f"--extender-client-ca={self.extender_clients_dir / 'ca.crt'}",
                f"--webhook-bind=127.0.0.1:{webhook}",
                f"--webhook-tls-cert={self.pki_dir / 'webhook.crt'}",
                f"--webhook-tls-key={self.pki_dir / 'webhook.key'}",
                *extra,
            ],
            health=ready,
        )

    def stop_process(self, name: str, kill: signal.Signals = signal.SIGKILL) -> None:
        """Signal one running process, wait (up to 15 s) until it is gone, and forget it."""
        self._started.update(self._read_state().get("processes", {}))
        pid = self._started.pop(name, None)
        if pid is not None and _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, kill)
            deadline = time.monotonic() + 15
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):  # ignored the signal, or left its group: the process itself, for good
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 15
                while _alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
        self._write_state()

    def restart(
        self,
        name: str,
        *,
        kill: signal.Signals = signal.SIGKILL,
        extender: bool = True,
        args: tuple[str, ...] = (),
        lead: bool = True,
    ) -> None:
        """Kill one running process ("gangplugin", "gangplugin-<n>", "kube-scheduler",
        "kube-apiserver" or "kueue") and start it again (or start it, if it was not running);
        `extender` chooses kube-scheduler's configuration, `args` are more `gangplugin serve`
        flags, `lead=False` lets replica 1 come back as a follower (tests and benchmarks use
        these)."""
        components: dict[str, Callable[[], Component | None]] = {
            "gangplugin": lambda: self._gangplugin(1, args, lead=lead),
            "kube-scheduler": lambda: self._scheduler(extender=extender),
            "kube-apiserver": self._apiserver,
            "kueue": self._kueue,
        }
        if name.startswith("gangplugin-"):
            components[name] = lambda: self._gangplugin(int(name.removeprefix("gangplugin-")))
        self.stop_process(name, kill)
        comp = components[name]()
        if comp is None:
            raise ClusterError(f"{name} has nothing to run")
        if name == "kube-apiserver":  # its port must be free again before it can listen there
            _wait_port_free(self.ports.apiserver)
        self._start(comp)

    # ---- Kueue objects -------------------------------------------------------------------

    def _kueue_dir(self) -> Path:
        return cache_dir() / f"kueue-{_versions()['KUEUE_VERSION']}"

    def _webhook_client_config(self, path: str, port: int) -> dict[str, Any]:
        """A webhook's clientConfig on 127.0.0.1, trusting the cluster CA."""
        ca = base64.b64encode((self.pki_dir / "ca.crt").read_bytes()).decode()
        return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}

    def _apply_upstream_webhooks(
        self,
        client: Client,
        manifests: Path,
        prefix: str,
        port: int,
        keep: Callable[[str], bool],
        pod_selector: dict[str, Any],
    ) -> None:
        """An upstream controller's webhook configurations, named `<prefix>-...`, each webhook
        whose path `keep` accepts served on 127.0.0.1:`port`; its pod webhooks get `pod_selector`
        (the scope the upstream install gives them), so they see no other pods."""
        for cfg in yaml.safe_load_all(manifests.read_text()):
            if not cfg:
                continue
            cfg["metadata"]["name"] = f"{prefix}-{cfg['metadata']['name']}"
            hooks = []
            for hook in cfg["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                if not keep(path):
                    continue
                hook["clientConfig"] = self._webhook_client_config(path, port)
                if path.endswith("--v1-pod"):
                    hook.update(pod_selector)
                hooks.append(hook)
            cfg["webhooks"] = hooks
            res = _MUTATING if cfg["kind"] == "MutatingWebhookConfiguration" else _VALIDATING
            client.apply(res, cfg, field_manager=FIELD_MANAGER)

    def _jobset_dir(self) -> Path:
        return cache_dir() / f"jobset-{_versions()['JOBSET_VERSION']}"

    def _install_jobset(self, client: Client) -> None:
        """JobSet's CRD and webhooks (pointed at 127.0.0.1; its pod webhooks only for JobSet pods,
        as its kustomize patches set them)."""
        jdir = self._jobset_dir()
        crds = sorted(jdir.glob("jobset.x-k8s.io_*.yaml"))
        if not crds:
            raise ClusterError(f"JobSet CRDs not found in {jdir}; run hack/build-upstream.sh")
        for path in crds:
            client.apply(_CRDS, yaml.safe_load(path.read_text()), field_manager=FIELD_MANAGER)
        jobset_pods = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
        self._apply_upstream_webhooks(
            client,
            jdir / "webhooks.yaml",
            "jobset",
            self.ports.jobset_webhook,
            keep=lambda _path: True,
            pod_selector={"objectSelector": jobset_pods},
        )
        names = [yaml.safe_load(path.read_text())["metadata"]["name"] for path in crds]
        _wait(lambda: all(_established(client, n) for n in names), 30, "JobSet's CRD to be established")

    def _jobset(self) -> Component:
        p = self.ports
        config = self.state_dir / "jobset-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "internalCertManagement": {"enable": False},
                    "webhook": {
                        "port": p.jobset_webhook,
                        "host": "127.0.0.1",
                        "certDir": str(self.state_dir / "kueue-certs"),
                    },
                    "metrics": {
                        "bindAddress": f"127.0.0.1:{p.jobset_metrics}",
                        "certDir": str(self.state_dir / "kueue-certs"),
                    },
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{p.jobset_health}"},
                },
                sort_keys=False,
            )
        )
        return Component(
            "jobset",
            [str(self.bin_dir / "jobset"), f"--config={config}", f"--kubeconfig={self.kubeconfig}"],
            env={"KUBECONFIG": str(self.kubeconfig)},
            health=lambda: (
                httpx.get(f"http://127.0.0.1:{p.jobset_health}/readyz", timeout=2.0).status_code == 200
            ),
        )

    def _install_kueue(self, client: Client) -> None:
        """Kueue's CRDs (conversion through its webhook) and webhook configurations, pointed at 127.0.0.1."""
        kdir = self._kueue_dir()
        crds = sorted(kdir.glob("kueue.x-k8s.io_*.yaml"))
        if not crds:
            raise ClusterError(f"Kueue CRDs not found in {kdir}; run hack/build-upstream.sh")
        for path in crds:
            crd = yaml.safe_load(path.read_text())
            if len(crd["spec"]["versions"]) > 1:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": self._webhook_client_config("/convert", self.ports.kueue_webhook),
                        "conversionReviewVersions": ["v1"],
                    },
                }
            client.apply(_CRDS, crd, field_manager=FIELD_MANAGER)
        client.apply(
            _NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
            field_manager=FIELD_MANAGER,
        )
        outside_system = {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system", KUEUE_NAMESPACE],
                }
            ]
        }
        self._apply_upstream_webhooks(
            client,
            kdir / "webhooks.yaml",
            "kueue",
            self.ports.kueue_webhook,
            keep=lambda path: any(k in path for k in _KUEUE_WEBHOOK_PATHS),
            pod_selector={"namespaceSelector": outside_system},
        )
        names = [yaml.safe_load(path.read_text())["metadata"]["name"] for path in crds]
        _wait(lambda: all(_established(client, n) for n in names), 30, "Kueue's CRDs to be established")

    def _install_gangplugin_crds(self, client: Client) -> None:
        """gangplugin's own CRDs (deploy/crds/), established before its controllers start."""
        names = []
        for path in sorted((REPO / "deploy" / "crds").glob("*.yaml")):
            for crd in yaml.safe_load_all(path.read_text()):
                if crd:
                    client.apply(_CRDS, crd, field_manager=FIELD_MANAGER)
                    names.append(crd["metadata"]["name"])
        _wait(lambda: all(_established(client, n) for n in names), 30, "gangplugin's CRDs to be established")

    @staticmethod
    def _gangplugin_components() -> list[str]:
        from gangplugin.server.main import COMPONENTS

        chosen = os.environ.get("GANGPLUGIN_COMPONENTS", ",".join(COMPONENTS))
        return [c for c in chosen.split(",") if c]

    def _unregister_gangplugin_webhooks(self, client: Client) -> None:
        for res in (_VALIDATING, _MUTATING):
            with contextlib.suppress(ApiError):  # 404: none registered
                client.delete(res, "gangplugin-local")

    def _register_gangplugin_webhook(self, client: Client) -> None:
        """deploy/manifests/base's webhook configurations (validating and mutating), pointed at
        replica 1 with the cluster CA; registered once gangplugin serves them (the launcher
        applied the local GangPolicy before), and only when the webhook component runs."""
        if "webhook" not in self._gangplugin_components():
            return
        docs = yaml.safe_load_all((REPO / "deploy" / "manifests" / "base" / "webhook.yaml").read_text())
        kinds = {"ValidatingWebhookConfiguration": _VALIDATING, "MutatingWebhookConfiguration": _MUTATING}
        for config in (d for d in docs if d and d["kind"] in kinds):
            config["metadata"].pop("annotations", None)  # cert-manager's CA injection: not here
            # Its own name: the e2e manifests test dry-runs the base's objects beside it.
            config["metadata"]["name"] = "gangplugin-local"
            for hook in config["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = self._webhook_client_config(path, self.ports.gangplugin_webhook)
            client.apply(kinds[config["kind"]], config, field_manager=FIELD_MANAGER)

    def _wait_kueue_webhooks(self, client: Client) -> None:
        # A dry-run create goes through the mutating and validating webhooks end to end.
        probe = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gangplugin-webhook-probe"},
        }
        flavors = Resource("kueue.x-k8s.io/v1beta2", "resourceflavors", namespaced=False)

        def ok() -> bool:
            try:
                client.request("POST", flavors.path(), body=probe, params={"dryRun": "All"})
                return True
            except ApiError:
                return False

        _wait(ok, 60, "Kueue's webhooks to answer")

    def _shape(self) -> tuple[Path, list[dict[str, Any]]]:
        """The shape file the nodes are made from (GANGPLUGIN_SHAPE, else the sample) and its nodes."""
        path = Path(os.environ.get("GANGPLUGIN_SHAPE", REPO / "deploy" / "local" / "cluster-shape.yaml"))
        return path, nodes_from_shape(yaml.safe_load(path.read_text()))

    def _node_lease(self) -> int:
        """Seconds a fake node's lease lasts: kubelet's 40 s up to 500 nodes, longer beyond. kwok
        renews each one at a quarter of it; 5,000 nodes at 40 s are 500 lease writes a second,
        more than two cores keep up with under load: half the nodes went unreachable (tainted)
        in a bench, and the gang pods pinned to them with them."""
        return max(40, 40 * len(self._shape()[1]) // 500)

    def _create_nodes(self, client: Client) -> None:
        shape_path, nodes = self._shape()
        t0 = time.monotonic()

        # One create per node, with its status (a Node's create keeps it), many at a time: a
        # 5,000-node shape took minutes as an apply and a status patch each, one after the other.
        def create(node: dict[str, Any]) -> None:
            try:
                client.create(NODES, node)
            except ApiError as err:
                if err.status != 409:  # 409: kept in etcd from a cluster that died without `down`
                    raise

        with ThreadPoolExecutor(NODE_WRITERS) as pool:
            list(pool.map(create, nodes))
        self._log(f"  {len(nodes)} fake nodes created from {shape_path} in {time.monotonic() - t0:.1f}s")

    def apply_file(self, client: Client, path: Path) -> list[dict[str, Any]]:
        """Server-side apply every document of a YAML file (kinds this cluster knows)."""
        applied = []
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                applied.append(client.apply(resource_for(doc), doc, field_manager=FIELD_MANAGER))
        return applied

    # ---- down ----------------------------------------------------------------------------

    def down(self, *, quiet: bool = False) -> None:
        """Stop every recorded process (TERM, then KILL) and forget the state."""
        # The state file wins: `restart` from another LocalCluster instance records new pids there.
        procs = {**self._started, **self._read_state().get("processes", {})}
        ours = {n: p for n, p in procs.items() if _alive(p) and str(self.state_dir) in _cmdline(p)}
        # Reverse start order: clients before the API server, the API server before etcd.
        for name, pid in reversed(list(ours.items())):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            if not quiet:
                self._log(f"  stopping {name} (pid {pid})")
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in ours.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in ours.values():
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        self._started.clear()
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()
        # etcd's data goes with the cluster: the next `up` starts clean.
        shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)


_CRDS = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False)
_NAMESPACES = Resource("v1", "namespaces", namespaced=False)
_MUTATING = Resource("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", namespaced=False)
_VALIDATING = Resource("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", namespaced=False)

_KINDS: dict[tuple[str, str], Resource] = {
    ("v1", "Namespace"): _NAMESPACES,
    ("v1", "Node"): NODES,
    ("v1", "Pod"): Resource("v1", "pods"),
    ("batch/v1", "Job"): Resource("batch/v1", "jobs"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): _CRDS,
    ("gangplugin.io/v1alpha1", "GangPolicy"): Resource(
        "gangplugin.io/v1alpha1", "gangpolicies", namespaced=False
    ),
}


def resource_for(obj: dict[str, Any]) -> Resource:
    """The API path of an object: core kinds by table, Kueue's by their plural."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    if (api_version, kind) in _KINDS:
        return _KINDS[(api_version, kind)]
    if api_version.startswith("kueue.x-k8s.io/"):
        plural = kind.lower() + ("es" if kind.endswith("s") else "s")  # WorkloadPriorityClass
        return Resource(api_version, plural, namespaced=kind in ("LocalQueue", "Workload"))
    raise ClusterError(f"{kind} ({api_version}) is not a kind the local cluster applies")


def _established(client: Client, name: str) -> bool:
    crd = client.get(_CRDS, name)
    return any(
        c["type"] == "Established" and c["status"] == "True"
        for c in (crd.get("status") or {}).get("conditions") or []  # null until the API server sets them
    )


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, ApiError):
            if check():
                return
        time.sleep(0.3)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
