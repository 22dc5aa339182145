"""deploy/samples/checkpoint-job.yaml hands the pods' block end to the trainer (downward API)."""

from __future__ import annotations

from pathlib import Path

import yaml

from gangplugin.core.durations import parse_duration
from gangplugin.core.names import BLOCK_END_ANNOTATION, MAX_RUNTIME_ANNOTATION

SAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "samples" / "checkpoint-job.yaml"


def test_block_end_reaches_the_container_through_the_downward_api() -> None:
    job = next(d for d in yaml.safe_load_all(SAMPLE.read_text()) if d)
    assert job["kind"] == "Job" and job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    template = job["spec"]["template"]
    assert parse_duration(template["metadata"]["annotations"][MAX_RUNTIME_ANNOTATION], "max-runtime") > 0
    (container,) = template["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    ref = env["BLOCK_END_TIME"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert ref == f"metadata.annotations['{BLOCK_END_ANNOTATION}']"
    assert "$(BLOCK_END_TIME)" in " ".join(container["command"])
