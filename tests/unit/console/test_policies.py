"""The gang policy in plain words, the one merge patch a form sends, and the field an error names."""

from __future__ import annotations

from gangplugin.console.model import PolicyField
from gangplugin.console.policies import field_of, plain_words, policy_patch, policy_settings
from gangplugin.kube import kueue_records as rec
from tests.support.console_world import check, cluster_queue, policy


def test_settings_in_plain_words() -> None:
    words = plain_words(
        rec.gang_policy_from_k8s(
            policy(
                readyTimeout="10m",
                unscheduledTimeout="3m",
                recoveryTimeout="0s",
                admission="Sequential",
                nodeFailure="ReplaceFromSpare",
                maxReplacedNodes=2,
                sparesPerUltraServer=1,
                requeue={"backoffBaseSeconds": 30, "backoffMaxSeconds": 600, "backoffLimitCount": 3},
            )
        )
    )
    text = "\n".join(words)
    assert "Ready within 10m" in text
    assert "a node within 3m" in text
    assert "never evicted" in text
    assert "replaced from a spare of its UltraServer (at most 2 at once" in text
    assert "1 spare node per UltraServer is kept free" in text
    assert "one at a time" in text
    assert "waits 30s, 1m, 2m, 4m, ... (doubling from 30s, at most 10m, counted from its eviction)" in text
    assert "after 3 retries it is deactivated" in text


def test_settings_of_a_policy_the_controllers_cannot_use() -> None:
    bad = policy(admission="Sometimes")
    settings = policy_settings(bad, [check()], [cluster_queue()])
    assert settings.sentences == () and "spec.admission" in settings.problem
    assert settings.used_by == ("training",)
    assert settings.value(PolicyField.ADMISSION) == "Sometimes"
    assert settings.value(PolicyField.UNSCHEDULED_TIMEOUT) == ""


def test_one_patch_for_the_whole_form_conditional_on_its_version() -> None:
    form = {
        "spec.readyTimeout": "7m",
        "spec.unscheduledTimeout": "",
        "spec.sparesPerUltraServer": "2",
        "spec.maxReplacedNodes": "two",
        "spec.requeue.backoffBaseSeconds": "30",
        "spec.requeue.backoffLimitCount": "",
        "spec.admission": "Sequential",
    }
    assert policy_patch(form, "42") == {
        "metadata": {"resourceVersion": "42"},
        "spec": {
            "readyTimeout": "7m",
            "unscheduledTimeout": None,  # removed: the API server's default applies
            "sparesPerUltraServer": 2,
            "maxReplacedNodes": "two",  # as typed: the API server names the field it refuses
            "requeue": {"backoffBaseSeconds": 30, "backoffLimitCount": None},
            "admission": "Sequential",
        },
    }


def test_the_field_an_error_names() -> None:
    schema = (
        'GangPolicy.gangplugin.io "default" is invalid: spec.readyTimeout: Invalid value: "5 minutes": '
        "spec.readyTimeout in body should match '^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$'"
    )
    assert field_of(schema) is PolicyField.READY_TIMEOUT
    webhook = (
        'admission webhook "gangpolicies.gangplugin.io" denied the request: GangPolicy "default" is '
        "invalid: spec.requeue.backoffMaxSeconds: 10 is below backoffBaseSeconds 60; raise it"
    )
    assert field_of(webhook) is PolicyField.BACKOFF_MAX
    assert field_of("the server is unavailable") is None
