"""The replay's named events and the queue that orders them: by time, then in the order they
were scheduled (so a replay is deterministic)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from enum import Enum
from typing import NamedTuple


class EventKind(Enum):
    #: A job arrives: it waits for Kueue's quota reservation.
    ARRIVE = "arrive"
    #: An admitted gang's pods are all Ready: it runs.
    READY = "ready"
    #: A running gang's work is done.
    FINISH = "finish"
    #: An admitted gang was not Ready by its readiness timeout.
    TIMEOUT = "timeout"
    #: The plan block a gang runs on ends: it is evicted at the termination start.
    DRAIN = "drain"
    #: A timed-out gang's backoff is over: it waits for quota again.
    REQUEUE = "requeue"
    #: Nothing happens to a job, but the next pass may decide otherwise (a plan's quota
    #: changes, a preemption hold ends, victims are gone).
    WAKE = "wake"


class Event(NamedTuple):
    """One scheduled event. `key`: the job it is about ("" for a wake-up); `attempt`: the job's
    admission it belongs to (an event of an attempt that already ended is ignored)."""

    at: float
    seq: int
    kind: EventKind
    key: str = ""
    attempt: int = 0


class Events:
    """The replay's event queue."""

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    def push(self, at: float, kind: EventKind, key: str = "", attempt: int = 0) -> None:
        heapq.heappush(self._heap, Event(at=at, seq=self._seq, kind=kind, key=key, attempt=attempt))
        self._seq += 1

    def next_time(self) -> float:
        return self._heap[0].at

    def due(self, at: float) -> Iterator[Event]:
        """The events at `at`, in order, those scheduled at `at` while they are handled included."""
        while self._heap and self._heap[0].at == at:
            yield heapq.heappop(self._heap)
