"""Real nodes: real kubelets, containerd and runc on this machine (GANGPLUGIN_WITH=real-nodes),
gangplugin installed onto them by its Helm chart, and a real distributed job as a gang.

The cluster is its own: the control plane, Kueue, the training-operator and the real-node pool
(6 nodes: 2 UltraServers of 3), no fake nodes and no gangplugin process: gangplugin runs as the
chart installs it, two replicas on the nodes, its webhooks called through their Service, its
extender through its own, by the chart's second scheduler, its metrics read from the pods. The
jobs are PyTorchJobs of the rank program (deploy/real-nodes/images/worker/rank.py): ranks that
meet at rank 0 and all-reduce over TCP, each printing what it did.

It takes the session's ports (GANGPLUGIN_E2E_PORT_BASE): run it in a pytest session of its own,
as `make test` does. Nothing here skips: a pool that cannot start fails the tests with the reason.
"""

from __future__ import annotations

import base64
import os
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gangplugin.kube.client import EVENTS, NODES, PODS, ApiError, Client, Resource
from gangplugin.kube.kueue_records import is_true
from gangplugin.kube.resources import GANG_POLICIES
from gangplugin.localcluster.cluster import ClusterError, LocalCluster
from gangplugin.localcluster.components.real_nodes import pool_of, power_off, power_on
from gangplugin.localcluster.realnodes import cgroups
from gangplugin.localcluster.realnodes.images import WORKER
from gangplugin.localcluster.realnodes.pool import Pool
from tests.support import realnodes as rn
from tests.support.base_install import refused
from tests.support.cluster import E2ECluster, e2e_kueue_version, e2e_local_cluster, e2e_port_base
from tests.support.gangs import check_of, events_of, requeued
from tests.support.kube import unique, wait_for, wait_until, workload_of

CRDS = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False)
SECRETS = Resource("v1", "secrets")
VALIDATING_WEBHOOKS, MUTATING_WEBHOOKS = (
    Resource("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", namespaced=False),
    Resource("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", namespaced=False),
)
WEBHOOKS = (VALIDATING_WEBHOOKS, MUTATING_WEBHOOKS)
# The chart's podGate auto on this cluster's Kubernetes (>= 1.36): gang pods gated by the policy.
POD_GATE = (
    Resource("admissionregistration.k8s.io/v1", "mutatingadmissionpolicies", namespaced=False),
    Resource("admissionregistration.k8s.io/v1", "mutatingadmissionpolicybindings", namespaced=False),
)
GENERATED = ("gangplugin-ca", "gangplugin-serving-tls", "gangplugin-extender-client-ca")
# Bounds on waits for things that must happen, for a loaded 2-core machine: a node is NotReady
# 50 s after its last heartbeat (kube-controller-manager's grace), pods start in seconds.
START = 300.0
NODE_LOST = 300.0


@pytest.fixture(scope="module")
def real() -> Iterator[LocalCluster]:
    if e2e_local_cluster().is_running():
        pytest.fail(
            "the session's cluster runs on the ports the real-node cluster takes: run "
            "tests/e2e/test_real_nodes.py in a pytest session of its own (make test does)",
            pytrace=False,
        )
    local = rn.real_node_cluster(e2e_port_base(), e2e_kueue_version())
    try:
        up = local.up()
    except ClusterError as err:
        pytest.fail(f"the real-node cluster could not be started: {err}", pytrace=False)
    try:
        yield local
    finally:
        if up:
            local.down(quiet=True)


@pytest.fixture(scope="module")
def cluster(real: LocalCluster) -> Iterator[E2ECluster]:
    """Overrides the session's cluster for this module (and so `namespace`, `gang_queue`)."""
    client = Client.from_kubeconfig(real.kubeconfig)
    yield E2ECluster(client, real.kubeconfig, local=True)
    client.close()


@pytest.fixture(scope="module")
def pool(real: LocalCluster) -> Pool:
    return pool_of(real)


@pytest.fixture(scope="module")
def worker(real: LocalCluster) -> str:
    return rn.images(real).named(WORKER)


