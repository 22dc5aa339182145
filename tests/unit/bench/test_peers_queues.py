"""Where a part waited: the components' histograms read, summed over the labels that do not
matter, and differenced into a mean per item over the part."""

from __future__ import annotations

from _peers import queues

HOOK = 'name="mpod.kb.io",operation="CREATE",rejected="false",type="admit"'


def _metrics(webhook: tuple[float, float], job: tuple[float, float], scheduler: tuple[float, float]) -> str:
    return f"""# HELP apiserver_admission_webhook_admission_duration_seconds x
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{{{HOOK},le="+Inf"}} {webhook[1]}
apiserver_admission_webhook_admission_duration_seconds_sum{{{HOOK}}} {webhook[0]}
apiserver_admission_webhook_admission_duration_seconds_count{{{HOOK}}} {webhook[1]}
# HELP workqueue_queue_duration_seconds x
# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_bucket{{name="job",le="+Inf"}} {job[1]}
workqueue_queue_duration_seconds_sum{{name="job"}} {job[0]}
workqueue_queue_duration_seconds_count{{name="job"}} {job[1]}
workqueue_queue_duration_seconds_bucket{{name="scheduler",le="+Inf"}} {scheduler[1]}
workqueue_queue_duration_seconds_sum{{name="scheduler"}} {scheduler[0]}
workqueue_queue_duration_seconds_count{{name="scheduler"}} {scheduler[1]}
# HELP other_seconds x
# TYPE other_seconds histogram
other_seconds_sum 5
other_seconds_count 1
"""


def test_a_part_s_mean_per_item_is_of_its_own_items() -> None:
    before = queues.read(_metrics((1.0, 10), (2.0, 4), (1.0, 1)), "kcm")
    after = queues.read(_metrics((3.0, 30), (2.0, 4), (9.0, 5)), "kcm")
    diff = queues.difference(before, after)
    # 20 webhook calls took 2 s in the part; the job queue had no item; only kcm's job queue is read
    assert diff == {"kcm webhook mpod.kb.io": {"items": 20.0, "mean ms": 100.0}}
    assert queues.line(diff) == "kcm webhook mpod.kb.io 100 ms x20"


def test_every_queue_of_kueue_is_read() -> None:
    after = queues.read(_metrics((0.0, 0), (2.0, 4), (9.0, 5)), "kueue")
    assert set(after) >= {("kueue", "job wait"), ("kueue", "scheduler wait")}
    assert after[("kueue", "scheduler wait")] == (9.0, 5)
