"""The admission pass's writes, sent without the pass waiting for them.

A pass decides every waiting gang on one snapshot, charging each admission before the next is
decided (`readmodel.capacity`: an admission stays charged until the Workload cache shows it, or
its write is known to have failed). The decisions then no longer need their writes to have
ended, so the pass hands them here and returns: the next pass, woken by the next event, decides
while the API server answers. Each write's end is reported back (`Done`): a refused or failed
admission gives its charged capacity back there, and the pass runs again.

A gang is not decided again while a write decided on the same copy of its Workload is in
flight (`busy`): the write's answer, or the watch showing the Workload it made, decides what
comes next. A preemption's hold counts for the other gangs from the pass that decided it on
(`holds`), not only once the cache shows its annotation.

Order. Where the gang reservations (the extender's and the ungater's) run in this process, they
hear of each admission before it is written (`runtime.admissions`), so the admissions go out
side by side. Where they do not, a separate extender learns of admissions from its Workload
watch alone; the admissions then go out one after another, in the order decided, across passes,
so that its watch shows them in that order (see tests/unit/extender/test_admission_order.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gangplugin.core.preemption import Hold

log = logging.getLogger(__name__)

#: API writes of the pass at once (a burst of admissions, Pending messages, rejections).
WRITERS = 8


@dataclass(frozen=True, slots=True)
class Sent:
    """One write for one Workload: its key, the resourceVersion it was decided on, whether it is
    an admission (its capacity is charged until it is seen), and the preemption hold it records."""

    key: str
    resource_version: str
    write: Callable[[], bool | None]
    admission: bool = False
    hold: Hold | None = None


Outcome = bool | Exception | None
#: Called once a write ended: True written, None nothing to write, False refused (the Workload
#: changed meanwhile), or the error it raised.
Done = Callable[[Sent, Outcome], None]


class Outbox:
    def __init__(self, done: Done) -> None:
        self._done = done
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(WRITERS, thread_name_prefix="admission-write")
        # One after another across passes: a single worker takes its work in submission order.
        self._in_order = ThreadPoolExecutor(1, thread_name_prefix="admission-write-ordered")
        self._flying: dict[str, Sent] = {}
        self._unreported = 0
        self._holds: dict[str, Sent] = {}  # preemptions sent, until the cache shows a newer copy

    def send(self, writes: Iterable[Sent], *, ordered: bool) -> None:
        """Start every write; with `ordered`, the admissions one after another (see the module doc)."""
        for sent in writes:
            with self._lock:
                self._unreported += 1
                self._flying[sent.key] = sent
                if sent.hold is not None:
                    self._holds[sent.key] = sent
            pool = self._in_order if ordered and sent.admission else self._pool
            pool.submit(self._run, sent)

    def busy(self, key: str, resource_version: str) -> bool:
        """Whether a write decided on this copy of the Workload has not ended yet."""
        with self._lock:
            sent = self._flying.get(key)
        return sent is not None and sent.resource_version == resource_version

    def holds(self, seen: Mapping[str, str]) -> dict[str, Hold]:
        """The holds of preemptions sent on the copy of its Workload the cache still holds
        (`seen`: key -> cached resourceVersion); a newer copy carries its own, or none."""
        with self._lock:
            for key in [k for k, s in self._holds.items() if seen.get(k) != s.resource_version]:
                del self._holds[key]
            return {k: s.hold for k, s in self._holds.items() if s.hold is not None}

    def wait(self, timeout: float) -> bool:
        """Until every write sent has ended and been reported (False: not within `timeout`)."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._unreported, timeout)

    def _run(self, sent: Sent) -> None:
        try:
            outcome: Outcome = sent.write()
        except Exception as err:  # one Workload's failure is its own
            log.warning("admission write for %s failed: %s", sent.key, err)
            outcome = err
        # Not busy before the report: a pass the report starts decides the gang again. (A failed
        # admission stays charged until the report gives it back, so a pass in between does not
        # decide it.)
        with self._lock:
            if self._flying.get(sent.key) is sent:
                del self._flying[sent.key]
            if outcome is not True and self._holds.get(sent.key) is sent:
                del self._holds[sent.key]  # not recorded: the pass decides the gang again
        try:
            self._done(sent, outcome)
        except Exception:  # a broken report must not stop the writers
            log.exception("admission write for %s: reporting its end failed", sent.key)
        finally:
            with self._idle:
                self._unreported -= 1
                self._idle.notify_all()
