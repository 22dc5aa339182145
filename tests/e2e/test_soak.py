"""The soak's short variant: three minutes of the seeded gang stream under every kind of fault
(tests/soak/; bench/soak.py runs the same for 30), with no violation seen by the independent
observer.

It runs on a cluster of its own (state `.local/e2e-soak-<base+100>`, ports 100 above the
session's): the faults (etcd, kube-apiserver, kube-scheduler, Kueue and gangplugin killed or
stopped, kube-apiserver slowed, nodes failed) would break the tests sharing the session's
cluster, which also keeps the GenericWorkload gate off, where the soak needs it (bindMode
PodGroup). That costs one more cluster start (about 30 s) on top of the soak's time: about 7
minutes in all (docs/development.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gangplugin.localcluster.cluster import REPO, ClusterError, LocalCluster
from tests.soak.faults import KINDS
from tests.soak.run import SoakConfig, run_soak, soak_cluster, text_report
from tests.soak.slowproxy import SlowProxy
from tests.support.cluster import e2e_port_base

PORT_OFFSET = 100  # clear of the session's cluster and of test_podgroup_mode's (+50)
MINUTES = 3.0
SEED = 21


@pytest.fixture(scope="module")
def soaked() -> Iterator[tuple[LocalCluster, SlowProxy]]:
    base = e2e_port_base() + PORT_OFFSET
    try:
        with soak_cluster(REPO / ".local" / f"e2e-soak-{base}", base, SEED) as started:
            yield started
    except ClusterError as err:
        pytest.fail(f"the soak's local cluster could not be started: {err}", pytrace=False)


@pytest.mark.timeout(1500)
def test_a_short_soak_under_every_kind_of_fault_loses_nothing(soaked: tuple[LocalCluster, SlowProxy]) -> None:
    report = run_soak(*soaked, SoakConfig(MINUTES, SEED, faults=len(KINDS)))
    print(text_report(report))
    assert sum(report["faults"].values()) >= 8, report["faults"]
    assert set(report["faults"]) == set(KINDS), f"planned {KINDS}, injected {report['faults']}"
    assert report["gangs"]["run"] > 0, report["gangs"]
    assert report["violations"] == [], text_report(report)
