"""The fake nodes: made from a LocalClusterShape (deploy/local/cluster-shape.yaml by default),
created all at once, and the lease they renew through kwok."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from gangplugin.kube.client import NODES, ApiError, Client
from gangplugin.kube.shape import nodes_from_shape

# Concurrent node creates: enough to keep kube-apiserver busy on 2 cores, few enough not to queue.
NODE_WRITERS = 16
# kubelet's lease, and how many nodes two cores renew it for before it must grow.
KUBELET_LEASE_SECONDS = 40
NODES_PER_LEASE_STEP = 500
# A node with this label is left as it is by kwok's node-initialize stage (deploy/kwok/stages.yaml):
# how tests and benches make a node fail, by setting its Ready condition False beside it.
NOT_READY_LABEL = "e2e.gangplugin.io/not-ready"


def from_shape(shape: Path | None) -> list[dict[str, Any]]:
    return nodes_from_shape(yaml.safe_load(shape.read_text())) if shape else []


def lease_seconds(shape: Path | None) -> int:
    """Seconds the lease of each fake node of `shape` lasts: kubelet's 40 s up to 500 nodes,
    longer beyond. kwok renews each one at a quarter of it; 5,000 nodes at 40 s are 500 lease
    writes a second, more than two cores keep up with under load: half the nodes went
    unreachable (tainted) in a bench, and the gang pods pinned to them with them."""
    count = len(from_shape(shape))
    return max(KUBELET_LEASE_SECONDS, KUBELET_LEASE_SECONDS * count // NODES_PER_LEASE_STEP)


def create(client: Client, shape: Path, log: Callable[[str], None]) -> None:
    nodes = from_shape(shape)
    t0 = time.monotonic()

    # One create per node, with its status (a Node's create keeps it), many at a time: a
    # 5,000-node shape took minutes as an apply and a status patch each, one after the other.
    def create_one(node: dict[str, Any]) -> None:
        try:
            client.create(NODES, node)
        except ApiError as err:
            if err.status != 409:  # 409: kept in etcd from a cluster that died without `down`
                raise

    with ThreadPoolExecutor(NODE_WRITERS) as pool:
        list(pool.map(create_one, nodes))
    log(f"  {len(nodes)} fake nodes created from {shape} in {time.monotonic() - t0:.1f}s")
