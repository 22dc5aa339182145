"""A local cluster's kwok node failed as a dead kubelet leaves it, and healed again.

A node is made NotReady by labelling it `NOT_READY_LABEL` (kwok's node-initialize stage then
leaves it alone, deploy/kwok/stages.yaml) and setting its Ready condition False, which the node
lifecycle controller acts on as for a dead kubelet; removing the label lets kwok make it Ready.
"""

from __future__ import annotations

import time
from typing import Any

from gangplugin.kube.client import NODES, Client
from gangplugin.kube.kueue_records import is_true
from gangplugin.localcluster.nodes import NOT_READY_LABEL
from tests.support.kube import wait_for


def fail_nodes(
    client: Client, *names: str, reason: str = "E2ENodeDown", message: str = "made NotReady by an e2e test"
) -> None:
    """Make nodes NotReady; several at once: their Ready conditions are flipped back to back
    (everything else done first) so the controller sees them fail together."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    down = {
        "type": "Ready",
        "status": "False",
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    conditions: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        client.patch(NODES, name, {"metadata": {"labels": {NOT_READY_LABEL: "true"}}})
        node = client.get(NODES, name)
        conditions[name] = [c for c in node["status"]["conditions"] if c["type"] != "Ready"] + [down]
    for name in names:
        client.patch(NODES, name, {"status": {"conditions": conditions[name]}}, subresource="status")


def heal_nodes(client: Client, *names: str, timeout: float = 60) -> None:
    """Let kwok make the nodes Ready again, and wait until it has."""
    for name in names:
        client.patch(NODES, name, {"metadata": {"labels": {NOT_READY_LABEL: None}}})
    wait_for(
        lambda: all(is_true(client.get(NODES, n), "Ready") for n in names),
        timeout,
        f"{', '.join(names)} Ready again (kwok)",
    )
