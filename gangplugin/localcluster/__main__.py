"""`python -m gangplugin.localcluster up|down|status|sample` (what `make up` and `make down` run)."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from gangplugin.kube.client import JOBS, PODS, WORKLOADS, Client
from gangplugin.localcluster.cluster import GANGPLUGIN_NAMESPACE, REPO, ClusterError, LocalCluster, cache_dir
from gangplugin.localcluster.probes import Deadline


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Run the local cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok,
    JobSet, Kueue and gangplugin as local processes, with fake HyperPod-shaped nodes
    (GANGPLUGIN_WITH=<names> starts optional components too; docs/development.md)."""


@cli.command()
@click.option("--sample/--no-sample", default=True, help="Submit the sample 8-pod gang and report on it.")
def up(sample: bool) -> None:
    """Start the cluster (or find it running) and run the sample gang."""
    cluster = LocalCluster()
    cluster.up()
    if sample:
        run_sample(cluster)
    click.echo(
        f"\nkubectl and gangctl work against the cluster with:\n  export KUBECONFIG={cluster.kubeconfig}\n"
        "  gangctl get gangs -A"
    )
    if "console" in cluster.spec.gangplugin_components:
        click.echo(console_note(cluster))


def console_note(cluster: LocalCluster) -> str:
    """Where the web console is and how to sign in to it."""
    kubectl = cache_dir() / "bin" / "kubectl"
    return (
        f"\nThe console: https://127.0.0.1:{cluster.ports.gangplugin_console()}/\n"
        f"  its certificate is signed by the cluster's CA ({cluster.pki_dir / 'ca.crt'}): trust it, or\n"
        "  accept the browser's warning; sign in with a token of the local admin ServiceAccount:\n"
        f"  {kubectl} --kubeconfig {cluster.kubeconfig} -n {GANGPLUGIN_NAMESPACE} "
        "create token console-admin --duration=24h"
    )


@cli.command()
def down() -> None:
    """Stop every process of the cluster and delete its data."""
    cluster = LocalCluster()
    if not cluster.running_processes():
        click.echo("no local cluster running")
    cluster.down()
    click.echo("local cluster stopped")


@cli.command()
def status() -> None:
    """Say whether the cluster runs, which processes, and how often each was started again."""
    cluster = LocalCluster()
    procs = cluster.running_processes()
    if not procs:
        click.echo("no local cluster running")
        sys.exit(1)
    restarts = cluster.restarts()
    for name in cluster.recorded_processes():
        pid = f"pid {procs[name]}" if name in procs else "exited, being started again"
        r = restarts.get(name)
        again = f"  restarted {r['count']}x, last exit {r['lastExit']}: {r['lastLine']}" if r else ""
        click.echo(f"{name:<26} {pid}{again}")
    keeper = cluster.keeper()
    kept = f"pid {keeper} (starts again what exits)" if keeper else "not running: nothing restarts what exits"
    click.echo(f"{'keeper':<26} {kept}")
    click.echo(f"KUBECONFIG={cluster.kubeconfig}")


def run_sample(cluster: LocalCluster, timeout: float = 120.0) -> None:
    """Submit deploy/samples/gang-job.yaml and print admission, binding and readiness."""
    client = Client.from_kubeconfig(cluster.kubeconfig)
    try:
        job = cluster.apply_file(client, REPO / "deploy" / "samples" / "gang-job.yaml")[0]
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        click.echo(
            f"\nsubmitted Job {ns}/{name} ({job['spec']['parallelism']} pods) to LocalQueue "
            f"{job['metadata']['labels']['kueue.x-k8s.io/queue-name']}"
        )
        deadline = Deadline(timeout)
        reported: set[str] = set()
        while not deadline.passed():
            wls = [
                w
                for w in client.list(WORKLOADS, ns)["items"]
                if any(o.get("name") == name for o in w["metadata"].get("ownerReferences", []))
            ]
            if wls and _admitted(wls[0]) and "admitted" not in reported:
                adm = wls[0]["status"]["admission"]
                click.echo(
                    f"  Workload {wls[0]['metadata']['name']} admitted by ClusterQueue "
                    f"{adm['clusterQueue']} (flavor {_flavors(adm)})"
                )
                for check in wls[0]["status"].get("admissionChecks", []):
                    msg = check.get("message", "")
                    click.echo(f"    admission check {check['name']}: {check['state']}: {msg}")
                reported.add("admitted")
            pods = client.list(PODS, ns, label_selector=f"batch.kubernetes.io/job-name={name}")["items"]
            want = job["spec"]["parallelism"]
            bound = sorted(
                (p["metadata"]["name"], p["spec"].get("nodeName")) for p in pods if p["spec"].get("nodeName")
            )
            if len(bound) == want and "bound" not in reported:
                click.echo(f"  {want} pods bound by kube-scheduler:")
                for pod, node in bound:
                    click.echo(f"    {pod} -> {node}")
                reported.add("bound")
            ready = [p for p in pods if _ready(p)]
            if len(ready) == want and "bound" in reported:
                click.echo(f"  {want}/{want} pods Ready: the gang is running")
                return
            time.sleep(0.5)
        suspended = client.get(JOBS, name, ns)["spec"].get("suspend")
        raise ClusterError(
            f"the sample gang did not become Ready within {timeout:.0f}s "
            f"(job suspended={suspended}); see logs in {cluster.log_dir}"
        )
    finally:
        client.close()


def _admitted(wl: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Admitted" and c["status"] == "True" for c in wl.get("status", {}).get("conditions", [])
    )


def _flavors(admission: dict[str, Any]) -> str:
    return ", ".join(
        sorted({f for ps in admission.get("podSetAssignments", []) for f in ps.get("flavors", {}).values()})
    )


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", [])
    )


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except ClusterError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(1)
    except click.ClickException as err:
        err.show()
        sys.exit(2)


if __name__ == "__main__":
    main()
