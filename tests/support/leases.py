"""A leader handover as the Lease records it, and the bound client-go's protocol puts on it.

With lease duration D, retry period P, jitter J (retries wait P x [1, J)) and T the longest one
API request may take (the client's timeout), and R the old leader's last renewTime (stamped when
its try began, before its GET and PUT):

- that renewal is written by R + 2T;
- the follower's previous try read the old record before that write, then it waited under J*P:
  its next try, whose GET sees the renewal, begins (and starts its clock) by R + 2T + T + J*P;
- the lease expires on its clock D after that, and its first try beginning at or after the
  expiry begins within J*P + T: it stamps acquireTime A there.

So A - R <= D + 2*J*P + 4T (`worst_case_handover`): 15 + 4.8 + 120 s with serve's defaults. The
request terms are what a busy machine stretches, and T bounds each (a request over it fails, and
the protocol promises nothing while the API server does not answer). Measured from the kill the
test sees the acquisition up to 2T later (the follower's GET and PUT); the kill follows R, so
`worst_case_handover + 2T` bounds the wait. The other side is safety: the follower acquires no
earlier than D after the renewal it saw, less the time its GET took, so A - R >= renew deadline
whenever a GET is answered within D - renew deadline (5 s): the old leader, had it lived without
renewing, had stopped acting (core.leader.lost) before the new one began. The seconds a handover
took are a figure the tests print, not a verdict.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gangplugin.core.leader import JITTER, ElectionConfig
from gangplugin.kube.client import Client
from gangplugin.kube.lease import LEASES

REQUEST_TIMEOUT = 30.0  # Client's default timeout for one request (the renewing process gives up sooner)


def worst_case_handover(config: ElectionConfig) -> float:
    """The most seconds from the old holder's last renewTime to the new holder's acquireTime."""
    return config.lease_duration + 2 * JITTER * config.retry_period + 4 * REQUEST_TIMEOUT


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Handover:
    renewed: float  # the old holder's last renewTime (epoch seconds)
    acquired: float  # the new holder's acquireTime
    spec: dict[str, Any]  # the Lease's spec as the new holder wrote it

    @property
    def seconds(self) -> float:
        return self.acquired - self.renewed


def watch_handover(
    client: Client, namespace: str, name: str, before: dict[str, Any], new: str, timeout: float
) -> Handover:
    """Every write of Lease `namespace/name` from `before` (the Lease read before the holder was
    stopped) on, until `new` holds it: a watch, so no renewal between two looks is missed."""
    old = before["spec"]["holderIdentity"]
    last = before
    rv = before["metadata"]["resourceVersion"]
    deadline = time.monotonic() + timeout
    writes: list[tuple[str, str]] = []
    while (left := deadline - time.monotonic()) > 0:
        for event in client.watch(LEASES, namespace, resource_version=rv, timeout_seconds=max(1, int(left))):
            obj = event["object"]
            if event["type"] == "ERROR":
                raise AssertionError(f"the Lease watch ended: {obj}")
            rv = obj["metadata"]["resourceVersion"]
            if event["type"] != "MODIFIED" or obj["metadata"]["name"] != name:
                continue
            spec = obj["spec"]
            writes.append((spec.get("holderIdentity", ""), spec.get("renewTime", "")))
            if spec.get("holderIdentity") == old:
                last = obj
            elif spec.get("holderIdentity") == new:
                return Handover(_epoch(last["spec"]["renewTime"]), _epoch(spec["acquireTime"]), spec)
            else:
                raise AssertionError(f"the Lease went to neither {old} nor {new}: {spec}")
    raise AssertionError(f"{new} did not take Lease {namespace}/{name} within {timeout:g}s; writes: {writes}")
