"""`make up` fails clearly and leaves nothing behind: a busy port, a component that cannot start;
it comes up again over a cluster that died without `make down`; a process that exits is started
again, as kubelet would, and counted; and clusters of a chosen set of components run side by
side."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gangplugin.kube.client import CLUSTER_QUEUES, NODES, ApiError, Client
from gangplugin.localcluster.__main__ import cli
from gangplugin.localcluster.cluster import ClusterError, LocalCluster, Ports, alive
from tests.support.cluster import e2e_kueue_version, e2e_port_base
from tests.support.kube import wait_for


def _ports(k: int) -> Ports:
    """The k-th cluster of this file beside the session's: 9 ports apart, no two of them (nor the
    session's) share a port (tests/unit/test_localcluster_components.py), and all stay within
    the session's block of 1,000."""
    return Ports(base=e2e_port_base() + 9 * k)


def _cluster(tmp_path: Path, k: int, **options: Any) -> LocalCluster:
    return LocalCluster(
        state_dir=tmp_path / f"cluster-{k}",
        ports=_ports(k),
        log=lambda _: None,
        kueue_version=e2e_kueue_version(),
        **options,
    )


def test_port_in_use_is_named_and_nothing_starts(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, 1)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", cluster.ports.apiserver))
        holder.listen()
        with pytest.raises(ClusterError) as err:
            cluster.up(build=False)
    assert f"kube-apiserver ({cluster.ports.apiserver})" in str(err.value)
    assert "GANGPLUGIN_PORT_BASE" in str(err.value)
    assert cluster.running_processes() == {}


def test_component_that_dies_is_reported_and_the_rest_torn_down(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, 2)
    # A corrupt write-ahead log: etcd exits at once.
    wal = tmp_path / "cluster-2" / "etcd" / "member" / "wal"
    wal.mkdir(parents=True)
    (wal / "0000000000000000-0000000000000000.wal").write_text("junk")
    with pytest.raises(ClusterError) as err:
        cluster.up(build=False)
    assert "etcd exited" in str(err.value)
    assert cluster.running_processes() == {}
    assert not cluster.state_file.exists()


def test_second_up_finds_the_running_cluster_and_down_leaves_nothing(tmp_path: Path) -> None:
    # A cluster of its own, so this holds whichever cluster KUBECONFIG names for the other tests.
    first = _cluster(tmp_path, 3)
    try:
        assert first.up(build=False) is True
        again = _cluster(tmp_path, 3)
        assert again.is_running()
        assert again.up(build=False) is False, "a second up must not start a second cluster"
        assert again.running_processes() == first.running_processes()
        # Killed without `make down` (a crash, a reboot): etcd keeps gangplugin's webhooks, which
        # must not refuse the next `up` its own GangPolicy while gangplugin is not serving yet.
        # The keeper first: a reboot leaves nothing running to start the rest again.
        assert first.keeper() is not None
        pids = [first.keeper(), *first.running_processes().values()]
        for pid in pids:
            os.killpg(pid, signal.SIGKILL)
        # Gone for good (no thread left holding a port) before the next `up`, as after a reboot.
        wait_for(lambda: not any(alive(pid) for pid in pids), 60, "the killed cluster's processes to exit")
        revived = _cluster(tmp_path, 3)
        assert revived.up(build=False) is True
    finally:
        first.down(quiet=True)
    assert first.running_processes() == {}
    assert not first.state_file.exists()


def test_control_planes_with_kueue_only_run_side_by_side(tmp_path: Path) -> None:
    """What a MultiKueue manager is: etcd, kube-apiserver, kube-controller-manager and Kueue, no
    nodes and no gangplugin; two of them at once, each stopped on its own."""
    only = ("kube-controller-manager", "kueue")
    first, second = _cluster(tmp_path, 4, components=only), _cluster(tmp_path, 5, components=only)
    try:
        assert first.up(build=False) and second.up(build=False)
        for cluster in (first, second):
            assert set(cluster.running_processes()) == {"etcd", "kube-apiserver", *only}
            client = Client.from_kubeconfig(cluster.kubeconfig)
            try:
                assert client.list(NODES)["items"] == []
                # Kueue's own webhook answers: its defaulting adds the finalizer.
                queue = {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ClusterQueue",
                    "metadata": {"name": "q"},
                }
                made = client.request("POST", CLUSTER_QUEUES.path(), body=queue, params={"dryRun": "All"})
                assert "kueue.x-k8s.io/resource-in-use" in made["metadata"]["finalizers"]
            finally:
                client.close()
        first.down(quiet=True)
        assert first.running_processes() == {}
        assert second.is_running(), "stopping one cluster leaves the other running"
    finally:
        first.down(quiet=True)
        second.down(quiet=True)
    assert second.running_processes() == {}


def _kueue_answers(client: Client) -> bool:
    """Kueue's own webhook answers: its defaulting adds the finalizer."""
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"}}
    try:
        made = client.request("POST", CLUSTER_QUEUES.path(), body=queue, params={"dryRun": "All"})
    except ApiError:
        return False
    return "kueue.x-k8s.io/resource-in-use" in made["metadata"]["finalizers"]


def test_a_process_that_exits_is_started_again_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kueue killed behind the cluster's back (a crash): the keeper starts it again at once, as
    kubelet restarts a container, logs it, and `make status` counts it."""
    cluster = _cluster(tmp_path, 6, components=("kube-controller-manager", "kueue"))
    try:
        assert cluster.up(build=False)
        client = Client.from_kubeconfig(cluster.kubeconfig)
        try:
            crashed = cluster.running_processes()["kueue"]
            os.killpg(crashed, signal.SIGKILL)
            wait_for(
                lambda: cluster.running_processes().get("kueue", crashed) != crashed,
                120,
                "the keeper to start Kueue again",
            )
            assert cluster.restarts()["kueue"]["count"] == 1
            wait_for(lambda: _kueue_answers(client), 180, "the restarted Kueue's webhook to answer")
        finally:
            client.close()
        assert f"kueue (pid {crashed}) exited" in (cluster.log_dir / "keeper.log").read_text()
        monkeypatch.setenv("GANGPLUGIN_STATE", str(cluster.state_dir))
        status = CliRunner().invoke(cli, ["status"])
        kueue = next(line for line in status.output.splitlines() if line.startswith("kueue "))
        assert "restarted 1x" in kueue, status.output
    finally:
        cluster.down(quiet=True)
    assert cluster.running_processes() == {} and cluster.keeper() is None
