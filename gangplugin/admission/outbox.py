"""The admission pass's writes, sent without the pass waiting for them.

A pass decides every waiting gang on one snapshot, charging each admission before the next is
decided (`readmodel.capacity`: an admission stays charged until the Workload cache shows it, or
its write is known to have failed). The decisions then no longer need their writes to have
ended, so the pass hands them here and returns: the next pass, woken by the next event, decides
while the API server answers. Each write's end is reported back (`Done`): a refused or failed
admission gives its charged capacity back there, and the pass runs again.

A gang is not decided again while a write for it is in flight (`busy`), whatever copy of its
Workload the cache shows meanwhile: a reservation's write is two (its annotation, then the
check message on the Workload the annotation left), and a pass deciding between them, on the
copy the first made, would decide the gang twice. The write's answer decides what comes next:
a pass that left the gang be meanwhile runs again once it is known (`Done`'s `passed_over`).
What a write records for the other gangs counts for them from the pass that decided it on, not
only once the cache shows its annotation: a preemption's hold (`holds`), a reservation taken or
given up (`reservations`), so no gang ranked after the holder is admitted onto its domain while
the annotation is on its way.

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
from gangplugin.core.reservation import Reservation

log = logging.getLogger(__name__)

#: API writes of the pass at once (a burst of admissions, Pending messages, rejections).
WRITERS = 8


@dataclass(frozen=True, slots=True)
class Sent:
    """One write for one Workload: its key, the resourceVersion it was decided on, whether it is
    an admission (its capacity is charged until it is seen), the preemption hold it records,
    and whether it records the gang's reservation (`reserves`: `reservation`, None giving it up)."""

    key: str
    resource_version: str
    write: Callable[[], bool | None]
    admission: bool = False
    hold: Hold | None = None
    reserves: bool = False
    reservation: Reservation | None = None

    @property
    def records(self) -> bool:
        """Whether it records something the other gangs' decisions read (a hold, a reservation)."""
        return self.hold is not None or self.reserves


Outcome = bool | Exception | None
#: Called once a write ended: True written, None nothing to write, False refused (the Workload
#: changed meanwhile), or the error it raised; and whether a pass left its gang be meanwhile.
Done = Callable[[Sent, Outcome, bool], None]


class Outbox:
    def __init__(self, done: Done) -> None:
        self._done = done
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(WRITERS, thread_name_prefix="admission-write")
        # One after another across passes: a single worker takes its work in submission order.
        self._in_order = ThreadPoolExecutor(1, thread_name_prefix="admission-write-ordered")
        self._flying: dict[str, Sent] = {}
        self._passed_over: set[str] = set()  # gangs a pass left be while their write flew
        self._unreported = 0
        # holds and reservations sent, until the cache shows a newer copy than the one decided on
        self._recorded: dict[str, Sent] = {}

    def send(self, writes: Iterable[Sent], *, ordered: bool) -> None:
        """Start every write; with `ordered`, the admissions one after another (see the module doc)."""
        for sent in writes:
            with self._lock:
                self._unreported += 1
                self._flying[sent.key] = sent
                if sent.records:
                    self._recorded[sent.key] = sent
            pool = self._in_order if ordered and sent.admission else self._pool
            pool.submit(self._run, sent)

    def busy(self, key: str) -> bool:
        """Whether a write for this gang has not ended yet."""
        with self._lock:
            return key in self._flying

    def pass_over(self, key: str) -> bool:
        """Whether the pass leaves this gang be, its write not having ended; if so, the write's
        end is reported as one a pass left be (the pass then runs again)."""
        with self._lock:
            if key not in self._flying:
                return False
            self._passed_over.add(key)
            return True

    def holds(self, seen: Mapping[str, str]) -> dict[str, Hold]:
        """The holds of preemptions sent that the cache does not show yet (`seen`: key -> cached
        resourceVersion; see `_unseen`)."""
        return {k: s.hold for k, s in self._unseen(seen).items() if s.hold is not None}

    def reservations(self, seen: Mapping[str, str]) -> dict[str, Reservation | None]:
        """The reservations sent to be recorded (None: given up) that the cache does not show yet."""
        return {k: s.reservation for k, s in self._unseen(seen).items() if s.reserves}

    def _unseen(self, seen: Mapping[str, str]) -> dict[str, Sent]:
        """The recording writes still in flight, or written while the cache still holds the copy
        they were decided on; a newer copy carries what they recorded, or not."""
        with self._lock:
            for key, sent in list(self._recorded.items()):
                if self._flying.get(key) is not sent and seen.get(key) != sent.resource_version:
                    del self._recorded[key]
            return dict(self._recorded)

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
            passed_over = sent.key in self._passed_over
            self._passed_over.discard(sent.key)
            if outcome is not True and self._recorded.get(sent.key) is sent:
                del self._recorded[sent.key]  # not recorded: the pass decides the gang again
        try:
            self._done(sent, outcome, passed_over)
        except Exception:  # a broken report must not stop the writers
            log.exception("admission write for %s: reporting its end failed", sent.key)
        finally:
            with self._idle:
                self._unreported -= 1
                self._idle.notify_all()
