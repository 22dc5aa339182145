"""The extender's HTTP endpoints and bind barrier, served for real on loopback by granian.

The cache is fed watch-style events with plain dicts; bindings go to a recording function
in place of the API server (the e2e tests bind through the real one).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import httpx
import orjson
import pytest

from gangplugin.extender.barrier import Barrier
from gangplugin.extender.pods import gang_pod_from_k8s
from gangplugin.extender.reservations import GangReservations
from gangplugin.extender.server import ExtenderHandlers, make_app
from gangplugin.localcluster.pki import CertificateAuthority
from gangplugin.readmodel.records import node_record
from gangplugin.runtime.asgi import serve
from tests.support.extender import (
    NODES,
    Recorder,
    add,
    bind,
    filtered,
    free_port,
    make_cache,
    pod,
    post,
    run,
    until,
)
from tests.support.objects import node


def test_bad_input_gets_4xx_or_an_error_and_the_server_keeps_serving():
    cache = make_cache()
    cache.on_pod("ADDED", None, gang_pod_from_k8s(pod("a", "g", 2)))
    cache.on_pod("ADDED", None, gang_pod_from_k8s(pod("b", "g", 3)))

    async def go(client, rec):  # type: ignore[no-untyped-def]
        status, body = await post(client, "/filter", b"{not json")
        assert status == 400 and "not JSON" in body["Error"]
        status, body = await post(client, "/filter", {"NodeNames": NODES})
        assert status == 400 and "Pod" in body["Error"]
        status, body = await post(client, "/filter", {"Pod": pod("x"), "NodeNames": "n0"})
        assert status == 400 and "NodeNames" in body["Error"]
        status, body = await post(client, "/bind", {"PodName": "a"})
        assert status == 400 and "PodNamespace" in body["Error"]
        # gang-size disagreeing between members of one gang: an Error result naming the field
        status, body = await filtered(client, pod("a", "g", 2))
        assert status == 200 and "gang-size" in body["Error"] and "disagrees" in body["Error"]
        status, body = await filtered(client, pod("z", "h", "lots"))
        assert status == 200 and "not a whole number" in body["Error"]
        status, body = await post(client, "/bind", {"PodName": "ghost", "PodNamespace": "ns", "Node": "n0"})
        assert status == 200 and "unknown" in body["Error"]
        # still serving: a plain GPU pod passes where it fits
        status, body = await filtered(client, pod("solo"))
        assert status == 200 and body["Error"] == "" and body["NodeNames"] == NODES
        status, body = await post(client, "/prioritize", {"Pod": pod("solo"), "NodeNames": NODES})
        assert status == 200 and {h["Host"] for h in body} == set(NODES)
        assert all(0 <= h["Score"] <= 10 for h in body)
        assert rec.calls == []

    run(go, cache)


def gang_of_three() -> tuple[GangReservations, list[dict[str, Any]]]:
    """`make_cache()` holding the three members of gang g (namespace ns), none bound."""
    cache = make_cache()
    members = [pod(f"m{i}", "g", 3) for i in range(3)]
    add(cache, *members)
    return cache, members


def test_gang_is_bound_only_when_every_member_has_a_node():
    cache, members = gang_of_three()

    async def go(client, rec):  # type: ignore[no-untyped-def]
        targets = []
        for m in members:
            status, body = await filtered(client, m)
            assert status == 200 and body["Error"] == "" and len(body["NodeNames"]) == 1
            targets.append(body["NodeNames"][0])
            assert body["FailedNodes"] == {}  # nobody sees reasons for a pod that found its node
        assert len(set(targets)) == 3
        binds = [asyncio.create_task(bind(client, f"m{i}", t)) for i, t in enumerate(targets[:2])]
        await until(lambda: rec.waiting("g") == {"m0", "m1"}, "m0 and m1 waiting at the barrier")
        assert rec.calls == [] and not any(b.done() for b in binds)  # two of three: nobody bound
        last = await bind(client, "m2", targets[2])
        results = [await b for b in binds] + [last]
        assert all(r == (200, {"Error": ""}) for r in results)
        assert sorted(c[1] for c in rec.calls) == ["m0", "m1", "m2"]

    run(go, cache)


def test_incomplete_gang_times_out_with_an_error_for_every_waiter_and_no_binding():
    cache, members = gang_of_three()

    async def go(client, rec):  # type: ignore[no-untyped-def]
        targets = [(await filtered(client, m))[1]["NodeNames"][0] for m in members]
        waits = [bind(client, f"m{i}", t) for i, t in enumerate(targets[:2])]
        results = await asyncio.gather(*waits)
        for status, body in results:
            assert status == 200 and "only 2 of 3 pods had a node" in body["Error"]
        assert rec.calls == []

    run(go, cache, timeout=0.5)


def test_bind_refuses_what_the_pod_or_its_gangs_plan_does_not_allow():
    """Whoever calls bind: a pod goes only where its own constraints and its gang's plan allow,
    each refusal names pod, node and why, and is told to the pod's owner (an Event)."""
    cache = make_cache()
    tainted = node("n-tainted", "us-1")
    tainted["spec"] = {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}
    cache.on_node("ADDED", None, node_record(tainted))
    picky = pod("picky")
    picky["spec"]["nodeSelector"] = {"no-such-label": "x"}
    members = [pod(f"m{i}", "g", 2) for i in range(2)]
    for p in (picky, pod("plain"), pod("bound", node_name="n0"), *members):
        cache.on_pod("ADDED", None, gang_pod_from_k8s(p))

    async def go(client, rec):  # type: ignore[no-untyped-def]
        async def bind_error(name: str, to: str, uid: str | None = None) -> Any:
            status, answer = await bind(client, name, to, uid)
            assert status == 200
            return answer["Error"]

        def refusal(name: str, to: str, why: str) -> str:
            return f"refusing to bind pod ns/{name} to node {to}: {why}"

        got = [
            await bind_error("picky", "n1"),
            await bind_error("plain", "n-tainted"),
            await bind_error("plain", "n1", uid="uid-of-another-pod"),
            await bind_error("bound", "n1"),
            await bind_error("plain", "no-such-node"),
            await bind_error("m0", "n1"),  # no filter call planned gang g yet
        ]
        _, planned = await filtered(client, members[0])
        target = planned["NodeNames"][0]
        elsewhere = next(n for n in NODES[1:] if n != target)
        got.append(await bind_error("m0", elsewhere))
        want = [
            refusal("picky", "n1", "the pod does not allow that node (not matching nodeSelector/affinity)"),
            refusal(
                "plain",
                "n-tainted",
                "the pod does not allow that node (taint dedicated=infer:NoSchedule not tolerated)",
            ),
            refusal("plain", "n1", "the request names uid uid-of-another-pod, the pod's uid is uid-plain"),
            refusal("bound", "n1", "the pod is already bound to n0"),
            refusal("plain", "no-such-node", "there is no such node"),
            refusal("m0", "n1", "gang g's plan gives it no node (yet)"),
            refusal("m0", elsewhere, f"gang g's plan gives it {target}"),
        ]
        assert got == want
        assert rec.calls == []
        assert rec.refusals == [(w.split()[4].removeprefix("ns/"), w) for w in want]
        assert await bind_error("plain", "n1") == ""  # what the pod allows is bound
        assert rec.calls == [("ns", "plain", "uid-plain", "n1")]

    run(go, cache)


