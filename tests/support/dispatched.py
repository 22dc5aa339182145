"""A Workload on a MultiKueue manager that gangplugin's dispatcher nominated to a worker: the
dispatch record it carries and the Workload, for the API's and the console's explain tests."""

from __future__ import annotations

from typing import Any

import orjson

from gangplugin.core.dispatch import DispatchRecord, WorkerVerdict
from gangplugin.core.names import DISPATCH_ANNOTATION
from tests.support.caches import NOW, cond, workload
from tests.support.objects import check_state

US = "topology.k8s.aws/ultraserver-id"
RECORD = DispatchRecord(
    "b",
    NOW,
    (),
    (
        WorkerVerdict(
            "b",
            True,
            True,
            "chosen: all 6 pods fit in ultraserver-id b-us1 (best fit)",
            "gb200",
            US,
            ("b-us1",),
            0,
        ),
        WorkerVerdict("a", False, False, "does not fit now: the best domain has room for 4 of 6 pods"),
    ),
    "nominated b: chosen: all 6 pods fit",
)


def dispatched(name: str, *, record: DispatchRecord | None, **status: Any) -> dict[str, Any]:
    wl = workload(name, 6, check=None)
    wl["status"] = {
        "conditions": [cond("QuotaReserved")],
        "admissionChecks": [check_state("multikueue", "Pending", message="", lastTransitionTime="x")],
        **status,
    }
    if record is not None:
        wl["metadata"]["annotations"] = {DISPATCH_ANNOTATION: orjson.dumps(record.to_dict()).decode()}
    return wl