@pytest.fixture(scope="module")
def installed(
    real: LocalCluster, cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """gangplugin as `helm install` puts it on the nodes: both replicas Ready, one leading."""
    rn.helm_install(real, rn.chart_values(real), tmp_path_factory.mktemp("helm"))
    client = cluster.client
    wait_until(
        lambda: len([p for p in rn.gangplugin_pods(client) if rn.ready(p)]) == 2 and rn.holder(client),
        START,
        lambda: f"both gangplugin pods Ready and one leading: {_pods_state(client)}",
    )
    wait_for(
        lambda: rn.deployment_ready(client, "gangplugin-scheduler"), START, "the gangplugin-scheduler Ready"
    )
    # Routed once kube-proxy has the ready pods: what kube-apiserver and the scheduler dial.
    for service in ("gangplugin-webhook", "gangplugin-extender"):
        wait_for(
            lambda service=service: rn.service_answers(client, service), START, f"Service {service} routed"
        )
    yield
    rn.save_logs(real, client)
    # The last test uninstalls it and checks what is left.
    rn.helm(real, "uninstall", "gangplugin", "--ignore-not-found", "--wait", "--timeout", "3m")


def _pods_state(client: Client) -> list[tuple[str, str | None, bool]]:
    return [
        (p["metadata"]["name"], p["spec"].get("nodeName"), rn.ready(p)) for p in rn.gangplugin_pods(client)
    ]


def _pod(
    name: str, namespace: str, image: str, node: str, command: list[str], **extra: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": command,
                    "resources": {"requests": {"cpu": "10m"}, **extra.pop("resources", {})},
                    **extra,
                }
            ],
        },
    }


def _phase(client: Client, namespace: str, name: str) -> str:
    return str((client.get(PODS, name, namespace).get("status") or {}).get("phase", ""))


