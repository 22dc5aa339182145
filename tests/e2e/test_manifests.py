"""deploy/manifests/base against the real API server, and its RBAC put to work.

- Every rendered object passes a server-side dry run, except cert-manager's Issuers and
  Certificates: cert-manager is not installed here (its CRDs come from no registry this project
  can reach), so those are checked to be the only kinds the server does not know.
- Least privilege for real: the ServiceAccounts and RBAC of the base are created, and
  `gangplugin serve` (every component) and a second kube-scheduler with
  the chart's scheduler configuration run with those identities' tokens in place of the local
  cluster's gangplugin. A gang whose pods set `schedulerName: gangplugin-scheduler` is admitted,
  placed and bound through them, a TrainingPlan gets its status and its ClusterQueue its quota
  bookkeeping, and neither log shows a request the API server refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gangplugin.core.names import PLAN_QUOTA_ANNOTATION
from gangplugin.kube.client import CLUSTER_QUEUES, ApiError, Client, Resource
from gangplugin.kube.resources import TRAINING_PLANS
from tests.support import base_install
from tests.support.base_install import NAMESPACE, docs, refused, run_gang, run_kubectl, start, stop
from tests.support.cluster import E2ECluster
from tests.support.kube import gang_queues, unique, wait_for
from tests.support.manifests import BASE, CERT_MANAGER, kustomize, render, render_text
from tests.support.objects import P5, capacity_block, queue_objects, training_plan


@pytest.fixture(scope="module")
def installed_rbac(cluster: E2ECluster) -> Iterator[list[dict[str, Any]]]:
    with base_install.installed_rbac(cluster) as objs:
        yield objs


def test_every_object_passes_a_server_side_dry_run(cluster: E2ECluster, installed_rbac: Any) -> None:
    ours = [o for o in render() if o["apiVersion"] != CERT_MANAGER]
    out = run_kubectl(
        cluster,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "--field-manager=e2e-manifests",
        "-f",
        "-",
        stdin=docs(ours),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("(server dry run)") == len(ours), out.stdout
    # cert-manager's kinds: unknown here, and the only ones the server rejects.
    theirs = [o for o in render() if o["apiVersion"] == CERT_MANAGER]
    assert {o["kind"] for o in theirs} == {"Issuer", "Certificate"}
    # The whole overlay, and the base alone as `kubectl apply -k` takes it (no load-restrictor flag).
    base = [o for o in yaml.safe_load_all(kustomize(BASE)) if o]
    for args, objs, source in (
        (("-f", "-"), render(), "STDIN"),
        (("-k", str(BASE)), base, str(BASE)),
    ):
        out = run_kubectl(cluster, "apply", "--server-side", "--dry-run=server", *args, stdin=render_text())
        assert out.returncode != 0
        lines = [ln.strip() for ln in out.stderr.splitlines() if ln.strip()]
        unknown = [ln for ln in lines if ln.startswith("resource mapping not found")]
        assert all(ln == "ensure CRDs are installed first" for ln in lines if ln not in unknown), out.stderr
        assert sorted(unknown) == sorted(
            f'resource mapping not found for name: "{o["metadata"]["name"]}" namespace: "{NAMESPACE}" '
            f'from "{source}": no matches for kind "{o["kind"]}" in version "{CERT_MANAGER}"'
            for o in objs
            if o["apiVersion"] == CERT_MANAGER
        ), out.stderr
        known = [o for o in objs if o["apiVersion"] != CERT_MANAGER]
        assert out.stdout.count("(server dry run)") == len(known), out.stdout


@pytest.fixture
def serving_as_service_accounts(
    cluster: E2ECluster, installed_rbac: Any, tmp_path: Path
) -> Iterator[Callable[[], tuple[Path, Path]]]:
    """gangplugin and the gangplugin-scheduler running as the base's ServiceAccounts; yields
    `stopped()`, which stops both (so every request they made has been answered and logged) and
    returns their logs. The local cluster's own gangplugin is stopped meanwhile and restarted after."""
    with base_install.local_gangplugin_stopped(cluster) as local, contextlib.ExitStack() as running:
        gp_config = base_install.token_kubeconfig(cluster, "gangplugin", tmp_path / "gangplugin.kubeconfig")
        comp = local.process("gangplugin")
        assert comp is not None
        argv = [a if not a.startswith("--kubeconfig=") else f"--kubeconfig={gp_config}" for a in comp.argv]
        gp_log = tmp_path / "gangplugin.log"
        proc = start(argv, gp_log)
        running.callback(stop, proc)

        def ready() -> bool:
            with contextlib.suppress(httpx.HTTPError, OSError):
                return proc.poll() is None and comp.health()
            return False

        wait_for(ready, 120, f"gangplugin ready ({gp_log})")
        sched_log = running.enter_context(base_install.gangplugin_scheduler(cluster, local, tmp_path))

        def stopped() -> tuple[Path, Path]:
            running.close()  # the scheduler, then gangplugin; a second close does nothing
            return gp_log, sched_log

        yield stopped


def test_least_privilege_runs_a_gang_end_to_end(
    cluster: E2ECluster, namespace: str, serving_as_service_accounts: Callable[[], tuple[Path, Path]]
) -> None:
    client: Client = cluster.client
    made: list[tuple[Resource, str]] = []
    try:
        with gang_queues(client, namespace) as make_queue:
            run_gang(client, namespace, make_queue(gpu_quota=64))

            # A plan for a future block: the controller writes its status and the queue's bookkeeping.
            plan_queue = unique("plan")
            for res, obj in queue_objects(plan_queue, namespace, 8, P5):
                client.create(res, obj)
                if not res.namespaced:
                    made.append((res, plan_queue))
            begin = (datetime.now(UTC) + timedelta(days=2)).replace(
                hour=11, minute=30, second=0, microsecond=0
            )
            end = begin + timedelta(days=1)
            client.create(
                TRAINING_PLANS,
                training_plan(plan_queue, plan_queue, [capacity_block(begin, end, 1)], lead=None),
            )
            made.append((TRAINING_PLANS, plan_queue))
            wait_for(
                lambda: (
                    (client.get(TRAINING_PLANS, plan_queue).get("status") or {}).get("status") == "Scheduled"
                ),
                60,
                "the TrainingPlan's status",
            )
            wait_for(
                lambda: (
                    PLAN_QUOTA_ANNOTATION
                    in (client.get(CLUSTER_QUEUES, plan_queue)["metadata"].get("annotations") or {})
                ),
                60,
                "the plan's quota bookkeeping on its ClusterQueue",
            )
    finally:
        for res, obj_name in reversed(made):
            with contextlib.suppress(ApiError):
                client.delete(res, obj_name)
    gp_log, sched_log = serving_as_service_accounts()  # stopped: their last requests are logged
    assert refused(gp_log) == [], f"gangplugin was refused by the API server ({gp_log})"
    assert refused(sched_log) == [], f"the gangplugin-scheduler was refused by the API server ({sched_log})"
