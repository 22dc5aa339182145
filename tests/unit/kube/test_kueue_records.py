"""GangPolicy objects and Workload fields as the admission controller reads them."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from gangplugin.core.errors import InputError
from gangplugin.kube.kueue_records import (
    check_state,
    flavor_selector,
    gang_policy_from_k8s,
    max_runtime,
    node_ready_since,
    plan_or_none,
    policy_name_of_check,
    quota_of,
    requeue_at,
)
from tests.support.objects import admission_check, gang_policy

policy = partial(gang_policy, "p")


def test_full_policy() -> None:
    p = gang_policy_from_k8s(
        policy(
            readyTimeout="10m",
            unscheduledTimeout="90s",
            recoveryTimeout="0s",
            admission="Sequential",
            requeue={
                "timestamp": "Creation",
                "backoffBaseSeconds": 5,
                "backoffMaxSeconds": 40,
                "backoffLimitCount": 2,
            },
            topologyName="hyperpod",
            sparesPerUltraServer=1,
            nodeFailure="ReplaceFromSpare",
            maxReplacedNodes=2,
            bindMode="Extender",
        )
    )
    assert p.max_replaced_nodes == 2 and gang_policy_from_k8s(policy()).max_replaced_nodes is None
    assert p.bind_mode == "Extender" and gang_policy_from_k8s(policy()).bind_mode == "Ungate"
    assert gang_policy_from_k8s(policy(bindMode="PodGroup")).bind_mode == "PodGroup"
    assert (p.ready_timeout, p.unscheduled_timeout, p.recovery_timeout) == (600.0, 90.0, 0.0)
    assert p.sequential and p.node_failure == "ReplaceFromSpare" and p.topology_name == "hyperpod"
    assert (p.requeue.timestamp, p.requeue.backoff_base_seconds, p.requeue.backoff_limit_count) == (
        "Creation",
        5,
        2,
    )
    assert p.placement.spares_per_ultraserver == 1


def test_recovery_defaults_to_ready_timeout() -> None:
    p = gang_policy_from_k8s(policy(readyTimeout="2m"))
    assert p.recovery_timeout == 120.0 and p.unscheduled_timeout is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"readyTimeout": "-5m"}, "spec.readyTimeout"),
        ({"readyTimeout": "soon"}, "spec.readyTimeout"),
        ({"recoveryTimeout": "-1s"}, "spec.recoveryTimeout"),
        ({"requeue": {"backoffBaseSeconds": 100, "backoffMaxSeconds": 10}}, "spec.requeue.backoffMaxSeconds"),
        ({"requeue": {"backoffLimitCount": "three"}}, "spec.requeue.backoffLimitCount"),
        ({"requeue": "fast"}, "spec.requeue"),
        ({"sparesPerUltraServer": -1}, "spec.sparesPerUltraServer"),
        ({"maxReplacedNodes": -1}, "spec.maxReplacedNodes"),
        ({"maxReplacedNodes": "two"}, "spec.maxReplacedNodes"),
        ({"bindMode": "Barrier"}, "spec.bindMode"),
    ],
)
def test_bad_policy_names_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        gang_policy_from_k8s(policy(**spec))
    assert err.value.field == field


def test_check_parameters() -> None:
    assert policy_name_of_check(admission_check("gang", policy="seq")) == "seq"
    assert policy_name_of_check({"spec": {"controllerName": "gangplugin.io/gang"}}) is None
    with pytest.raises(InputError) as err:
        policy_name_of_check({"spec": {"parameters": {"apiGroup": "x", "kind": "Y", "name": "z"}}})
    assert err.value.field == "spec.parameters"


def test_workload_fields() -> None:
    wl = {
        "status": {
            "admissionChecks": [{"name": "gang", "state": "Pending", "message": "m"}],
            "admission": {
                "podSetAssignments": [
                    {"name": "main", "flavors": {"nvidia.com/gpu": "gb200", "cpu": "gb200"}}
                ]
            },
        }
    }
    assert check_state(wl, "gang") == {"name": "gang", "state": "Pending", "message": "m"}
    assert check_state(wl, "other") is None
    flavors = {"gb200": {"spec": {"nodeLabels": {"node.kubernetes.io/instance-type": "gb200"}}}}
    assert flavor_selector(wl, flavors) == {"main": {"node.kubernetes.io/instance-type": "gb200"}}


def test_node_readiness() -> None:
    node = {
        "status": {
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:10Z"}]
        }
    }
    ready, since = node_ready_since(node)
    assert not ready and since == 1767225610.0
    assert node_ready_since({"status": {}}) == (False, None)


def _podsets(*annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "spec": {
            "podSets": [
                {"name": f"ps{i}", "count": 1, "template": {"metadata": {"annotations": a}}}
                for i, a in enumerate(annotations)
            ]
        }
    }


def test_max_runtime_is_the_longest_podset() -> None:
    assert max_runtime(_podsets({}, {})) is None
    wl = _podsets({"gangplugin.io/max-runtime": "90m"}, {}, {"gangplugin.io/max-runtime": "2h"})
    assert max_runtime(wl) == timedelta(hours=2)


@pytest.mark.parametrize("value", ["soon", "0s", "-5m"])
def test_bad_max_runtime_names_the_annotation(value: str) -> None:
    with pytest.raises(InputError) as err:
        max_runtime(_podsets({}, {"gangplugin.io/max-runtime": value}))
    assert err.value.field == "spec.podSets[1].template.metadata.annotations[gangplugin.io/max-runtime]"


def test_quota_of_reads_kueues_admission() -> None:
    assert quota_of({}) == ("", set())
    wl = {
        "status": {
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": "a", "flavors": {"cpu": "default", "nvidia.com/gpu": "p5"}},
                    {"name": "b", "flavors": {"nvidia.com/gpu": "p5"}},
                ],
            }
        }
    }
    assert quota_of(wl) == ("cq", {"default", "p5"})


def test_unparsable_plan_is_none_in_the_cache() -> None:
    assert plan_or_none({"apiVersion": "gangplugin.io/v1alpha1", "kind": "TrainingPlan", "spec": {}}) is None


def test_gang_policy_preemption_is_parsed_and_checked() -> None:
    assert gang_policy_from_k8s(policy()).preemption == "ClusterQueue"
    assert gang_policy_from_k8s(policy(preemption="Never")).preemption == "Never"
    with pytest.raises(InputError, match="ClusterQueue, Never") as err:
        gang_policy_from_k8s(policy(preemption="Sometimes"))
    assert err.value.field == "spec.preemption"


def test_gang_policy_reservation_is_off_unless_asked_and_parsed_when_asked() -> None:
    from gangplugin.core.policy import ReservationPolicy

    assert gang_policy_from_k8s(policy()).reservation == ReservationPolicy() and not ReservationPolicy().on
    asked = {
        "afterWaiting": "10m",
        "level": "topology.k8s.aws/ultraserver-id",
        "maxCheckpointableEvictions": 3,
    }
    got = gang_policy_from_k8s(policy(reservation=asked)).reservation
    assert got == ReservationPolicy(600.0, "topology.k8s.aws/ultraserver-id", 3) and got.on
    assert gang_policy_from_k8s(policy(reservation={"afterWaiting": "0s"})).reservation.after_waiting == 0.0
    with pytest.raises(InputError, match="not a whole number") as err:
        gang_policy_from_k8s(policy(reservation={"afterWaiting": "1m", "maxCheckpointableEvictions": "2"}))
    assert err.value.field == "spec.reservation.maxCheckpointableEvictions"


def test_reservation_round_trips() -> None:
    from gangplugin.core.names import RESERVATION_ANNOTATION
    from gangplugin.core.reservation import Reservation
    from gangplugin.kube.kueue_records import reservation_annotation, reservation_from_k8s

    taken = Reservation("topology.k8s.aws/ultraserver-id", "us-2", 10.0, 20.0)
    wl = {"metadata": {"annotations": {RESERVATION_ANNOTATION: reservation_annotation(taken)}}}
    assert reservation_from_k8s(wl) == taken and taken.live(10.0) and not taken.live(11.0)
    assert reservation_from_k8s({"metadata": {}}) is None


def test_cluster_queue_state_reads_kueue_preemption_cohort_and_borrowing() -> None:
    from gangplugin.kube.kueue_records import cluster_queue_state

    cq = {
        "metadata": {"name": "team-b"},
        "spec": {
            "cohortName": "org",
            "preemption": {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
            },
        },
        "status": {
            "flavorsReservation": [{"name": "gb200", "resources": [{"name": "gpu", "borrowed": "32"}]}]
        },
    }
    s = cluster_queue_state(cq)
    assert (s.name, s.cohort, s.borrowing) == ("team-b", "org", True)
    assert (s.preemption.within_cluster_queue, s.preemption.reclaim_within_cohort) == ("LowerPriority", "Any")
    assert (s.preemption.borrow_within_cohort, s.preemption.max_priority_threshold) == ("LowerPriority", 100)
    assert not cluster_queue_state({"metadata": {"name": "x"}}).borrowing


def test_preemption_hold_round_trips_and_a_bad_one_holds_nothing() -> None:
    from gangplugin.core.names import PREEMPTION_ANNOTATION
    from gangplugin.core.preemption import Hold
    from gangplugin.kube.kueue_records import hold_annotation, hold_from_k8s

    hold = Hold("topology.k8s.aws/ultraserver-id", "us-3", (), ("ns/a", "ns/b"), 10.0, 20.0)
    wl = {"metadata": {"annotations": {PREEMPTION_ANNOTATION: hold_annotation(hold)}}}
    assert hold_from_k8s(wl) == hold
    assert hold_from_k8s({"metadata": {"annotations": {PREEMPTION_ANNOTATION: "{bad"}}}) is None
    assert hold.live(10.0, 25.0, 300) and not hold.live(11.0, 25.0, 300) and not hold.live(10.0, 400.0, 300)


def test_requeue_at_is_kueues_requeue_state_or_none() -> None:
    def wl(state: dict[str, Any] | None) -> dict[str, Any]:
        return {"status": {} if state is None else {"requeueState": state}}

    assert requeue_at(wl({"requeueAt": "2026-12-01T10:00:00Z"})) == 1796119200.0
    assert requeue_at(wl({"count": 2})) is None  # Kueue's own count, no time: nothing to wait for
    assert requeue_at(wl(None)) is None
    assert requeue_at({}) is None
    assert requeue_at(wl({"requeueAt": "soon"})) is None
