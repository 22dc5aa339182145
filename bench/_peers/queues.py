"""Where a part's time waited inside the cluster's own components, from their /metrics before and
after it (histograms' sums and counts, so a mean per item over the part alone):

  webhook <name>      the API server's time calling each admission webhook (every pod a Job
                      controller creates passes Kueue's pod webhooks, and gangplugin's for its gangs)
  POST pods           the API server's whole answer to a pod create (webhooks included)
  kcm <queue>         kube-controller-manager's work queues: an item's wait before a worker took
                      it, and the worker's time on it (its Job controller's queue is `job`)
  kueue <queue>       the same of Kueue's controllers (controller-runtime names a queue by its
                      controller: `job`, `workload`, ...)

The hop figures say how long a gang waited between two writes; these say in whose queue. Kueue
serves its metrics only to a token its RBAC allows (controller-runtime's authentication filter):
the bench makes a ServiceAccount that may read /metrics and asks for a token of it."""

from __future__ import annotations

import ssl
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gangplugin.kube.client import Client, Resource
from tests.support.grpcauth import CLUSTER_ROLE_BINDINGS, service_account_token

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False)
READER = "bench-metrics-reader"
READER_NAMESPACE = "kube-system"

WEBHOOK = "apiserver_admission_webhook_admission_duration_seconds"
REQUEST = "apiserver_request_duration_seconds"
QUEUE_WAIT = "workqueue_queue_duration_seconds"
QUEUE_WORK = "workqueue_work_duration_seconds"

FAMILIES = (WEBHOOK, REQUEST, QUEUE_WAIT, QUEUE_WORK)
# Whose work queues are read: kube-controller-manager's Job controller, every one of Kueue's.
QUEUES: dict[str, frozenset[str] | None] = {"kcm": frozenset({"job"}), "kueue": None}
# (source, what) -> (sum of seconds, count)
Sample = dict[tuple[str, str], tuple[float, float]]


@dataclass(frozen=True)
class Endpoint:
    source: str  # "apiserver", "kcm", "kueue"
    url: str
    tls: ssl.SSLContext
    token: str | None = None


def _histograms(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], list[float]]]:
    """Per histogram family: labels (le excluded) -> [sum, count]."""
    out: dict[str, dict[tuple[tuple[str, str], ...], list[float]]] = defaultdict(dict)
    # The API server's /metrics is megabytes: parse only the families read here.
    kept = "\n".join(
        ln
        for ln in text.splitlines()
        if ln.removeprefix("# HELP ").removeprefix("# TYPE ").startswith(FAMILIES)
    )
    for family in text_string_to_metric_families(kept):
        if family.type != "histogram":
            continue
        for s in family.samples:
            if s.name.endswith("_sum"):
                slot = 0
            elif s.name.endswith("_count"):
                slot = 1
            else:
                continue
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            out[family.name].setdefault(key, [0.0, 0.0])[slot] = s.value
    return out


def _add(into: Sample, key: tuple[str, str], sc: list[float]) -> None:
    s, c = into.get(key, (0.0, 0.0))
    into[key] = (s + sc[0], c + sc[1])


def read(text: str, source: str) -> Sample:
    """What one component's /metrics says of the series above, summed over the labels it ignores."""
    h = _histograms(text)
    out: Sample = {}
    for labels, sc in h.get(WEBHOOK, {}).items():
        _add(out, (source, f"webhook {dict(labels).get('name', '?')}"), sc)
    for labels, sc in h.get(REQUEST, {}).items():
        d = dict(labels)
        if d.get("verb") == "POST" and d.get("resource") == "pods" and not d.get("subresource"):
            _add(out, (source, "POST pods"), sc)
    if source in QUEUES:
        wanted = QUEUES[source]
        for family, what in ((QUEUE_WAIT, "wait"), (QUEUE_WORK, "work")):
            for labels, sc in h.get(family, {}).items():
                name = dict(labels).get("name", "?")
                if wanted is None or name in wanted:
                    _add(out, (source, f"{name} {what}"), sc)
    return out


def difference(before: Sample, after: Sample) -> dict[str, dict[str, float]]:
    """Per series that had items during the part, a millisecond or more each: its items and their
    mean milliseconds."""
    out: dict[str, dict[str, float]] = {}
    for key, (s, c) in sorted(after.items()):
        s0, c0 = before.get(key, (0.0, 0.0))
        # a queue that neither waited nor worked a millisecond an item is not where time went
        if c - c0 > 0 and (s - s0) / (c - c0) >= 0.001:
            out[f"{key[0]} {key[1]}"] = {"items": c - c0, "mean ms": 1000 * (s - s0) / (c - c0)}
    return out


def reader_token(client: Client) -> str:
    """A day's token of a ServiceAccount that may GET /metrics (made once per cluster)."""
    rules = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    subject = {"kind": "ServiceAccount", "name": READER, "namespace": READER_NAMESPACE}
    rbac = "rbac.authorization.k8s.io/v1"
    for res, obj in (
        (
            CLUSTER_ROLES,
            {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": READER}, "rules": rules},
        ),
        (
            CLUSTER_ROLE_BINDINGS,
            {
                "apiVersion": rbac,
                "kind": "ClusterRoleBinding",
                "metadata": {"name": READER},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER},
                "subjects": [subject],
            },
        ),
    ):
        if client.get_or_none(res, READER) is None:
            client.create(res, obj)
    return service_account_token(client, READER_NAMESPACE, READER, seconds=86400)


def endpoints(client: Client, pki: Path, ports: Mapping[str, int]) -> list[Endpoint]:
    """The API server (its CA), kube-controller-manager (self-signed; the admin's certificate,
    authorized through the API server) and, when `ports` names it, Kueue (self-signed; a token)."""
    admin = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    admin.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    unverified.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    out = [
        Endpoint("apiserver", f"https://127.0.0.1:{ports['apiserver']}/metrics", admin),
        Endpoint("kcm", f"https://127.0.0.1:{ports['kcm']}/metrics", unverified),
    ]
    if "kueue" in ports:
        out.append(
            Endpoint("kueue", f"https://127.0.0.1:{ports['kueue']}/metrics", unverified, reader_token(client))
        )
    return out


def sample(points: list[Endpoint]) -> Sample:
    """Every endpoint's series now; one that does not answer is left out (said by its absence)."""
    out: Sample = {}
    for p in points:
        headers = {"Authorization": f"Bearer {p.token}"} if p.token else {}
        try:
            r = httpx.get(p.url, verify=p.tls, headers=headers, timeout=30)
            r.raise_for_status()
        except httpx.HTTPError:
            continue
        out.update(read(r.text, p.source))
    return out


def line(diff: Mapping[str, Mapping[str, float]]) -> str:
    return "; ".join(f"{k} {v['mean ms']:.0f} ms x{v['items']:.0f}" for k, v in diff.items())