def test_second_gang_waits_whole_while_the_first_holds_the_capacity():
    cache = make_cache()
    a = [pod(f"a{i}", "a", 3) for i in range(3)]
    b = [pod(f"b{i}", "b", 2) for i in range(2)]
    for p in a + b:
        cache.on_pod("ADDED", None, gang_pod_from_k8s(p))

    async def go(client, rec):  # type: ignore[no-untyped-def]
        _, first = await filtered(client, a[0])
        assert len(first["NodeNames"]) == 1
        _, other = await filtered(client, b[0])
        assert other["NodeNames"] == [] and set(other["FailedNodes"]) == set(NODES)
        assert all("cannot be placed whole" in r for r in other["FailedNodes"].values())
        # a plain pod may take the one node gang a did not reserve, and only that one
        _, solo = await filtered(client, pod("solo"))
        assert len(solo["NodeNames"]) == 1

    run(go, cache)


def test_bound_member_releases_its_reservation_and_the_plan_goes_when_all_are_bound():
    cache = make_cache()
    members = [pod(f"m{i}", "g", 2) for i in range(2)]
    for m in members:
        cache.on_pod("ADDED", None, gang_pod_from_k8s(m))
    gp = gang_pod_from_k8s(members[0])
    _, plan = cache.filter(gp, NODES, now=0.0)
    assert plan is not None and plan.feasible
    cache.filter(gang_pod_from_k8s(members[1]), NODES, now=1.0)
    claims = dict(cache.claims[("ns", "g")])
    for i in range(len(members)):
        node_name = plan.slots[claims[("ns", f"m{i}")]].node
        cache.on_pod("MODIFIED", None, gang_pod_from_k8s(pod(f"m{i}", "g", 2, node_name)))
    assert ("ns", "g") not in cache.plans
    free = sum(cache.snapshot.free[cache.snapshot.node_ids[n]]["nvidia.com/gpu"] for n in NODES)
    assert free == 8  # 2 nodes taken by the bound pods, nothing double counted


