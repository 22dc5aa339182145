"""Live pages: which topics changed, carried from the read model's dispatcher thread to every
open page as server-sent events. An event names a topic only (`map`, `gangs`, ...), never data:
the page's region then asks for its fragment again, through the same authorization as any
request, so a stream shows nothing a user may not read.

Changes are coalesced twice: the dispatcher thread wakes the server's loop once per burst (not
once per watch event), and each stream sends a topic at most once per `COALESCE` seconds, so a
burst of 1,000 pod events redraws a page once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator

from gangplugin.console.model import Topic

COALESCE = 1.0
#: A comment line this often keeps proxies and the browser from closing an idle stream.
KEEPALIVE = 15.0
#: What the browser waits before it connects again after the stream ends (ms).
RETRY_MS = 2000


class Subscriber:
    def __init__(self) -> None:
        self.pending: set[Topic] = set()
        self.wake = asyncio.Event()


class Changes:
    """Topic changes, from any thread to the streams on `loop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._dirty: set[Topic] = set()
        self._scheduled = False
        self._subscribers: set[Subscriber] = set()

    def publish(self, topic: Topic) -> None:
        """Called on the dispatcher's thread: cheap, never blocks."""
        with self._lock:
            self._dirty.add(topic)
            if self._scheduled:
                return
            self._scheduled = True
        self._loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        with self._lock:
            topics, self._dirty, self._scheduled = self._dirty, set(), False
        for sub in self._subscribers:
            sub.pending |= topics
            sub.wake.set()

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[Subscriber]:
        """On the loop: a subscriber told of every change until the block ends."""
        sub = Subscriber()
        self._subscribers.add(sub)
        try:
            yield sub
        finally:
            self._subscribers.discard(sub)

    def subscribers(self) -> int:
        return len(self._subscribers)


async def stream(
    changes: Changes, resumed: bool = False, coalesce: float = COALESCE, keepalive: float = KEEPALIVE
) -> AsyncIterator[str]:
    """The text/event-stream of one page: `event: <topic>` lines as topics change. `resumed`: the
    browser connects again after losing the stream (it sends Last-Event-ID), so every topic is
    named at once: what changed meanwhile was not told."""
    with changes.subscribe() as sub:
        yield f"retry: {RETRY_MS}\n: connected\n\n"
        if resumed:
            sub.pending |= set(Topic)
            sub.wake.set()
        while True:
            try:
                await asyncio.wait_for(sub.wake.wait(), keepalive)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            await asyncio.sleep(coalesce)  # let the rest of a burst arrive
            topics, sub.pending = sub.pending, set()
            sub.wake.clear()
            for topic in sorted(topics):
                yield f"id: {topic.value}\nevent: {topic.value}\ndata: {topic.value}\n\n"
