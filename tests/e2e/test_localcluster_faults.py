"""`make up` fails clearly and leaves nothing behind: a busy port, a component that cannot start."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gangplugin.localcluster.cluster import REPO, ClusterError, LocalCluster, Ports
from tests.e2e.conftest import E2ECluster


def _cluster(tmp_path: Path, base: int) -> LocalCluster:
    return LocalCluster(state_dir=tmp_path / "cluster", ports=Ports(base=base), log=lambda _: None)


def test_port_in_use_is_named_and_nothing_starts(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, 24000)
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
    cluster = _cluster(tmp_path, 24100)
    # etcd cannot use a data directory that is a file: it exits at once.
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "etcd").write_text("not a directory")
    with pytest.raises(ClusterError) as err:
        cluster.up(build=False)
    assert "etcd exited" in str(err.value)
    assert cluster.running_processes() == {}
    assert not cluster.state_file.exists()


def test_second_up_finds_the_running_cluster(cluster: E2ECluster) -> None:
    if not cluster.local:
        pytest.skip("checks the local launcher; KUBECONFIG names another cluster")
    again = LocalCluster(
        state_dir=REPO / ".local" / "e2e-cluster", ports=Ports(base=23000), log=lambda _: None
    )
    assert again.is_running()
    assert again.up(build=False) is False