def test_expired_plan_gives_its_capacity_back():
    cache = make_cache()
    gp = gang_pod_from_k8s(pod("m0", "g", 4))
    _, plan = cache.filter(gp, NODES, now=0.0)
    assert plan is not None and plan.feasible
    blocked, _ = cache.filter(gang_pod_from_k8s(pod("x0", "x", 1)), NODES, now=1.0)
    assert blocked.passed == ()
    later, _ = cache.filter(gang_pod_from_k8s(pod("x0", "x", 1)), NODES, now=cache.plan_ttl + 1)
    assert len(later.passed) == 1


def test_members_of_different_shapes_each_get_a_node_that_fits_them():
    cache = make_cache()

    def shaped(name: str, gpus: int, gang: str | None = None, node_name: str | None = None) -> Any:
        raw = pod(name, gang, 2 if gang else None, node_name)
        raw["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
        return gang_pod_from_k8s(raw)

    cache.on_pod("ADDED", None, shaped("busy2", 2, node_name="n2"))  # 2 GPUs free on n2
    cache.on_pod("ADDED", None, shaped("busy3", 3, node_name="n3"))  # 1 GPU free on n3
    big, small = shaped("big", 4, "g"), shaped("small", 1, "g")
    for m in (big, small):
        cache.on_pod("ADDED", None, m)
    big_verdict, plan = cache.filter(big, NODES, now=0.0)
    small_verdict, _ = cache.filter(small, NODES, now=0.0)
    assert plan is not None and plan.feasible
    assert small_verdict.passed == ("n3",)  # best fit: the node with exactly one GPU free
    assert big_verdict.passed in (("n0",), ("n1",))  # a whole free node, not n2's two GPUs


def test_an_unknown_path_or_method_gets_404_naming_the_verbs():
    async def go(client, rec):  # type: ignore[no-untyped-def]
        status, body = await post(client, "/filters", {})
        assert status == 404 and "POST /filter, /prioritize, /bind" in body["Error"]
        resp = await client.get("/filter")
        assert resp.status_code == 404 and "GET /filter" in resp.json()["Error"]
        status, body = await post(client, "/filter", b"[]")  # still serving
        assert status == 400 and "JSON object" in body["Error"]

    run(go, make_cache())


def test_tls_offers_http2_so_the_scheduler_multiplexes_its_calls(tmp_path: Path) -> None:
    """kube-scheduler's Go client keeps two idle HTTP/1.1 connections per host: a gang's
    concurrent bind calls would each cost a TLS handshake. Over HTTP/2 they share one."""
    ca = CertificateAuthority(tmp_path)
    cert, key = ca.issue("extender", common_name="extender", hosts=("127.0.0.1",))

    async def main() -> tuple[str | None, str | None]:
        port = free_port()
        app = make_app(ExtenderHandlers(make_cache()), Barrier(make_cache(), Recorder(), 1.0))
        server = await serve(app, "127.0.0.1", port, (str(cert), str(key)))
        try:
            protocols = []
            for offer in (["h2", "http/1.1"], ["http/1.1"]):
                ctx = ssl.create_default_context(cafile=str(ca.cert_path))
                ctx.set_alpn_protocols(offer)
                _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
                protocols.append(writer.get_extra_info("ssl_object").selected_alpn_protocol())
                writer.close()
            return protocols[0], protocols[1]
        finally:
            server.cancel()

    assert asyncio.run(main()) == ("h2", "http/1.1")


def test_mutual_tls_answers_only_clients_with_a_certificate_of_the_client_ca(tmp_path: Path) -> None:
    """No client certificate, one of another CA, or one of the serving CA (not the client CA):
    the TLS handshake fails, no verb is reached (nothing bound). kube-scheduler's certificate:
    every verb answers, over HTTP/2."""
    serving = CertificateAuthority(tmp_path / "serving")
    cert, key = serving.issue("extender", common_name="extender", hosts=("127.0.0.1",))
    clients = CertificateAuthority(tmp_path / "clients", common_name="extender-clients")
    scheduler = clients.issue("scheduler", common_name="gangplugin-scheduler", client=True)
    other_ca = CertificateAuthority(tmp_path / "other").issue(
        "scheduler", common_name="gangplugin-scheduler", client=True
    )
    serving_ca = serving.issue("admin", common_name="kubernetes-admin", client=True)
    cache = make_cache()
    cache.on_pod("ADDED", None, gang_pod_from_k8s(pod("probe")))
    bodies = {
        "/filter": {"Pod": pod("probe"), "NodeNames": NODES},
        "/prioritize": {"Pod": pod("probe"), "NodeNames": NODES},
        "/bind": {"PodName": "probe", "PodNamespace": "ns", "PodUID": "uid-probe", "Node": "n1"},
    }

    def context(client_cert: tuple[Path, Path] | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(serving.cert_path))
        if client_cert is not None:
            ctx.load_cert_chain(*map(str, client_cert))
        return ctx

    async def main() -> None:
        rec = Recorder()
        app = make_app(ExtenderHandlers(cache), Barrier(cache, rec, 1.0, rec.refused))
        port = free_port()
        server = await serve(app, "127.0.0.1", port, (str(cert), str(key)), str(clients.cert_path))
        url = f"https://127.0.0.1:{port}"
        try:
            for who in (None, other_ca, serving_ca):
                for path, body in bodies.items():
                    async with httpx.AsyncClient(base_url=url, verify=context(who), timeout=10) as client:
                        with pytest.raises((httpx.TransportError, ssl.SSLError)):  # refused in TLS
                            await client.post(path, content=orjson.dumps(body))
            assert rec.calls == [] and rec.refusals == []
            async with httpx.AsyncClient(base_url=url, verify=context(scheduler), timeout=10) as client:
                for path, body in bodies.items():
                    assert await post(client, path, body) == (200, ANY)
            assert rec.calls == [("ns", "probe", "uid-probe", "n1")]
            ctx = context(scheduler)
            ctx.set_alpn_protocols(["h2", "http/1.1"])
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
            writer.close()
        finally:
            server.cancel()

    asyncio.run(main())


def test_a_client_ca_that_is_not_a_certificate_says_why(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    cert, key = ca.issue("extender", common_name="extender", hosts=("127.0.0.1",))
    bad = tmp_path / "clients.pem"
    bad.write_text("not a certificate")

    async def main() -> None:
        app = make_app(ExtenderHandlers(make_cache()), Barrier(make_cache(), Recorder(), 1.0))
        await serve(app, "127.0.0.1", free_port(), (str(cert), str(key)), str(bad))

    with pytest.raises(
        RuntimeError, match=r"could not serve on 127\.0\.0\.1:\d+: TLS certificate/key/client CA"
    ):
        asyncio.run(main())


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")

    async def main() -> None:
        app = make_app(ExtenderHandlers(make_cache()), Barrier(make_cache(), Recorder(), 1.0))
        await serve(app, "127.0.0.1", free_port(), (str(bad), str(bad)))

    with pytest.raises(RuntimeError, match=r"could not serve on 127\.0\.0\.1:\d+"):
        asyncio.run(main())


def test_a_busy_port_is_reported() -> None:
    async def main() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            app = make_app(ExtenderHandlers(make_cache()), Barrier(make_cache(), Recorder(), 1.0))
            await serve(app, "127.0.0.1", taken.getsockname()[1], None)

    with pytest.raises(RuntimeError, match=r"could not serve on 127\.0\.0\.1:\d+"):
        asyncio.run(main())
