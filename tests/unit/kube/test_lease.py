"""Leader election against a scripted Lease API: deadlines run on the monotonic clock, so a step
of the wall clock (NTP) neither ends a healthy leader's term nor lets a follower take a lease
its holder still renews."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from gangplugin.core.leader import ElectionConfig
from gangplugin.kube.client import Client
from gangplugin.kube.lease import LeaderElector
from tests.support.fakeapi import Clock


class LeaseApi:
    """One Lease, with resourceVersion checks on update; `down` makes every call fail."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.down = False
        self.methods: list[str] = []

    def client(self) -> Client:
        return Client("https://api.test", False, transport=httpx.MockTransport(self.handle))

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.methods.append(request.method)
        if self.down:
            raise httpx.ConnectError("connection refused")
        if request.method == "GET":
            if self.lease is None:
                return httpx.Response(404, content=b'{"kind":"Status","reason":"NotFound"}')
            return httpx.Response(200, content=orjson.dumps(self.lease))
        body = orjson.loads(request.content)
        if request.method == "PUT" and body["metadata"].get("resourceVersion") != str(self.rv):
            return httpx.Response(409, content=b'{"kind":"Status","reason":"Conflict"}')
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.lease = body
        return httpx.Response(200, content=orjson.dumps(body))


def _elector(api: LeaseApi, who: str, wall: Clock, mono: Clock) -> LeaderElector:
    return LeaderElector(api.client(), "ns", "gangplugin", who, ElectionConfig(), clock=wall, monotonic=mono)


def test_a_wall_clock_step_does_not_end_a_healthy_leaders_term() -> None:
    api, wall, mono = LeaseApi(), Clock(1_800_000_000.0), Clock(100.0)
    leader = _elector(api, "a", wall, mono)
    assert leader.try_acquire_or_renew()
    leader.leading.set()
    wall.t += 3600  # NTP steps the wall clock an hour forward
    mono.t += 1
    assert leader.lost_reason() is None
    wall.t -= 7200  # and two hours back
    mono.t += 1
    assert leader.try_acquire_or_renew() and leader.lost_reason() is None
    assert (
        api.lease is not None and api.lease["spec"]["renewTime"] == "2027-01-15T07:00:00.000000Z"
    )  # stamped by the wall clock


def test_a_leader_that_cannot_renew_stops_at_the_monotonic_deadline() -> None:
    api, wall, mono = LeaseApi(), Clock(1_800_000_000.0), Clock(100.0)
    leader = _elector(api, "a", wall, mono)
    assert leader.try_acquire_or_renew()
    leader.leading.set()
    api.down = True
    assert not leader._try()  # a refused connection is a failed try, not a crash
    wall.t -= 3600  # a step back would hide the silence from a wall-clock check
    mono.t += 9.9
    assert leader.lost_reason() is None
    mono.t += 0.1
    assert leader.lost_reason() == "lease ns/gangplugin not renewed within 10s"


def test_a_follower_waits_the_lease_duration_on_its_own_monotonic_clock() -> None:
    api, wall, mono = LeaseApi(), Clock(1_800_000_000.0), Clock(100.0)
    assert _elector(api, "a", Clock(1_800_000_000.0), Clock(5.0)).try_acquire_or_renew()
    follower = _elector(api, "b", wall, mono)
    assert not follower.try_acquire_or_renew() and follower.holder == "a"
    wall.t += 3600  # a step forward must not make a's lease look expired
    mono.t += 14
    assert not follower.try_acquire_or_renew()
    mono.t += 1  # 15 s on b's own clock since it saw the record: expired
    assert follower.try_acquire_or_renew()
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == "b"
    assert api.lease["spec"]["leaseTransitions"] == 1


def test_a_leader_renews_with_one_put_and_reads_again_after_a_failed_try() -> None:
    api, wall, mono = LeaseApi(), Clock(1_800_000_000.0), Clock(100.0)
    leader = _elector(api, "a", wall, mono)
    assert leader.try_acquire_or_renew()
    leader.leading.set()
    api.methods.clear()
    mono.t += 2
    assert leader.try_acquire_or_renew() and leader.try_acquire_or_renew()
    assert api.methods == ["PUT", "PUT"], "client-go's optimistic renewal: no read first"
    api.rv += 1  # written meanwhile (the same holder: a retried write): our resourceVersion is stale
    assert api.lease is not None
    api.lease["metadata"]["resourceVersion"] = str(api.rv)
    api.methods.clear()
    assert not leader.try_acquire_or_renew()  # 409
    assert leader.try_acquire_or_renew()
    assert api.methods == ["PUT", "GET", "PUT"]
