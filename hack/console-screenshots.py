#!/usr/bin/env python3
"""The screenshots of docs/console.md, taken from the running local cluster (`make up`) in
Debian's Chromium, as the e2e tests drive it.

    .venv/bin/python hack/console-screenshots.py [--out docs]

It adds a few things to look at (a second running gang, one waiting for a whole UltraServer more
than any has, a TrainingPlan feeding team-b, a NotReady node and a cordoned one), takes one PNG
per page, and removes what it added.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.browser import chromium  # noqa: E402
from tests.e2e.kube import gpu_job, is_true, wait_for  # noqa: E402

from gangplugin.kube.client import CLUSTER_QUEUES, JOBS, NODES, WORKLOADS, ApiError, Client  # noqa: E402
from gangplugin.kube.resources import TRAINING_PLANS  # noqa: E402
from gangplugin.localcluster.cluster import LocalCluster  # noqa: E402
from gangplugin.localcluster.nodes import NOT_READY_LABEL  # noqa: E402

US = "topology.k8s.aws/ultraserver-id"
PAGE = {"width": 1280, "height": 820}


def job(name: str, namespace: str, queue: str, pods: int) -> dict[str, Any]:
    obj = gpu_job(
        name, namespace, queue, pods, 4, metadata={"annotations": {"gangplugin.io/required-topology": US}}
    )
    obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "training-priority"
    return obj


def plan(now: datetime) -> dict[str, Any]:
    def at(days: int) -> str:
        return (
            (now + timedelta(days=days))
            .replace(hour=11, minute=30, second=0, microsecond=0)
            .strftime("%Y-%m-%dT%H:%M:%SZ")
        )

    return {
        "apiVersion": "gangplugin.io/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": "team-b-reserved"},
        "spec": {
            "targetResource": "training-job",
            "clusterQueue": "team-b",
            "flavor": "gb200",
            "resourcesPerInstance": {"nvidia.com/gpu": 4},
            "reservedCapacity": [
                {
                    "instanceType": "ml.p6e-gb200.36xlarge",
                    "instanceCount": 32,
                    "availabilityZone": "us-east-1a",
                    "startTime": at(-1),
                    "endTime": at(2),
                },
                {
                    "instanceType": "ml.p6e-gb200.36xlarge",
                    "instanceCount": 64,
                    "availabilityZone": "us-east-1a",
                    "startTime": at(5),
                    "endTime": at(9),
                },
            ],
        },
    }


def token(client: Client) -> str:
    reply = client.request(
        "POST",
        "/api/v1/namespaces/gangplugin-system/serviceaccounts/console-admin/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(reply["status"]["token"])


def node_down(client: Client, name: str) -> None:
    client.patch(NODES, name, {"metadata": {"labels": {NOT_READY_LABEL: "true"}}})
    node = client.get(NODES, name)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    down = {"type": "Ready", "status": "False", "reason": "Demo", "lastTransitionTime": now}
    conditions = [c for c in node["status"]["conditions"] if c["type"] != "Ready"] + [down]
    client.patch(NODES, name, {"status": {"conditions": conditions}}, subresource="status")


def shoot(url: str, bearer: str, out: Path, gang: str) -> None:
    with chromium(**PAGE) as context:
        page = context.new_page()
        page.goto(f"{url}/login")
        page.fill("textarea[name=token]", bearer)
        page.click("button[type=submit]")
        page.wait_for_selector("#live")
        page.screenshot(path=str(out / "console-map.png"), full_page=True)
        for name, path in (
            ("gangs", "/gangs"),
            ("gang", f"/gangs/{gang}"),
            ("quota", "/quota"),
        ):
            page.goto(f"{url}{path}")
            page.wait_for_selector("#live")
            page.screenshot(path=str(out / f"console-{name}.png"), full_page=True)
        page.goto(f"{url}/policies")
        page.click('[data-policy="default"] button')
        page.wait_for_selector('form[data-form="default"]')
        page.fill('form[data-form="default"] [name="spec.readyTimeout"]', "5 minutes")
        page.click('form[data-form="default"] button[type=submit]')
        page.wait_for_selector(".error[data-error-field]")
        page.screenshot(path=str(out / "console-policy.png"), full_page=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs")
    args = ap.parse_args()
    cluster = LocalCluster()
    client = Client.from_kubeconfig(cluster.kubeconfig)
    made: list[tuple[Any, str, str | None]] = []
    nodes = sorted(
        n["metadata"]["name"] for n in client.list(NODES)["items"] if "gb200" in n["metadata"]["name"]
    )
    down, cordoned = nodes[-1], nodes[-2]
    try:
        for name, ns, queue, pods in (
            ("pretrain-llm", "team-b", "team-b", 12),
            ("finetune", "team-a", "team-a", 6),
            ("whole-rack", "team-a", "training", 20),  # more nodes than one UltraServer has
        ):
            client.create(JOBS, job(name, ns, queue, pods))
            made.append((JOBS, name, ns))
        client.create(TRAINING_PLANS, plan(datetime.now(UTC)))
        made.append((TRAINING_PLANS, "team-b-reserved", None))
        node_down(client, down)
        client.patch(NODES, cordoned, {"spec": {"unschedulable": True}})

        def settled() -> bool:
            """Every gang decided: admitted ones Ready (PodsReady), the rest waiting."""
            wls = client.list(WORKLOADS)["items"]
            states = [((w.get("status") or {}).get("admissionChecks") or [{}])[0].get("state") for w in wls]
            ready = [is_true(w, "PodsReady") for w in wls]
            return len(wls) >= 4 and all(
                s == "Pending" or (s == "Ready" and r) for s, r in zip(states, ready, strict=True)
            )

        wait_for(settled, 300, "the demo gangs running or waiting")

        def plan_quota() -> bool:
            """The plan's active block is team-b's GPU quota (32 instances x 4 GPUs; not below its
            lendingLimit of 96, which Kueue's webhook would refuse)."""
            cq = client.get(CLUSTER_QUEUES, "team-b")
            gb200 = next(
                f for g in cq["spec"]["resourceGroups"] for f in g["flavors"] if f["name"] == "gb200"
            )
            return any(
                r["name"] == "nvidia.com/gpu" and str(r["nominalQuota"]) == "128" for r in gb200["resources"]
            )

        wait_for(plan_quota, 120, "team-b's quota set by its TrainingPlan")
        url = f"https://127.0.0.1:{cluster.ports.gangplugin_console()}"
        shoot(
            url,
            token(client),
            args.out,
            "team-b/" + next(w["metadata"]["name"] for w in client.list(WORKLOADS, "team-b")["items"]),
        )
    finally:
        for res, name, ns in made:
            try:
                client.delete(res, name, ns)
            except ApiError as err:
                print(f"could not delete {name}: {err}", file=sys.stderr)
        client.patch(NODES, down, {"metadata": {"labels": {NOT_READY_LABEL: None}}})
        client.patch(NODES, cordoned, {"spec": {"unschedulable": None}})
        client.close()
    for png in sorted(args.out.glob("console-*.png")):
        print(f"{png} {png.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
