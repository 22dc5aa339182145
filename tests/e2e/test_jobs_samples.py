"""Every training sample in deploy/samples/, submitted as it is written (team-a, LocalQueue
training) to the local cluster and run by its real controller, admitted as a gang, and the
rendezvous each pod gets checked: the torchrun flags resolved from the environment its
controller injected, every pod meeting at the same endpoint, that endpoint's DNS name naming
the leader (rank 0) pod through a Service that selects it, and the ranks 0..n-1 once each."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

import yaml

from gangplugin.kube.client import JOBS, ApiError, Client, Resource
from gangplugin.kube.kueue_records import is_true
from tests.support.cluster import E2ECluster
from tests.support.gangs import node_us
from tests.support.jobkinds import KINDS, SAMPLES, gang_pods
from tests.support.kube import wait_until, workload_of

SERVICES = Resource("v1", "services")
RESOURCES = {("batch/v1", "Job"): JOBS, ("v1", "Service"): SERVICES} | {
    (k.build()["apiVersion"], k.build()["kind"]): k.resource for k in KINDS
}
FILES = (
    "gang-job.yaml",
    "checkpoint-job.yaml",
    "jobset-gang.yaml",
    "pytorchjob-gang.yaml",
    "trainjob-gang.yaml",
    "leaderworkerset-gang.yaml",
    "rayjob-gang.yaml",
)
PODS_OF = {
    "gang-job.yaml": 8,
    "checkpoint-job.yaml": 2,
    "jobset-gang.yaml": 5,
    "pytorchjob-gang.yaml": 8,
    "trainjob-gang.yaml": 8,
    "leaderworkerset-gang.yaml": 8,
    "rayjob-gang.yaml": 8,
}
REQUIRED = "gangplugin.io/required-topology"
VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


@dataclass(frozen=True)
class Rendezvous:
    host: str
    port: str
    nnodes: str | None
    rank: str | None
    rdzv_id: str | None


def resolved_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet gives it: values, and fields of the pod."""
    env: dict[str, str] = {}
    meta = pod["metadata"]
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = VAR.sub(lambda m: env.get(m[1], m[0]), var["value"])
            continue
        path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        if m := FIELD.fullmatch(path):
            found = (meta.get(m[1]) or {}).get(m[2])
        else:
            found = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"]}.get(path)
        if found is not None:
            env[var["name"]] = str(found)
    return env


def torchrun(pod: dict[str, Any]) -> Rendezvous:
    """The rendezvous of the pod's torchrun, its $(VAR)s expanded from the injected env (a
    variable nothing set stays `$(VAR)`, and fails the checks)."""
    (container,) = [c for c in pod["spec"]["containers"] if "torchrun" in (c.get("command") or [])]
    env = resolved_env(pod, container)
    argv = [
        VAR.sub(lambda m: env.get(m[1], m[0]), a)
        for a in [*container["command"], *(container.get("args") or [])]
    ]
    flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    if "rdzv-endpoint" in flags:
        host, _, port = flags["rdzv-endpoint"].rpartition(":")
    else:
        host, port = flags.get("master-addr", "?"), flags.get("master-port", "?")
    return Rendezvous(host, port, flags.get("nnodes"), flags.get("node-rank"), flags.get("rdzv-id"))


