"""Fuzzing the public entry points with generated input: every gRPC method (random messages, and
random bytes as the request body through a raw channel call) and the extender's HTTP endpoints
(random JSON and random bytes). No crash, no 5xx / INTERNAL / UNKNOWN, no hang, and a valid call
is answered afterwards. GANGPLUGIN_FUZZ_EXAMPLES raises the number of examples."""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import orjson
import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gangplugin.api.proto import gangs_pb2, plans_pb2
from gangplugin.extender.barrier import Barrier
from gangplugin.extender.server import ExtenderHandlers, make_app
from gangplugin.kube.client import PODS, WORKLOADS
from gangplugin.runtime.asgi import serve
from tests.support.caches import pod, serving, standard, workload
from tests.support.extender import NODES, Recorder, free_port, make_cache

EXAMPLES = int(os.environ.get("GANGPLUGIN_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

# Every method of both services, with its request type.
METHODS: dict[str, type[Message]] = {}
for module in (gangs_pb2, plans_pb2):
    for service in module.DESCRIPTOR.services_by_name.values():
        for m in service.methods:
            METHODS[f"/{service.full_name}/{m.name}"] = getattr(module, m.input_type.name)
STREAMING = {"/gangplugin.v1.GangService/WatchGangs"}
#: What a fuzzed call may end with: an answer or a status a client can act on.
ACCEPTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.UNAVAILABLE,  # PlanService reads a plan from the API server, absent here
}

_text = st.one_of(
    st.sampled_from(
        ["", "team-a", "run", "pg", "fits", "training-job", "hyperpod-cluster", "2027-01-20T11:30:00Z"]
    ),
    st.text(max_size=40),
)
_SCALARS: dict[int, Any] = {
    FieldDescriptor.TYPE_STRING: _text,
    FieldDescriptor.TYPE_INT32: st.one_of(st.integers(-5, 200), st.integers(-(2**31), 2**31 - 1)),
    FieldDescriptor.TYPE_INT64: st.integers(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
}


def message_of(cls: type[Message], depth: int = 0) -> st.SearchStrategy[Message]:
    """Random instances of a message type, field by field from its descriptor."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in cls.DESCRIPTOR.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            fields[f.name] = st.dictionaries(_text, _text, max_size=3)
        elif f.message_type is not None:
            if depth < 2:
                name = f.message_type.name
                nested = (
                    getattr(cls, name, None) or getattr(gangs_pb2, name, None) or getattr(plans_pb2, name)
                )
                fields[f.name] = st.one_of(st.none(), message_of(nested, depth + 1))
        elif f.is_repeated:
            fields[f.name] = st.lists(_SCALARS[f.type], max_size=3)
        else:
            fields[f.name] = st.one_of(st.none(), _SCALARS[f.type])
    return st.fixed_dictionaries({}, optional=fields).map(
        lambda values: cls(**{k: v for k, v in values.items() if v is not None})
    )


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    caches = standard()
    caches.put(WORKLOADS, workload("fits", 3))
    caches.put(WORKLOADS, workload("run", 2, check="Ready", admitted=True))
    caches.put(PODS, pod("pg-0", "pg", node="us2-0", size=2))
    with serving(caches) as ch:
        yield ch


def _call(channel: grpc.Channel, method: str, body: bytes) -> tuple[grpc.StatusCode, str]:
    """One call with `body` as the serialized request; the status it ended with and its details."""
    try:
        if method in STREAMING:
            call = channel.unary_stream(method)(body, timeout=1.0)
            for _ in zip(range(3), call, strict=False):
                pass  # a few updates read; the watch itself runs until cancelled
            call.cancel()
            return grpc.StatusCode.OK, ""
        channel.unary_unary(method)(body, timeout=10.0)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as err:
        code = err.code()
        if method in STREAMING and code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
            return grpc.StatusCode.OK, ""  # a watch runs until its deadline
        assert code in ACCEPTED, f"{method}: {code} {err.details()}"
        return code, err.details() or ""


def _field_names(message: type[Message]) -> set[str]:
    return {n for f in message.DESCRIPTOR.fields for n in (f.name, f.json_name)}


@FUZZ
@given(data=st.data())
def test_random_messages(channel: grpc.Channel, data: st.DataObject) -> None:
    method = data.draw(st.sampled_from(sorted(METHODS)))
    request = data.draw(message_of(METHODS[method]))
    code, details = _call(channel, method, request.SerializeToString())
    event(code.name)  # --hypothesis-show-statistics: how often each outcome was reached
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        # One line "<field>: <what to fix>", the field one of the request's.
        field, sep, problem = details.partition(": ")
        assert "\n" not in details and sep and problem.strip(), details
        assert re.split(r"[.\[]", field)[0] in _field_names(METHODS[method]), (method, details)


@FUZZ
@given(method=st.sampled_from(sorted(METHODS)), body=st.binary(max_size=200))
def test_random_bytes(channel: grpc.Channel, method: str, body: bytes) -> None:
    try:
        _call(channel, method, body)
    except AssertionError as err:
        # Bytes that are no protobuf at all are refused by gRPC itself before any handler runs.
        assert "INTERNAL" in str(err) and "deserializ" in str(err).lower(), err


def test_still_serving_after_the_fuzz(channel: grpc.Channel) -> None:
    reply = channel.unary_unary(
        "/gangplugin.v1.GangService/ListGangs", response_deserializer=gangs_pb2.ListGangsResponse.FromString
    )(gangs_pb2.ListGangsRequest(namespace="team-a").SerializeToString(), timeout=10)
    assert {g.name for g in reply.gangs} == {"fits", "run", "pg"}


# --- the extender's HTTP endpoints ---


@pytest.fixture(scope="module")
def extender() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, Any] = {}

    async def start() -> None:
        barrier = Barrier(make_cache(), Recorder(), 0.5)
        box["port"] = free_port()
        app = make_app(ExtenderHandlers(barrier.reservations), barrier)
        box["server"] = await serve(app, "127.0.0.1", box["port"], None)
        started.set()

    thread = threading.Thread(
        target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True
    )
    thread.start()
    assert started.wait(10)
    yield f"http://127.0.0.1:{box['port']}"
    loop.call_soon_threadsafe(box["server"].cancel)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
_KEYS = ["Pod", "NodeNames", "Nodes", "PodName", "PodNamespace", "PodUID", "Node", "metadata", "spec"]
_bodies = st.one_of(
    st.binary(max_size=200),
    _json.map(orjson.dumps),
    st.dictionaries(st.sampled_from(_KEYS), _json, max_size=5).map(orjson.dumps),
    st.fixed_dictionaries(
        {
            "Pod": st.fixed_dictionaries(
                {},
                optional={
                    "metadata": st.dictionaries(
                        st.sampled_from(["name", "namespace", "labels", "annotations"]), _json
                    ),
                    "spec": _json,
                },
            ),
            "NodeNames": st.one_of(_json, st.lists(st.sampled_from(NODES))),
        }
    ).map(orjson.dumps),
)


@FUZZ
@given(path=st.sampled_from(["/filter", "/prioritize", "/bind"]), body=_bodies)
def test_extender_random_input(extender: str, path: str, body: bytes) -> None:
    resp = httpx.post(extender + path, content=body, timeout=10.0)
    assert resp.status_code < 500, resp.text
    orjson.loads(resp.content)  # always a JSON answer kube-scheduler can read


def test_extender_still_serving_after_the_fuzz(extender: str) -> None:
    solo = {
        "Pod": {"metadata": {"name": "solo", "namespace": "ns", "uid": "u"}, "spec": {}},
        "NodeNames": NODES,
    }
    resp = httpx.post(extender + "/filter", content=orjson.dumps(solo), timeout=10.0)
    assert resp.status_code == 200 and resp.json()["NodeNames"] == NODES
