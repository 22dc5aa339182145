"""A keyed work queue for controllers: each key is handled by one worker at a time,
duplicates collapse, failures retry with exponential backoff, and a reconcile can
ask to be woken at a later time (a block boundary, a timeout) instead of polling."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable

from gangplugin.kube.client import ApiError

log = logging.getLogger(__name__)

# A reconcile returns None when done, or the seconds after which to run it again.
Reconcile = Callable[[str], float | None]


class WorkQueue:
    """`first`: keys handed out before any other ready key (a controller's pass, which every
    waiting object needs, ahead of the per-object items a burst of events queues)."""

    def __init__(
        self,
        *,
        base_delay: float = 0.5,
        max_delay: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        first: frozenset[str] = frozenset(),
    ) -> None:
        self._first = first
        self._clock = clock
        self._base, self._max = base_delay, max_delay
        self._cond = threading.Condition()
        self._ready: list[str] = []
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._dirty: set[str] = set()  # added while active: run again when done
        self._delayed: list[tuple[float, str]] = []
        self._waiting: dict[str, float] = {}  # key -> when its one delayed add is due
        self._failures: dict[str, int] = {}
        self._shutdown = False

    def add(self, key: str) -> None:
        with self._cond:
            if key in self._active:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
                self._cond.notify()

    def add_after(self, key: str, seconds: float) -> None:
        """Add `key` after `seconds`; a key already waiting is added once, at the earlier of the two
        times (client-go's delaying queue): events that each ask for a look soon ask for one."""
        if seconds <= 0:
            self.add(key)
            return
        with self._cond:
            due = self._clock() + seconds
            if self._waiting.get(key, due + 1) <= due:
                return
            self._waiting[key] = due
            heapq.heappush(self._delayed, (due, key))
            self._cond.notify()

    def retry(self, key: str) -> float:
        """Requeue after a failure; the delay doubles with each consecutive failure."""
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        delay: float = min(self._base * (2.0**n), self._max)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def _promote_due(self) -> float | None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, key = heapq.heappop(self._delayed)
            if self._waiting.get(key) != due:
                continue  # replaced by an earlier add, which has run
            del self._waiting[key]
            if key in self._active:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
        return self._delayed[0][0] - now if self._delayed else None

    def get(self, timeout: float | None = None) -> str | None:
        """The next key to work on (None on shutdown or timeout); call `done` after."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                wait = self._promote_due()
                if self._ready:
                    key = self._take()
                    self._queued.discard(key)
                    self._active.add(key)
                    return key
                if deadline is not None:
                    left = deadline - self._clock()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def _take(self) -> str:
        """The next ready key (under the lock): one of `first` if any is ready, else the oldest."""
        if self._first and self._queued & self._first:
            for i, key in enumerate(self._ready):
                if key in self._first:
                    return self._ready.pop(i)
        return self._ready.pop(0)

    def done(self, key: str) -> None:
        with self._cond:
            self._active.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._queued.add(key)
                self._ready.append(key)
                self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._ready) + len(self._waiting)


def run_worker(queue: WorkQueue, reconcile: Reconcile, name: str) -> None:
    """Work keys until shutdown: errors retry with backoff, a returned delay wakes the key later."""
    while (key := queue.get()) is not None:
        try:
            again = reconcile(key)
        except Exception as err:
            delay = queue.retry(key)
            if isinstance(err, ApiError) and err.status == 409:  # another writer came first: expected
                log.info("%s: %s met a newer version (%s); retrying in %.1fs", name, key, err, delay)
            else:
                log.exception("%s: reconcile %s failed; retrying in %.1fs", name, key, delay)
        else:
            queue.forget(key)
            if again is not None:
                queue.add_after(key, again)
        finally:
            queue.done(key)


def start_workers(
    queue: WorkQueue, reconcile: Reconcile, name: str, count: int = 1
) -> list[threading.Thread]:
    threads = [
        threading.Thread(target=run_worker, args=(queue, reconcile, name), name=f"{name}-{i}", daemon=True)
        for i in range(count)
    ]
    for t in threads:
        t.start()
    return threads
