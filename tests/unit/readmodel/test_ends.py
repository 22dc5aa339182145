"""How long a gang runs at most, read from what it declares: its Job's activeDeadlineSeconds,
gangplugin.io/max-runtime, its pods' activeDeadlineSeconds, Kueue's maximumExecutionTimeSeconds;
an admitted one's end, its plan block's end included; and whether it is checkpointable."""

from __future__ import annotations

from typing import Any

from gangplugin.core.reservation import GangEnd
from gangplugin.readmodel.checks import OurCheck
from gangplugin.readmodel.ends import checkpointable, declared_runtime, gang_end, job_deadline
from gangplugin.readmodel.records import CheckEntry, workload_record
from tests.support.caches import NOW, workload


def with_template(
    wl: dict[str, Any], annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    template = wl["spec"]["podSets"][0]["template"]
    template["metadata"]["annotations"].update(annotations or {})
    template["spec"].update(spec)
    return wl


def job(deadline: Any, started: str | None = "2027-01-15T08:00:00Z") -> dict[str, Any]:
    status = {"startTime": started} if started else {}
    return {"metadata": {"uid": "u"}, "spec": {"activeDeadlineSeconds": deadline}, "status": status}


def test_the_soonest_declared_run_time_counts_and_none_is_none() -> None:
    assert declared_runtime(workload("w", 2), None) is None
    wl = with_template(workload("w", 2), {"gangplugin.io/max-runtime": "2h"})
    assert declared_runtime(wl, None) == 7200.0
    assert declared_runtime(wl, job_deadline(job(3600))) == 3600.0
    assert declared_runtime(with_template(wl, activeDeadlineSeconds=600), None) == 600.0
    wl["spec"]["maximumExecutionTimeSeconds"] = 300
    assert declared_runtime(wl, None) == 300.0
    # unreadable values declare nothing here (the gang's own check reports them)
    bad = with_template(workload("w", 2), {"gangplugin.io/max-runtime": "soon"})
    assert declared_runtime(bad, job_deadline(job("1h"))) is None


def test_a_job_deadline_counts_from_its_start_time_and_a_block_end_bounds_an_admitted_gang() -> None:
    wl = workload("w", 2, check="Ready", admitted=True)
    record = workload_record(wl)
    check = OurCheck(name="gang", policy=None, entry=None)
    assert gang_end(wl, record, check, None) == GangEnd(ends_at=None)
    later = job_deadline(job(3600, "2027-01-15T08:10:00Z"))  # resumed 10 minutes after admission
    assert gang_end(wl, record, check, later).ends_at == NOW + 600 + 3600
    updates = ({"name": "main", "annotations": {"gangplugin.io/block-end-time": "2027-01-15T08:30:00Z"}},)
    entry = CheckEntry(name="gang", state=None, message="", retry_count=0, pod_set_updates=updates)
    blocked = OurCheck(name="gang", policy=None, entry=entry)
    assert gang_end(wl, record, blocked, later).ends_at == NOW + 1800
    assert job_deadline(job(0)).active_deadline is None and job_deadline(job(5, None)).started_at is None


def test_checkpointable_is_every_pod_template_saying_true() -> None:
    assert not checkpointable(workload("w", 2))
    assert checkpointable(with_template(workload("w", 2), {"gangplugin.io/checkpointable": "true"}))
    assert not checkpointable(with_template(workload("w", 2), {"gangplugin.io/checkpointable": "yes"}))
