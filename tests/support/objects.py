"""The objects the tests and benchmarks submit, as plain JSON: one builder per kind."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gangplugin.core.names import GANG_LABEL, GANG_SIZE_ANNOTATION, REQUIRED_TOPOLOGY_ANNOTATION
from gangplugin.core.timeutil import format_time


def gpu_pod(
    namespace: str,
    name: str,
    *,
    gang: str | None = None,
    size: int | None = None,
    gpus: int = 4,
    required: str | None = None,
    node_selector: dict[str, str] | None = None,
    scheduler: str | None = None,
) -> dict[str, Any]:
    labels = {GANG_LABEL: gang} if gang else {}
    annotations = {GANG_SIZE_ANNOTATION: str(size)} if size else {}
    if required:
        annotations[REQUIRED_TOPOLOGY_ANNOTATION] = required
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "trainer",
                "image": "trainer:latest",
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
        "nodeSelector": node_selector or {},
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": spec,
    }


def training_plan(name: str, cq: str, start: datetime, end: datetime, **spec: Any) -> dict[str, Any]:
    body = {
        "targetResource": "training-job",
        "clusterQueue": cq,
        "flavor": cq,
        "resourcesPerInstance": {"nvidia.com/gpu": 8},
        "testOverrides": {"anyBlockTimes": True, "terminationLead": "5s"},
        "reservedCapacity": [
            {
                "instanceType": "ml.p5.48xlarge",
                "instanceCount": 2,
                "availabilityZone": "us-east-1b",
                "startTime": format_time(start),
                "endTime": format_time(end),
            }
        ],
    }
    body.update(spec)
    return {
        "apiVersion": "gangplugin.io/v1alpha1",
        "kind": "TrainingPlan",
        "metadata": {"name": name},
        "spec": body,
    }
