"""The soak's short variant: three minutes of the seeded gang stream under every kind of fault
(tests/soak/; bench/soak.py runs the same for 30), with no violation seen by the independent
observer.

It runs on a cluster of its own (state `.local/e2e-soak-<base+100>`, ports 100 above the
session's): the faults (kube-apiserver, kube-scheduler, Kueue and gangplugin killed, nodes
failed) would break the tests sharing the session's cluster, which also keeps the
GenericWorkload gate off and runs one gangplugin replica, where the soak needs the gate (bindMode
PodGroup) and two replicas (the leader and the follower are killed). That costs one more cluster
start (about 30 s) on top of the soak's time: about 7 minutes in all (docs/development.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gangplugin.localcluster.cluster import REPO, ClusterError, LocalCluster, Ports
from tests.soak.faults import KINDS
from tests.soak.run import SoakConfig, run_soak, start_second_replica, text_report
from tests.support.cluster import e2e_port_base

PORT_OFFSET = 100  # clear of the session's cluster and of test_podgroup_mode's (+50)
MINUTES = 3.0
SEED = 21


@pytest.fixture(scope="module")
def soak_cluster() -> Iterator[LocalCluster]:
    base = e2e_port_base() + PORT_OFFSET
    local = LocalCluster(REPO / ".local" / f"e2e-soak-{base}", Ports(base), generic_workload=True)
    try:
        local.up()
        start_second_replica(local)
    except ClusterError as err:
        local.down(quiet=True)
        pytest.fail(f"the soak's local cluster could not be started: {err}", pytrace=False)
    try:
        yield local
    finally:
        local.down(quiet=True)


@pytest.mark.timeout(1200)
def test_a_short_soak_under_every_kind_of_fault_loses_nothing(soak_cluster: LocalCluster) -> None:
    report = run_soak(soak_cluster, SoakConfig(MINUTES, SEED, faults=len(KINDS)))
    print(text_report(report))
    assert sum(report["faults"].values()) >= 8, report["faults"]
    assert set(report["faults"]) == set(KINDS), f"planned {KINDS}, injected {report['faults']}"
    assert report["gangs"]["run"] > 0, report["gangs"]
    assert report["violations"] == [], text_report(report)
