"""The real nodes' plan and files: names and labels from the shape, addresses, ports and cgroups of
their own, the containerd, CNI and kubelet settings the machine needs, and the device plugin's
gRPC service. What only real kubelets show is in tests/e2e/test_real_nodes.py."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from gangplugin.kube.shape import INSTANCE_TYPE, ULTRASERVER
from gangplugin.localcluster.cluster import LocalCluster, Ports
from gangplugin.localcluster.components.apiserver import KubeApiserver
from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.realnodes import deviceplugin
from gangplugin.localcluster.realnodes.configs import (
    KERNEL_DEFAULTS,
    NodeRun,
    cni_config,
    containerd_config,
    kubelet_config,
    node_binds,
)
from gangplugin.localcluster.realnodes.gen import deviceplugin_pb2 as pb
from gangplugin.localcluster.realnodes.gen import deviceplugin_pb2_grpc as rpc
from gangplugin.localcluster.realnodes.pool import SHAPE_ENV, Network, Pool, plan, recorded


def spec_of(tmp_path: Path, base: int = 9000, components: tuple[str, ...] = ("real-nodes",)) -> Any:
    names = ["kube-controller-manager", "kube-scheduler", *components]
    return LocalCluster(state_dir=tmp_path / "state", ports=Ports(base), components=names).spec


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    return plan(spec_of(tmp_path))


def test_the_default_pool_is_two_ultraservers_of_three_nodes_labelled_as_the_fake_ones(pool: Pool) -> None:
    assert [n.name for n in pool.nodes] == [f"real-us{u}-0{i}" for u in (1, 2) for i in (1, 2, 3)]
    for node in pool.nodes:
        assert node.labels[INSTANCE_TYPE] == "ml.p6e-gb200.36xlarge"
        assert node.labels[ULTRASERVER] == f"real-us-{node.name[7]}"
        assert node.labels["type"] == "real"
        assert node.gpus == 4
        # The kubelet sets these itself, and refuses them in --node-labels.
        assert "kubernetes.io/hostname" not in node.labels and "kubernetes.io/os" not in node.labels


def test_every_node_has_its_own_address_pod_range_ports_directory_and_cgroup(pool: Pool) -> None:
    subnet = ipaddress.ip_network(pool.network.subnet)
    ips = [n.ip for n in pool.nodes]
    assert len(set(ips)) == len(ips) and all(ipaddress.ip_address(ip) in subnet for ip in ips)
    ranges = [(ipaddress.ip_address(n.pod_first), ipaddress.ip_address(n.pod_last)) for n in pool.nodes]
    for i, (first, last) in enumerate(ranges):
        assert first in subnet and last in subnet and first < last
        others = [r for j, r in enumerate(ranges) if j != i]
        assert all(last < lo or hi < first for lo, hi in others), "pod ranges overlap"
        assert ipaddress.ip_address(pool.network.gateway) not in (first, last)
    ports = [p for n in pool.nodes for p in (n.kubelet_port, n.healthz_port, n.stream_port)]
    ports += [pool.kube_proxy_health, pool.kube_proxy_metrics]
    assert len(set(ports)) == len(ports) and all(9000 <= p < 10000 for p in ports)
    assert len({n.directory for n in pool.nodes}) == len(pool.nodes)
    assert len({n.cgroup for n in pool.nodes}) == len(pool.nodes)
    assert all(n.cgroup.startswith(pool.cgroup + "/") for n in pool.nodes)


def test_pools_of_other_port_bases_take_other_bridges_and_subnets() -> None:
    nets = [Network(base) for base in (9000, 10000, 21000, 23000, 25000)]
    assert len({n.bridge for n in nets}) == len({n.subnet for n in nets}) == len(nets)
    services = ipaddress.ip_network("10.96.0.0/16")
    assert not any(ipaddress.ip_network(n.subnet).overlaps(services) for n in nets)
    assert all(len(n.bridge) <= 15 for n in nets)  # IFNAMSIZ


def test_the_pool_as_started_is_read_back_for_down(pool: Pool, tmp_path: Path) -> None:
    spec = spec_of(tmp_path)
    assert recorded(spec) is None
    pool.write()
    assert recorded(spec) == pool


def test_a_shape_too_large_or_without_gpus_is_refused_by_name(tmp_path: Path, monkeypatch: Any) -> None:
    shape = yaml.safe_load(Path("deploy/local/real-nodes-shape.yaml").read_text())
    shape["spec"]["groups"][0]["ultraServerCount"] = 5
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(shape))
    monkeypatch.setenv(SHAPE_ENV, str(big))
    with pytest.raises(ClusterError, match="has 15 nodes; a real-node pool runs at most 12"):
        plan(spec_of(tmp_path))
    shape["spec"]["groups"][0] |= {"ultraServerCount": 1, "allocatable": {"cpu": "4"}}
    big.write_text(yaml.safe_dump(shape))
    with pytest.raises(ClusterError, match=r"real-us1-01 has no nvidia\.com/gpu"):
        plan(spec_of(tmp_path))


def test_containerd_restricts_oom_score_adj_and_keeps_its_files_in_the_node(pool: Pool) -> None:
    node = pool.nodes[0]
    config = tomllib.loads(containerd_config(node, "3.10.2"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10.2"
    assert cri["stream_server_port"] == str(node.stream_port)
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert Path(config["root"]).is_relative_to(node.directory)
    assert Path(config["grpc"]["address"]).is_relative_to(node.directory)
    assert Path(cri["cni"]["conf_dir"]).is_relative_to(node.directory)


def test_the_cni_network_is_the_pool_bridge_with_the_node_s_range(pool: Pool) -> None:
    node = pool.nodes[2]
    (bridge,) = cni_config(pool, node)["plugins"]  # type: ignore[misc]
    assert bridge["bridge"] == pool.network.bridge and bridge["isGateway"] is True
    (r,) = bridge["ipam"]["ranges"][0]
    assert (r["rangeStart"], r["rangeEnd"]) == (node.pod_first, node.pod_last)
    assert r["gateway"] == pool.network.gateway


def test_the_kubelet_runs_on_cgroup_v1_without_touching_the_host_s_kernel_settings(
    pool: Pool, tmp_path: Path
) -> None:
    node = pool.nodes[0]
    config = kubelet_config(spec_of(tmp_path), node)
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == node.cgroup
    assert config["protectKernelDefaults"] is True and config["makeIPTablesUtilChains"] is False
    assert (config["address"], config["port"]) == (node.ip, node.kubelet_port)
    assert config["readOnlyPort"] == 0 and config["authorization"] == {"mode": "Webhook"}
    assert config["imageGCHighThresholdPercent"] == 100, "loaded images cannot be pulled again"
    binds = node_binds(node)
    assert {"/run", "/var/lib", "/var/log"} <= set(binds)
    assert {f"/proc/sys/{k}" for k in KERNEL_DEFAULTS} <= set(binds)
    assert all(p.is_relative_to(node.directory) for p in binds.values())


def test_a_node_s_run_file_reads_back(tmp_path: Path, pool: Pool) -> None:
    node = pool.nodes[0]
    run = NodeRun(
        name=node.name,
        directory=node.directory,
        cgroup=node.cgroup,
        log_dir=tmp_path,
        containerd=["containerd", "--config=x"],
        kubelet=["kubelet"],
        ctr="ctr",
        socket=node.directory / "containerd.sock",
        images=[tmp_path / "a.oci.tar"],
        gpus=4,
        binds=node_binds(node),
    )
    run.write(tmp_path / "node.json")
    assert NodeRun.read(tmp_path / "node.json") == run


def test_kube_apiserver_serves_the_pool_s_pods_only_when_real_nodes_run(tmp_path: Path) -> None:
    with_nodes = KubeApiserver().process(spec_of(tmp_path / "a")).argv
    gateway = Network(9000).gateway
    assert "--bind-address=0.0.0.0" in with_nodes and f"--advertise-address={gateway}" in with_nodes
    without = KubeApiserver().process(spec_of(tmp_path / "b", components=())).argv
    assert "--bind-address=127.0.0.1" in without
    assert not any(a.startswith("--advertise-address") for a in without)


def test_the_device_plugin_lists_its_gpus_and_allocates_only_its_own(tmp_path: Path) -> None:
    import threading
    from concurrent import futures

    stop = threading.Event()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc.add_DevicePluginServicer_to_server(deviceplugin.FakeGpus("n1", 4, stop), server)
    socket = tmp_path / "gpu.sock"
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = rpc.DevicePluginStub(channel)
            first = next(iter(stub.ListAndWatch(pb.Empty(), timeout=5)))
            assert [d.ID for d in first.devices] == ["n1-gpu0", "n1-gpu1", "n1-gpu2", "n1-gpu3"]
            assert {d.health for d in first.devices} == {"Healthy"}
            request = pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=["n1-gpu1", "n1-gpu3"])]
            )
            (resp,) = stub.Allocate(request, timeout=5).container_responses
            assert dict(resp.envs) == {"NVIDIA_VISIBLE_DEVICES": "n1-gpu1,n1-gpu3"}
            other = pb.ContainerAllocateRequest(devices_ids=["n2-gpu0"])
            bad = pb.AllocateRequest(container_requests=[other])
            with pytest.raises(grpc.RpcError) as err:
                stub.Allocate(bad, timeout=5)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        stop.set()
        server.stop(grace=0)