def test_real_nodes_run_pods_with_their_gpus_cluster_dns_and_services(
    real: LocalCluster, cluster: E2ECluster, pool: Pool, namespace: str, worker: str
) -> None:
    client = cluster.client
    nodes = {n["metadata"]["name"]: n for n in client.list(NODES)["items"]}
    assert set(nodes) == {n.name for n in pool.nodes}
    for node in pool.nodes:
        obj = nodes[node.name]
        info = obj["status"]["nodeInfo"]
        assert info["kubeletVersion"] == "v1.37.2" and info["containerRuntimeVersion"].startswith(
            "containerd://"
        )
        assert obj["status"]["allocatable"]["nvidia.com/gpu"] == "4", "advertised by the device plugin"
        assert {k: obj["metadata"]["labels"].get(k) for k in node.labels} == node.labels
        assert {a["address"] for a in obj["status"]["addresses"]} >= {node.ip}
    first, second = pool.nodes[0].name, pool.nodes[1].name
    # A web server on one node behind a Service; a client on another reaches it by its DNS name.
    serve = _pod("web", namespace, worker, first, ["python3", "-m", "http.server", "8000"])
    serve["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 8000}, "periodSeconds": 1}
    client.create(PODS, serve)
    client.create(
        rn.SERVICES,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8000}]},
        },
    )
    wait_for(lambda: rn.ready(client.get(PODS, "web", namespace)), START, "the web pod Ready")
    # Until kube-proxy has the Service's endpoint (a moment after the pod is Ready), as a client would.
    script = "\n".join(
        (
            "import os, socket, time, urllib.request",
            "print('gpus', os.environ.get('NVIDIA_VISIBLE_DEVICES'))",
            "print('dns', socket.gethostbyname('web'))",
            "for _ in range(120):",
            "    try:",
            "        print('http', urllib.request.urlopen('http://web/', timeout=5).status)",
            "        break",
            "    except OSError:",
            "        time.sleep(1)",
            "time.sleep(3600)  # holding its GPUs",
        )
    )
    gpus = {"requests": {"cpu": "10m", "nvidia.com/gpu": "3"}, "limits": {"nvidia.com/gpu": "3"}}
    client.create(PODS, _pod("client", namespace, worker, second, ["python3", "-c", script], resources=gpus))
    out = wait_until(
        lambda: "http" in (text := rn.logs(real, namespace, "client")) and text,
        START,
        lambda: f"the client pod's answer: {client.get(PODS, 'client', namespace).get('status')}",
    )
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    svc = client.get(rn.SERVICES, "web", namespace)
    assert lines["dns"] == svc["spec"]["clusterIP"], "CoreDNS answered with the Service's address"
    assert lines["http"] == "200", "kube-proxy routed the Service to the pod on the other node"
    devices = lines["gpus"].split(",")
    assert len(set(devices)) == 3 and all(d.startswith(f"{second}-gpu") for d in devices), devices
    # From the host too: the pod's own address, and the Service's.
    web = client.get(PODS, "web", namespace)
    assert web["status"]["podIP"].startswith(f"10.{pool.network.octet}.")
    for host in (web["status"]["podIP"] + ":8000", svc["spec"]["clusterIP"] + ":80"):
        assert httpx.get(f"http://{host}/", timeout=10).status_code == 200, host
    # The device plugin's 4 GPUs are allocated, not just counted: 3 taken, 2 more do not fit.
    client.create(
        PODS,
        _pod(
            "more",
            namespace,
            worker,
            second,
            ["sleep", "600"],
            resources={"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
        ),
    )

    def short_of_gpus() -> str | None:
        msgs = [
            e["message"]
            for e in client.list(EVENTS, namespace)["items"]
            if e["involvedObject"]["name"] == "more" and e["reason"] == "FailedScheduling"
        ]
        return next((m for m in msgs if "Insufficient nvidia.com/gpu" in m), None)

    wait_for(short_of_gpus, START, "the 2-GPU pod refused for want of GPUs")


def test_the_chart_runs_gangplugin_on_the_real_nodes_through_its_services(
    real: LocalCluster, cluster: E2ECluster, installed: None, namespace: str, gang_queue: Any, worker: str
) -> None:
    client = cluster.client
    pods = rn.gangplugin_pods(client)
    assert len(pods) == 2 and len({p["spec"]["nodeName"] for p in pods}) == 2, "one replica per node"
    leader = rn.holder(client)
    by_name = {p["metadata"]["name"]: p for p in pods}
    assert leader in by_name
    # The extender's Service selects the leader alone; the scheduler reaches it by its DNS name.
    slices = client.list(
        rn.ENDPOINT_SLICES, rn.NAMESPACE, label_selector="kubernetes.io/service-name=gangplugin-extender"
    )["items"]
    addresses = {a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]}
    assert addresses == {by_name[leader]["status"]["podIP"]}
    # The webhook is called through its Service: a bad GangPolicy is refused by it. Gang pods are
    # gated by the API server's policy, not a webhook (podGate auto, Kubernetes >= 1.36).
    for hook in client.get(VALIDATING_WEBHOOKS, "gangplugin")["webhooks"]:
        assert "service" in hook["clientConfig"] and "url" not in hook["clientConfig"]
    assert client.get_or_none(MUTATING_WEBHOOKS, "gangplugin") is None
    assert all(client.get_or_none(r, "gangplugin-placement-gate") is not None for r in POD_GATE)
    with pytest.raises(ApiError) as bad:
        client.create(
            GANG_POLICIES,
            {
                "apiVersion": "gangplugin.io/v1alpha1",
                "kind": "GangPolicy",
                "metadata": {"name": unique("bad")},
                "spec": {"readyTimeout": "soon"},
            },
        )
    assert "readyTimeout" in str(bad.value), bad.value
    # Metrics, scraped from each pod as Prometheus would (HTTPS, the chart's CA).
    ca = base64.b64decode(client.get(SECRETS, "gangplugin-ca", rn.NAMESPACE)["data"]["ca.crt"]).decode()
    context = ssl.create_default_context(cadata=ca)
    context.check_hostname = False  # the certificate names the Service, the scrape uses the pod's IP
    for pod in pods:
        text = httpx.get(f"https://{pod['status']['podIP']}:8081/metrics", verify=context, timeout=10).text
        assert "gangplugin_" in text and "process_resident_memory_bytes" in text
    # A gang in bindMode Extender: the chart's scheduler calls the leader's extender.
    queue = gang_queue(gpu_quota=32, bindMode="Extender")
    job = rn.pytorchjob(unique("ext"), namespace, queue, 4, worker)
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["schedulerName"] = "gangplugin-scheduler"
    name = job["metadata"]["name"]
    with rn.submitted(client, job):
        met = _all_meet(real, client, namespace, name, 4, f"every rank of {name} to meet")
        assert len({rn.ultraserver_of(client)[p["spec"]["nodeName"]] for p in met.pods.values()}) == 1
        scheduled = {
            e.get("reportingComponent") or e["source"].get("component")
            for e in client.list(EVENTS, namespace)["items"]
            if e["reason"] == "Scheduled" and e["involvedObject"]["name"].startswith(name)
        }
        assert scheduled == {"gangplugin-scheduler"}
    # `helm upgrade` keeps the generated CA and certificates.
    first = {s: client.get(SECRETS, s, rn.NAMESPACE)["data"] for s in GENERATED}
    out = rn.helm(real, "upgrade", "gangplugin", str(rn.CHART), "--reuse-values", "--set", "logLevel=DEBUG")
    assert out.returncode == 0, out.stderr
    assert {s: client.get(SECRETS, s, rn.NAMESPACE)["data"] for s in GENERATED} == first
    wait_until(
        lambda: len([p for p in rn.gangplugin_pods(client) if rn.ready(p)]) == 2 and rn.holder(client),
        START,
        lambda: f"both pods Ready again after the upgrade: {_pods_state(client)}",
    )


