"""A value the console derives from the read model (the map, the gang rows), kept until the
model changes, and made again at most once per `max(floor, factor x what making it cost)`.

On a big cluster that never stops changing (5,000 nodes, pods coming and going every second),
making the map on every change would keep a core busy for whoever has it open, beside the
controllers of the same process. So a change within that interval is answered with the value
already made, and one reminder is set for when the interval ends: the pages are then told the
topic changed and ask again. A page lags by one interval at most; the work is bounded by
1/factor of a core whatever the churn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

FLOOR = 1.0
FACTOR = 4.0


class Derived(Generic[T]):
    def __init__(
        self,
        make: Callable[[], T],
        remind: Callable[[], None],
        floor: float = FLOOR,
        factor: float = FACTOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._make, self._remind, self._floor, self._factor, self._clock = make, remind, floor, factor, clock
        self._lock = threading.Lock()
        self._generation = 0
        self._made: tuple[int, T, float, float] | None = None  # (generation, value, made at, cost)
        self._reminder: threading.Timer | None = None

    def changed(self) -> None:
        """What it derives from changed (called on the dispatcher's thread)."""
        with self._lock:
            self._generation += 1

    def get(self) -> T:
        now = self._clock()
        with self._lock:
            generation, made = self._generation, self._made
        if made is not None:
            made_for, value, at, cost = made
            if made_for == generation:
                return value
            wait = at + max(self._floor, self._factor * cost) - now
            if wait > 0:
                self._remind_in(wait)
                return value
        value = self._make()
        with self._lock:
            self._made = (generation, value, now, self._clock() - now)
        return value

    def _remind_in(self, seconds: float) -> None:
        with self._lock:
            if self._reminder is not None and self._reminder.is_alive():
                return
            self._reminder = timer = threading.Timer(seconds, self._remind)
        timer.daemon = True
        timer.start()
