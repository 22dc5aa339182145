"""Where watch events are handled: one queue and one thread per component, so a slow handler
delays only its own component, never the watch that feeds every cache.

An informer's watch thread decodes an event, updates its store and hands the event to each
dispatcher that has handlers for it; the dispatcher runs them in registration order, one event
at a time, events in the order they were handed over (client-go's processorListener does the
same per handler, with the same unbounded buffer: a handler that falls behind costs memory,
never a missed event). Components whose handlers must see each other's effects in order (a
cache's handler before the one that reads that cache) share one dispatcher.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

Handler = Callable[[str, Any, Any], None]  # (event type, old, new)
_Event = tuple[Sequence[Handler], str, Any, Any]


class Dispatcher:
    """A named queue of watch events and the thread that runs their handlers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[_Event | threading.Event | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"dispatch-{name}", daemon=True)

    def deliver(self, handlers: Sequence[Handler], kind: str, old: Any, new: Any) -> None:
        """Queue one event for `handlers` (called on a watch thread; never blocks)."""
        self._queue.put((handlers, kind, old, new))

    def mark(self) -> threading.Event:
        """An event that is set once everything delivered before this call has been handled."""
        done = threading.Event()
        self._queue.put(done)
        return done

    def caught_up(self, timeout: float | None = None) -> bool:
        """Wait until everything delivered so far has been handled; False on timeout."""
        return self.mark().wait(timeout)

    def backlog(self) -> int:
        """Events (and marks) waiting to be handled."""
        return self._queue.qsize()

    def start(self) -> threading.Thread:
        """Start the thread; returned so the caller can watch it live."""
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        """End the thread once what was delivered before is handled."""
        self._queue.put(None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()
                continue
            handlers, kind, old, new = item
            for handler in handlers:
                try:
                    handler(kind, old, new)
                except Exception:  # a handler's bug must not stop the others, nor later events
                    log.exception("dispatcher %s: handler %s failed on %s", self.name, _name(handler), kind)


def _name(handler: Handler) -> str:
    return str(getattr(handler, "__qualname__", None) or handler)
