"""A gang the watchdog requeued after a timeout is held back by the check until the end of its
backoff, recorded on its Workload; a drained or preempted gang (no annotation) is not."""

from __future__ import annotations

from typing import Any

from gangplugin.admission.admit import AdmissionPass
from gangplugin.core.names import BACKOFF_UNTIL_ANNOTATION
from gangplugin.kube.kueue_records import epoch


def workload(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "wl", "namespace": "ns", "annotations": annotations or {}}}


def test_the_backoff_holds_the_gang_until_its_end_then_lets_it_go() -> None:
    until = "2026-11-30T12:01:00Z"
    end = epoch(until, "until")
    held = AdmissionPass._backoff(workload({BACKOFF_UNTIL_ANNOTATION: until}), end - 90)
    assert held is not None and held.decision is None and held.wake_at == end
    assert held.reason == "Backoff"  # gangplugin_waiting_gangs{reason}
    # The same message all along: the check is not written again each pass.
    assert held.message == f"requeued whole after a timeout: backoff until {until}"
    assert AdmissionPass._backoff(workload({BACKOFF_UNTIL_ANNOTATION: until}), end - 10) == held
    assert AdmissionPass._backoff(workload({BACKOFF_UNTIL_ANNOTATION: until}), end) is None


def test_no_or_an_unreadable_backoff_holds_nothing() -> None:
    assert AdmissionPass._backoff(workload(), 0.0) is None
    assert AdmissionPass._backoff(workload({BACKOFF_UNTIL_ANNOTATION: "soon"}), 0.0) is None
