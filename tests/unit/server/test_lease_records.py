"""Lease objects to and from the core's records: what the API server holds reads back equal."""

from __future__ import annotations

from gangplugin.core.leader import LeaseRecord
from gangplugin.kube.lease import lease_to_k8s, record_from_k8s


def test_a_written_lease_reads_back_equal() -> None:
    record = LeaseRecord("pod-a", 15.0, 1_790_000_000.123456, 1_790_000_012.5, 3)
    obj = lease_to_k8s(record, "gangplugin-system", "gangplugin", None)
    assert obj["metadata"] == {"name": "gangplugin", "namespace": "gangplugin-system"}
    assert obj["spec"]["renewTime"] == "2026-09-21T14:13:32.500000Z"
    assert obj["spec"]["leaseDurationSeconds"] == 15
    assert record_from_k8s(obj) == record


def test_an_update_keeps_the_resource_version_it_read() -> None:
    current = {"metadata": {"name": "l", "namespace": "n", "resourceVersion": "42"}, "spec": {}}
    obj = lease_to_k8s(LeaseRecord("a", 15.0, 1.0, 1.0, 0), "n", "l", current)
    assert obj["metadata"]["resourceVersion"] == "42"


def test_a_released_lease_has_an_empty_holder() -> None:
    obj = lease_to_k8s(LeaseRecord(None, 1.0, 5.0, 5.0, 2), "n", "l", None)
    assert obj["spec"]["holderIdentity"] == ""
    assert record_from_k8s(obj).holder is None


def test_a_malformed_lease_reads_as_expired_not_as_a_crash() -> None:
    obj = {"spec": {"holderIdentity": 7, "leaseDurationSeconds": "15", "renewTime": "yesterday"}}
    assert record_from_k8s(obj) == LeaseRecord(None, 0.0, None, None, 0)
    assert record_from_k8s({}) == LeaseRecord(None, 0.0, None, None, 0)
