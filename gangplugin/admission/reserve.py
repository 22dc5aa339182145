"""The write of a reservation (whether a gang gets one, keeps it or gives it up is the gate's
reservation step, `core.gate`; what a pass knows of the reservations is read by
`readmodel.decisions.reservations`).

The domain reserved for a waiting gang is an annotation on its Workload
(`gangplugin.io/reservation`), written before the check message that names it, conditional on
the Workload's resourceVersion, so a restart resumes it and a stale decision never lands. The
watchdog removes it once the gang is admitted (`kube_records.spent_holds`); one recorded for an
earlier quota reservation is void (a requeued gang reserves again).
"""

from __future__ import annotations

from collections.abc import Callable

from gangplugin.admission.writes import CheckWriter
from gangplugin.core.gate import GateStep, GateVerdict
from gangplugin.core.names import RESERVATION_ANNOTATION
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON

#: A write on a Workload (the check message, a preemption), given the Workload to write on.
WorkloadWrite = Callable[[JSON], bool | None]


def records(wl: JSON, verdict: GateVerdict) -> bool:
    """Whether the verdict's reservation (taken, kept or given up) is not the one recorded on `wl`."""
    return verdict.step is GateStep.RESERVATION and rec.reservation_from_k8s(wl) != verdict.reservation


def recording(
    writer: CheckWriter, wl: JSON, verdict: GateVerdict, write: WorkloadWrite
) -> Callable[[], bool | None]:
    """`write` on `wl`, after the reservation the verdict takes, keeps or gives up is recorded
    on it when that changed (then on the Workload as that write left it)."""
    if not records(wl, verdict):
        return lambda: write(wl)

    def record_then_write() -> bool | None:
        taken = verdict.reservation
        value = rec.reservation_annotation(taken) if taken is not None else None
        written = writer.annotate(wl, {RESERVATION_ANNOTATION: value})
        return False if written is None else write(written)  # changed meanwhile: decided again

    return record_then_write
