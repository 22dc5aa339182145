"""Admissions the gang check has decided and is writing, told to the parts of this process that
keep capacity for them, before the Workload watch can show them.

The gang check admits a gang by writing its check entry Ready; the gang reservations (the
extender's and the ungater's) learn of it from their Workload watch, behind the write, the watch
and their dispatcher. Until then a plain pod kube-scheduler asks the extender about could be given
the gang's nodes. The admission pass and the reservations run in one process (the leader), so the
pass hands each admission over as it decides it: the Workload as it will read once written. A
write that is refused is withdrawn. Neither component imports the other: both reach this broker
through the runtime (`Runtime.shared`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from gangplugin.kube.client import JSON

NAME = "admissions-in-flight"


@dataclass(frozen=True, slots=True)
class Subscriber:
    admitting: Callable[[JSON], None]  # the Workload as the admission's write will make it
    withdrawn: Callable[[JSON], None]  # the Workload as it is: the admission was not written


class AdmissionsInFlight:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            self._subscribers.append(subscriber)

    def admitting(self, admitted: JSON) -> None:
        """Called by the admission pass before it writes the admission."""
        for s in self._listeners():
            s.admitting(admitted)

    def withdrawn(self, workload: JSON) -> None:
        """Called by the admission pass when the admission it announced was not written."""
        for s in self._listeners():
            s.withdrawn(workload)

    def listened(self) -> bool:
        """Whether a part of this process hears of admissions before they are written."""
        with self._lock:
            return bool(self._subscribers)

    def _listeners(self) -> list[Subscriber]:
        with self._lock:
            return list(self._subscribers)
