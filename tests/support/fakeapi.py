"""A scripted API server behind httpx.MockTransport: it fakes the network, not Kubernetes'
logic (the e2e tests run the real one). Lists answer the current pods; each watch plays the next
scripted stream (lines of bytes, or an exception to raise mid-stream), then stays open, silent,
until the test ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson

from gangplugin.kube.client import Client
from tests.support import objects

Step = bytes | BaseException | httpx.Response


class Clock:
    """A clock the test sets (`t`), for the wall, monotonic and backoff clocks."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def pod(name: str, rv: int, **labels: str) -> dict[str, Any]:
    return objects.pod(name, labels=labels, resourceVersion=str(rv))


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


class FakeApi:
    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.rv = 1
        self.lists: list[Step | None] = []  # answers for the next lists (None, or none left: the pods)
        self.watches: list[list[Step] | httpx.Response | BaseException] = []
        self.requests: list[httpx.Request] = []
        self.times: dict[int, float] = {}  # id(request) -> when it arrived (monotonic)
        self.closed = threading.Event()

    def client(self) -> Client:
        return Client("https://api.test", False, transport=httpx.MockTransport(self.handle))

    def set(self, *pods: dict[str, Any]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.rv = max([self.rv, *(int(p["metadata"]["resourceVersion"]) for p in pods)])

    def calls(self, kind: str) -> list[httpx.Request]:
        watch = kind == "watch"
        return [r for r in self.requests if ("watch" in r.url.params) == watch]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.times[id(request)] = time.monotonic()
        if "watch" in request.url.params:
            step = self.watches.pop(0) if self.watches else []
            if isinstance(step, httpx.Response):
                return step
            if isinstance(step, BaseException):
                raise step
            return httpx.Response(200, content=self._stream(step))
        answer = self.lists.pop(0) if self.lists else None
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        if answer is not None:
            return httpx.Response(200, content=answer)
        body = {"metadata": {"resourceVersion": str(self.rv)}, "items": list(self.pods.values())}
        return httpx.Response(200, content=orjson.dumps(body))

    def _stream(self, steps: list[Step]) -> Iterator[bytes]:
        for step in steps:
            if isinstance(step, BaseException):
                raise step
            assert isinstance(step, bytes)
            yield step
        self.closed.wait(10)  # an idle watch, until the test is over


def wait_until(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    done = threading.Event()
    deadline = timeout
    while deadline > 0:
        value = check()
        if value:
            return value
        done.wait(0.01)
        deadline -= 0.01
    raise AssertionError("condition not met in time")
