"""kube-apiserver restarted under a running `gangplugin serve`: its watches notice, back off and
list again, its lease renews, and the next gang is admitted into one UltraServer and bound by
the extender's barrier, with no restart of gangplugin.

A leader that cannot renew its Lease for the renew deadline must stop (client-go's rule, and
kube-controller-manager's): with the default 10 s, an API server that takes longer to come back
ends the process, by design. So serve runs here with the deadlines an operator would choose for
a control plane that restarts slowly (60 s lease, 45 s renew deadline), and is given back its
defaults afterwards."""

from __future__ import annotations

import time
from typing import Any

from gangplugin.localcluster.cluster import LocalCluster
from tests.support.cluster import E2ECluster, local_of
from tests.support.gangs import check_of, node_us, running_gang, submit, workload


def test_admission_and_binding_carry_on_after_kube_apiserver_restarts(
    cluster: E2ECluster,
    namespace: str,
    gang_queue: Any,
) -> None:
    local = local_of(cluster)
    queue = gang_queue()
    local.restart("gangplugin", args=PATIENT)
    try:
        _carries_on(cluster, local, namespace, queue)
    finally:
        local.restart("gangplugin")


PATIENT = ("--leader-election-lease-duration=60s", "--leader-election-renew-deadline=45s")


def _carries_on(cluster: E2ECluster, local: LocalCluster, namespace: str, queue: str) -> None:
    before = local.running_processes()["gangplugin"]
    running_gang(cluster.client, namespace, submit(cluster.client, namespace, queue, 4), 4)

    log = local.log_dir / "gangplugin.log"
    seen = log.stat().st_size
    t0 = time.monotonic()
    local.restart("kube-apiserver")  # SIGKILL, then start it and wait for /readyz
    down = time.monotonic() - t0

    job = submit(cluster.client, namespace, queue, 4)
    pods = running_gang(cluster.client, namespace, job, 4)
    check = check_of(workload(cluster.client, namespace, job))
    assert check["state"] == "Ready", check
    domains = {node_us(cluster.client)[p["spec"]["nodeName"]] for p in pods}
    assert len(domains) == 1, domains  # placed by our extender and bound whole by its barrier
    assert local.running_processes().get("gangplugin") == before, (
        f"gangplugin exited (the API server was down {down:.1f}s)"
    )
    print(f"kube-apiserver was down {down:.1f}s")
    since = log.read_bytes()[seen:].decode(errors="replace")
    assert "listing again in" in since  # the informers noticed the restart and listed again
