"""A gang the watchdog requeued after a timeout is held back by the check until the end of its
backoff, recorded on its Workload; a drained or preempted gang (no annotation) is not. The
gate's backoff step is tested in tests/unit/core/test_gate.py; here, what the pass reads."""

from __future__ import annotations

from gangplugin.core.gate import Backoff
from gangplugin.core.names import BACKOFF_UNTIL_ANNOTATION
from gangplugin.kube.kueue_records import epoch
from gangplugin.readmodel.decisions import backoff
from tests.support.objects import workload


def test_the_backoff_is_read_from_the_workload_as_it_writes_it() -> None:
    until = "2026-11-30T12:01:00Z"
    assert backoff(workload(annotations={BACKOFF_UNTIL_ANNOTATION: until})) == Backoff(
        epoch(until, "until"), until
    )


def test_no_or_an_unreadable_backoff_holds_nothing() -> None:
    assert backoff(workload()) is None
    assert backoff(workload(annotations={BACKOFF_UNTIL_ANNOTATION: "soon"})) is None
