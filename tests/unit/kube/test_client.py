"""The client sends the credentials' current header on every call and, after a 401, fresh ones
once; error statuses keep the wait the server asked for."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web

from gangplugin.extender.barrier import ApiBinder
from gangplugin.kube.client import NODES, ApiError, Client, api_error
from gangplugin.kube.config import Credentials


def test_every_request_carries_the_current_token_and_a_401_retries_with_a_fresh_one(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    seen: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        if request.headers.get("authorization") != "Bearer new":
            token.write_text("new")  # the kubelet rotated it after we read it
            return httpx.Response(401, content=b'{"kind":"Status","reason":"Unauthorized"}')
        return httpx.Response(200, content=b'{"items":[],"metadata":{"resourceVersion":"1"}}')

    creds = Credentials(token_file=token)
    client = Client("https://api.test", False, creds, transport=httpx.MockTransport(handle))
    assert client.list(NODES)["items"] == []
    assert seen == ["Bearer old", "Bearer new"]
    assert client.list(NODES)["items"] == [] and seen[-1] == "Bearer new"  # kept: no re-read


def test_a_static_token_is_not_retried_after_401() -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(401, content=b'{"kind":"Status","reason":"Unauthorized","message":"no"}')

    client = Client("https://api.test", False, Credentials(token="t"), transport=httpx.MockTransport(handle))
    with pytest.raises(ApiError, match="401 Unauthorized: no"):
        client.list(NODES)
    assert calls == 1


def test_errors_keep_retry_after_from_the_header_or_the_status() -> None:
    assert api_error(429, b"{}", "3").retry_after == 3.0
    status = {"kind": "Status", "code": 429, "reason": "TooManyRequests", "details": {"retryAfterSeconds": 2}}
    assert api_error(429, orjson.dumps(status)).retry_after == 2.0
    assert api_error(503, b"busy", "Wed, 21 Oct 2015 07:28:00 GMT").retry_after is None
    err = api_error(500, b"[1, 2]")
    assert (err.status, err.retry_after) == (500, None)


def test_the_binder_sends_fresh_credentials_on_each_bind(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first")
    creds = Credentials(token_file=token)
    seen: list[str] = []

    async def binding(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        body: dict[str, Any] = await request.json()
        assert body["target"]["name"] == "node-1"
        return web.json_response({"kind": "Status", "status": "Success"}, status=201)

    async def run() -> None:
        app = web.Application()
        app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", binding)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        binder = ApiBinder(Client(f"http://127.0.0.1:{port}", False, creds))
        await binder("ns", "p-0", "uid-0", "node-1")
        token.write_text("second")  # rotated
        creds.invalidate()  # as once a minute
        await binder("ns", "p-1", "uid-1", "node-1")
        assert binder._session is not None
        await binder._session.close()
        await runner.cleanup()

    asyncio.run(run())
    assert seen == ["Bearer first", "Bearer second"]