def named_pod(client: Client, namespace: str, host: str, pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The one pod of `pods` a DNS name inside the cluster reaches: a Service (`<svc>`, or
    `<svc>.<ns>.svc[.cluster.local]`) that selects it alone, or `<hostname>.<subdomain>[.<ns>]`
    (`.svc...` may follow), the pod of that hostname and subdomain, behind the headless Service
    of that name, which selects it."""
    qualified = re.sub(r"\.svc(\.cluster\.local)?$", "", host)
    parts = qualified.split(".")
    if len(parts) == 1 or (len(parts) == 2 and qualified != host):
        service, ns = parts[0], parts[1] if len(parts) == 2 else namespace
        svc = client.get(SERVICES, service, ns)
        matches = [p for p in pods if _selects(svc, p)]
    else:
        hostname, service, ns = parts[0], parts[1], parts[2] if len(parts) > 2 else namespace
        svc = client.get(SERVICES, service, ns)
        assert svc["spec"].get("clusterIP") == "None", f"Service {service} is not headless: {svc['spec']}"
        matches = [
            p for p in pods if p["spec"].get("hostname") == hostname and p["spec"].get("subdomain") == service
        ]
    assert len(matches) == 1, f"{host} reaches {[p['metadata']['name'] for p in matches]}"
    assert _selects(svc, matches[0]), f"Service {service} does not select {matches[0]['metadata']['name']}"
    return matches[0]


def _selects(svc: dict[str, Any], pod: dict[str, Any]) -> bool:
    selector = svc["spec"].get("selector") or {}
    labels = pod["metadata"].get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _env(pod: dict[str, Any], container: int = 0) -> dict[str, str]:
    return resolved_env(pod, pod["spec"]["containers"][container])


def assert_torch_rendezvous(client: Client, file: str, pods: list[dict[str, Any]]) -> None:
    namespace = pods[0]["metadata"]["namespace"]
    meets = {p["metadata"]["name"]: torchrun(p) for p in pods}
    points = {(r.host, r.port, r.nnodes, r.rdzv_id) for r in meets.values()}
    assert len(points) == 1, f"{file}: the pods meet at different places: {meets}"
    (host, port, nnodes, rdzv_id) = points.pop()
    assert port.isdigit() and nnodes == str(len(pods)), f"{file}: {meets}"
    leader = named_pod(client, namespace, host, pods)
    ranks = {name: r.rank for name, r in meets.items()}
    if all(r is None for r in ranks.values()):  # c10d: ranks are given at the endpoint
        assert rdzv_id and "$(" not in rdzv_id, f"{file}: {meets}"
        return
    assert sorted(ranks.values(), key=str) == sorted(map(str, range(len(pods)))), f"{file}: ranks {ranks}"
    assert ranks[leader["metadata"]["name"]] == "0", (
        f"{file}: {host} is {leader['metadata']['name']}, rank {ranks}"
    )


def assert_ray_rendezvous(client: Client, pods: list[dict[str, Any]]) -> None:
    """Every worker's `ray start --address` is the head's Service, which selects the head pod."""
    heads = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
    workers = [p for p in pods if p not in heads]
    assert len(heads) == 1 and workers, [p["metadata"]["name"] for p in pods]
    addresses = {_env(p)["FQ_RAY_IP"] for p in workers}
    assert len(addresses) == 1, addresses
    (address,) = addresses
    head = named_pod(client, pods[0]["metadata"]["namespace"], address, pods)
    assert head["metadata"]["name"] == heads[0]["metadata"]["name"], (address, head["metadata"]["name"])


def _submit(client: Client, file: str) -> list[tuple[Resource, dict[str, Any]]]:
    """Every document of the sample, created as written (a leftover of the same name first
    deleted); what was made, the job first."""
    made = []
    for doc in (d for d in yaml.safe_load_all((SAMPLES / file).read_text()) if d):
        res = RESOURCES[(doc["apiVersion"], doc["kind"])]
        _delete(client, res, doc)
        client.create(res, doc, doc["metadata"]["namespace"])
        made.append((res, doc))
    return made


def _delete(client: Client, res: Resource, doc: dict[str, Any]) -> None:
    name, namespace = doc["metadata"]["name"], doc["metadata"]["namespace"]
    if client.delete(res, name, namespace) is not None:
        wait_until(
            lambda: client.get_or_none(res, name, namespace) is None,
            120,
            lambda: f"a leftover {doc['kind']} {name} gone",
        )


def _gang_running(client: Client, file: str, job: dict[str, Any]) -> list[dict[str, Any]]:
    seen: list[str] = []
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]

    def gang() -> list[dict[str, Any]] | None:
        wl = workload_of(client, namespace, name)
        pods = gang_pods(client, namespace, wl) if wl else []
        seen[:] = [f"{p['metadata']['name']} ready={is_true(p, 'Ready')}" for p in pods]
        ok = len(pods) == PODS_OF[file] and all(is_true(p, "Ready") for p in pods)
        return pods if ok else None

    return wait_until(gang, 240, lambda: f"{file}: {PODS_OF[file]} Ready pods of its gang; seen {seen}")


def test_every_sample_runs_as_a_gang_and_each_pod_meets_the_same_leader(job_controllers: E2ECluster) -> None:
    client = job_controllers.client
    made = {file: _submit(client, file) for file in FILES}
    try:
        us = node_us(client)
        for file, objects in made.items():
            pods = _gang_running(client, file, objects[0][1])
            asked = [p for p in pods if REQUIRED in (p["metadata"].get("annotations") or {})]
            assert len({us[p["spec"]["nodeName"]] for p in asked}) <= 1, f"{file}: spread over UltraServers"
            if file == "rayjob-gang.yaml":
                assert_ray_rendezvous(client, pods)
            else:
                assert_torch_rendezvous(client, file, pods)
    finally:
        for objects in made.values():
            for res, doc in objects:
                with contextlib.suppress(ApiError):
                    client.delete(res, doc["metadata"]["name"], doc["metadata"]["namespace"])