def _job_state(client: Client, namespace: str, job: str) -> str:
    wl = workload_of(client, namespace, job)
    pods = [
        (p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"), rn.ready(p))
        for p in rn.job_pods(client, namespace, job)
    ]
    return f"check {check_of(wl) if wl else None}; pods {pods}"


def _all_meet(
    real: LocalCluster,
    client: Client,
    namespace: str,
    job: str,
    ranks: int,
    awaited: str,
    timeout: float = START,
    after: float = 0.0,
) -> rn.Met:
    """Wait until every rank of `job` has met the others and stepped (`rn.all_met`); past the
    timeout, fail with `awaited` and the job's check and pods."""
    return wait_until(
        lambda: rn.all_met(real, client, namespace, job, ranks, after=after),
        timeout,
        lambda: f"{awaited}: {_job_state(client, namespace, job)}",
    )


def test_an_8_rank_gang_starts_whole_in_one_ultraserver_and_every_rank_meets(
    real: LocalCluster, cluster: E2ECluster, installed: None, namespace: str, gang_queue: Any, worker: str
) -> None:
    client = cluster.client
    queue = gang_queue(gpu_quota=48, sparesPerUltraServer=1)
    job = rn.pytorchjob(unique("eight"), namespace, queue, 8, worker)
    name = job["metadata"]["name"]
    t0 = time.time()
    with rn.submitted(client, job):
        met = _all_meet(real, client, namespace, name, 8, f"every rank of {name} to meet")
        nodes = {p["spec"]["nodeName"] for p in met.pods.values()}
        us = rn.ultraserver_of(client)
        assert len(nodes) == 2 and len({us[n] for n in nodes}) == 1, nodes
        spare = {n for n, u in us.items() if u == us[next(iter(nodes))]} - nodes
        assert len(spare) == 1, "the UltraServer's spare is kept free"
        for rank, pod in met.pods.items():
            assert met.gpus[rank].startswith(f"{pod['spec']['nodeName']}-gpu"), (rank, met.gpus[rank])
        assert len(set(met.gpus.values())) == 8, "no GPU given to two ranks"
        starts = [e["t"] for e in met.first_step.values()]
        print(f"\n8-rank gang: submission to every rank's first step {max(starts) - t0:.1f}s")


def test_a_gang_that_cannot_fit_starts_no_rank_until_room_frees(
    real: LocalCluster, cluster: E2ECluster, installed: None, namespace: str, gang_queue: Any, worker: str
) -> None:
    client = cluster.client
    queue = gang_queue(gpu_quota=48, sparesPerUltraServer=1)
    jobs = [rn.pytorchjob(unique(f"g{i}"), namespace, queue, 5, worker) for i in range(3)]
    names = [j["metadata"]["name"] for j in jobs]
    with rn.submitted(client, jobs[0]), rn.submitted(client, jobs[1]):
        for name in names[:2]:
            _all_meet(real, client, namespace, name, 5, f"{name} running")
        with rn.submitted(client, jobs[2]):
            # Each UltraServer has 8 GPUs besides its spare, and 5 of them are taken: the third waits.
            def waiting() -> dict[str, Any] | None:
                wl = workload_of(client, namespace, names[2])
                c = check_of(wl) if wl else {}
                return c if c.get("state") == "Pending" and "fit" in c.get("message", "") else None

            check = wait_until(
                waiting,
                START,
                lambda: (
                    f"{names[2]}'s check Pending for want of room: {_job_state(client, namespace, names[2])}"
                ),
            )
            assert not is_true(workload_of(client, namespace, names[2]), "Admitted"), check
            assert client.list(PODS, namespace, label_selector=f"{rn.JOB_LABEL}={names[2]}")["items"] == []
            client.request(
                "DELETE", rn.PYTORCHJOBS.path(namespace, names[0]), body={"propagationPolicy": "Foreground"}
            )
            _all_meet(real, client, namespace, names[2], 5, f"{names[2]} running once room freed")


def _processes_of(pool: Pool, uid: str) -> set[int]:
    """The processes still running in a pod's cgroups on any node (cgroupfs names them pod<uid>)."""
    found: set[int] = set()
    top = cgroups.ROOT / cgroups.PIDS / pool.cgroup.strip("/")
    for directory, _dirs, _files in os.walk(top):
        if Path(directory).name == f"pod{uid}":
            found |= cgroups.pids(str(Path(directory).relative_to(cgroups.ROOT / cgroups.PIDS)))
    return found


def test_a_rank_never_ready_gets_the_gang_requeued_whole_and_no_rank_left_running(
    real: LocalCluster,
    cluster: E2ECluster,
    pool: Pool,
    installed: None,
    namespace: str,
    gang_queue: Any,
    worker: str,
) -> None:
    client = cluster.client
    # A backoff longer than the test: once requeued, the gang stays out.
    queue = gang_queue(gpu_quota=48, readyTimeout="30s", requeue={"backoffBaseSeconds": 3600})
    job = rn.pytorchjob(unique("never"), namespace, queue, 4, worker, NEVER_READY_RANK="2")
    name = job["metadata"]["name"]
    with rn.submitted(client, job):
        # Every rank runs, rank 2 too (it met the others), but rank 2 never says it is ready.
        met = _all_meet(real, client, namespace, name, 4, f"every rank of {name} running")
        uids = {p["metadata"]["uid"] for p in met.pods.values()}

        def others_ready() -> dict[int, dict[str, Any]] | None:
            pods = {rn.rank_of(p): p for p in rn.job_pods(client, namespace, name)}
            return pods if all(rn.ready(p) for r, p in pods.items() if r != 2) and len(pods) == 4 else None

        pods = wait_for(others_ready, START, f"{name}'s ranks but rank 2 Ready")
        assert not rn.ready(pods[2]), "its probe answers 503 for good"

        def requeued_whole() -> dict[str, Any] | None:
            wl = workload_of(client, namespace, name)
            c = check_of(wl) if wl else {}
            return c if requeued(c) and not is_true(wl, "Admitted") else None

        check = wait_for(requeued_whole, START, f"{name} requeued after readyTimeout")
        assert "30s" in check.get("message", "") or "backoff" in check.get("message", ""), check
        wait_for(
            lambda: not client.list(PODS, namespace, label_selector=f"{rn.JOB_LABEL}={name}")["items"],
            START,
            f"every pod of {name} deleted",
        )
        wait_until(
            lambda: not any(_processes_of(pool, uid) for uid in uids),
            START,
            lambda: f"no process of {name}'s pods left: {[_processes_of(pool, u) for u in uids]}",
        )
        wl = workload_of(client, namespace, name)
        assert wl is not None
        reasons = [e["reason"] for e in events_of(client, namespace, wl["metadata"]["name"])]
        assert "GangRequeued" in reasons, reasons


def test_the_leader_s_pod_killed_or_its_node_lost_hands_over_and_nothing_is_lost(
    real: LocalCluster, cluster: E2ECluster, installed: None, namespace: str, gang_queue: Any, worker: str
) -> None:
    client = cluster.client
    queue = gang_queue(gpu_quota=48, sparesPerUltraServer=1)
    running = rn.pytorchjob(unique("keep"), namespace, queue, 4, worker)
    keep = running["metadata"]["name"]
    with rn.submitted(client, running):
        before = _all_meet(real, client, namespace, keep, 4, f"{keep} running")
        # 1. The leader's pod deleted (SIGTERM): the other replica takes the Lease.
        first = rn.holder(client)
        client.delete(PODS, first, rn.NAMESPACE)
        second = wait_for(lambda: (h := rn.holder(client)) not in (None, first) and h, START, "a new leader")
        # 2. The new leader's node lost: its Lease runs out, the third pod (the Deployment's
        #    replacement of the first) takes it.
        node = client.get(PODS, second, rn.NAMESPACE)["spec"]["nodeName"]
        power_off(real, node)
        try:
            third = wait_for(
                lambda: (h := rn.holder(client)) not in (None, second) and h,
                NODE_LOST,
                "the Lease taken from the lost node's leader",
            )
            assert client.get(PODS, third, rn.NAMESPACE)["spec"]["nodeName"] != node
            # Nothing lost: a gang submitted now is admitted by the new leader and meets.
            later = rn.pytorchjob(unique("after"), namespace, queue, 4, worker)
            with rn.submitted(client, later):
                name = later["metadata"]["name"]
                _all_meet(real, client, namespace, name, 4, f"{name} running after the handovers")
            # The gang admitted before stayed admitted throughout (unless it lost a rank on the node).
            wl = workload_of(client, namespace, keep)
            assert wl is not None and is_true(wl, "Admitted"), wl
            if node not in {p["spec"]["nodeName"] for p in before.pods.values()}:
                assert {p["metadata"]["uid"] for p in rn.job_pods(client, namespace, keep)} == {
                    p["metadata"]["uid"] for p in before.pods.values()
                }
        finally:
            power_on(real, node)
            wait_for(lambda: rn.node_ready(client, node), START, f"{node} Ready again")
            wait_for(lambda: rn.webhook_answers(client), START, "the webhook answering again")


def test_a_lost_node_s_ranks_come_back_on_the_spare_and_meet_again(
    real: LocalCluster, cluster: E2ECluster, installed: None, namespace: str, gang_queue: Any, worker: str
) -> None:
    client = cluster.client
    queue = gang_queue(
        gpu_quota=48, sparesPerUltraServer=1, nodeFailure="ReplaceFromSpare", recoveryTimeout="10m"
    )
    job = rn.pytorchjob(unique("lose"), namespace, queue, 8, worker)
    name = job["metadata"]["name"]
    with rn.submitted(client, job):
        before = _all_meet(real, client, namespace, name, 8, f"{name} running")
        us = rn.ultraserver_of(client)
        used = {p["spec"]["nodeName"] for p in before.pods.values()}
        (spare,) = {n for n, u in us.items() if u == us[next(iter(used))]} - used
        # Lose a node without rank 0 (the rendezvous stays up: its generation moves on).
        master = before.pods[0]["spec"]["nodeName"]
        lost = next(n for n in sorted(used) if n != master)
        t_lost = time.time()
        power_off(real, lost)
        try:
            after = _all_meet(
                real, client, namespace, name, 8, f"{name} whole again", NODE_LOST + START, after=t_lost
            )
            moved = {
                r
                for r, p in after.pods.items()
                if p["spec"]["nodeName"] != before.pods[r]["spec"]["nodeName"]
            }
            assert moved == {r for r, p in before.pods.items() if p["spec"]["nodeName"] == lost}
            assert {after.pods[r]["spec"]["nodeName"] for r in moved} == {spare}
            wl = workload_of(client, namespace, name)
            reasons = (
                [e["reason"] for e in events_of(client, namespace, wl["metadata"]["name"])] if wl else []
            )
            assert "NodeReplaced" in reasons and "GangRequeued" not in reasons, reasons
            first = min(e["t"] for e in after.first_step.values())
            print(f"\nnode lost -> first step after it: {first - t_lost:.1f}s")
        finally:
            power_on(real, lost)
            wait_for(lambda: rn.node_ready(client, lost), START, f"{lost} Ready again")
            wait_for(lambda: rn.webhook_answers(client), START, "the webhook answering again")


def test_helm_uninstall_removes_what_it_installed_and_keeps_the_crds(
    real: LocalCluster, cluster: E2ECluster, installed: None
) -> None:
    client = cluster.client
    for log in rn.save_logs(real, client):
        assert refused(log) == [], f"the chart's ServiceAccount was refused by the API server ({log})"
    out = rn.helm(real, "uninstall", "gangplugin", "--wait", "--timeout", "3m")
    assert out.returncode == 0, out.stderr
    assert client.get_or_none(rn.DEPLOYMENTS, "gangplugin", rn.NAMESPACE) is None
    assert client.get_or_none(CLUSTER_ROLES, "gangplugin") is None
    assert all(client.get_or_none(r, "gangplugin") is None for r in WEBHOOKS)
    assert all(client.get_or_none(r, "gangplugin-placement-gate") is None for r in POD_GATE)
    assert all(client.get_or_none(SECRETS, s, rn.NAMESPACE) is None for s in GENERATED)
    assert client.get_or_none(CRDS, "gangpolicies.gangplugin.io") is not None, "Helm keeps crds/"
    wait_for(lambda: not rn.gangplugin_pods(client), START, "gangplugin's pods gone")
