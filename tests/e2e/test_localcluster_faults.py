"""`make up` fails clearly and leaves nothing behind: a busy port, a component that cannot start;
and it comes up again over a cluster that died without `make down`."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from gangplugin.localcluster.cluster import ClusterError, LocalCluster, Ports, _alive
from tests.e2e.conftest import e2e_port_base
from tests.e2e.kube import wait_for


def _cluster(tmp_path: Path, base: int) -> LocalCluster:
    return LocalCluster(state_dir=tmp_path / "cluster", ports=Ports(base=base), log=lambda _: None)


def test_port_in_use_is_named_and_nothing_starts(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, e2e_port_base() + 1000)
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
    cluster = _cluster(tmp_path, e2e_port_base() + 2000)
    # A corrupt write-ahead log: etcd exits at once.
    wal = tmp_path / "cluster" / "etcd" / "member" / "wal"
    wal.mkdir(parents=True)
    (wal / "0000000000000000-0000000000000000.wal").write_text("junk")
    with pytest.raises(ClusterError) as err:
        cluster.up(build=False)
    assert "etcd exited" in str(err.value)
    assert cluster.running_processes() == {}
    assert not cluster.state_file.exists()


def test_second_up_finds_the_running_cluster_and_down_leaves_nothing(tmp_path: Path) -> None:
    # A cluster of its own, so this holds whichever cluster KUBECONFIG names for the other tests.
    first = _cluster(tmp_path, e2e_port_base() + 3000)
    try:
        assert first.up(build=False) is True
        again = _cluster(tmp_path, e2e_port_base() + 3000)
        assert again.is_running()
        assert again.up(build=False) is False, "a second up must not start a second cluster"
        assert again.running_processes() == first.running_processes()
        # Killed without `make down` (a crash, a reboot): etcd keeps gangplugin's webhooks, which
        # must not refuse the next `up` its own GangPolicy while gangplugin is not serving yet.
        pids = list(first.running_processes().values())
        for pid in pids:
            os.killpg(pid, signal.SIGKILL)
        # Gone for good (no thread left holding a port) before the next `up`, as after a reboot.
        wait_for(lambda: not any(_alive(pid) for pid in pids), 60, "the killed cluster's processes to exit")
        revived = _cluster(tmp_path, e2e_port_base() + 3000)
        assert revived.up(build=False) is True
    finally:
        first.down(quiet=True)
    assert first.running_processes() == {}
    assert not first.state_file.exists()
