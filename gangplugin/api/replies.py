"""What the services' RPCs share in answering: an object looked up, or NOT_FOUND."""

from __future__ import annotations

from typing import TypeVar

import grpc

T = TypeVar("T")


def or_not_found(value: T | None, context: grpc.ServicerContext, message: str) -> T:
    """`value`, or the call ends NOT_FOUND with `message` (the field asked for, and what to do)."""
    if value is None:
        context.abort(grpc.StatusCode.NOT_FOUND, message)
    assert value is not None  # abort raised
    return value
