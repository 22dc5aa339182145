"""No typo left silent, on the real cluster: a Job whose pod template carries a misspelt
gangplugin.io/ key is held by the gang check (never admitted, no pod bound) with a check message
and a Warning Event naming the key and the closest known one; the same Job spelt right runs."""

from __future__ import annotations

from typing import Any

from gangplugin.core.names import REQUIRED_TOPOLOGY_ANNOTATION, UNKNOWN_KEY_REASON
from gangplugin.kube.kueue_records import is_true
from tests.support.cluster import E2ECluster
from tests.support.gangs import US, check_of, events_of, running_gang, submit, workload
from tests.support.kube import job_pods, unique, wait_for, wait_until

TYPO = "gangplugin.io/required-toplogy"


def test_a_misspelt_key_holds_the_gang_with_a_message_and_a_warning_naming_it(
    cluster: E2ECluster, namespace: str, gang_queue: Any
) -> None:
    client = cluster.client
    queue = gang_queue()
    name = submit(client, namespace, queue, 4, name=unique("typo"), annotations={TYPO: US})
    wl = workload(client, namespace, name)
    wl_name = wl["metadata"]["name"]

    def held() -> dict[str, Any] | None:
        current = workload(client, namespace, name)
        return current if TYPO in check_of(current).get("message", "") else None

    current = wait_until(
        held, 90, lambda: f"the check to name the typo: {check_of(workload(client, namespace, name))}"
    )
    entry = check_of(current)
    assert entry["state"] == "Pending", entry
    assert f"did you mean {REQUIRED_TOPOLOGY_ANNOTATION}?" in entry["message"], entry
    warnings = wait_for(
        lambda: [e for e in events_of(client, namespace, wl_name) if e["reason"] == UNKNOWN_KEY_REASON],
        60,
        "the UnknownKey Warning Event",
    )
    assert warnings[0]["type"] == "Warning" and TYPO in warnings[0]["message"]
    assert not is_true(current, "Admitted") and not job_pods(client, namespace, name)

    # the same Job, spelt right: admitted whole in one UltraServer
    fixed = submit(client, namespace, queue, 4, name=unique("spelt"))
    pods = running_gang(client, namespace, fixed, 4)
    assert len({p["spec"]["nodeName"] for p in pods}) == 4
    # Decided after the typo'd one, which is still held, not admitted meanwhile.
    assert not is_true(workload(client, namespace, name), "Admitted")
