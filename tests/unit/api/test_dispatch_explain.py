"""Explain on a MultiKueue manager: a gang passing Kueue's MultiKueue check is a gang there too,
and its explanation carries the dispatcher's verdict on every worker (its gangplugin.io/dispatch
record), and gangctl prints them."""

from __future__ import annotations

import pytest

from gangplugin.api.proto import gangs_pb2, gangs_pb2_grpc
from gangplugin.cli.gangs import explain_text
from gangplugin.kube.client import WORKLOADS
from gangplugin.kube.resources import ADMISSION_CHECKS
from tests.support.caches import Caches, cond, explain, serving
from tests.support.dispatched import RECORD, US, dispatched
from tests.support.objects import admission_check


@pytest.fixture
def caches() -> Caches:
    c = Caches()
    c.put(ADMISSION_CHECKS, admission_check("multikueue", controller="kueue.x-k8s.io/multikueue"))
    c.put(WORKLOADS, dispatched("g", record=RECORD, nominatedClusterNames=["b"]))
    return c


def test_a_nominated_gang_shows_every_worker_s_verdict(caches: Caches) -> None:
    e = explain(caches, "g")
    assert e.gang.admission_check == "multikueue" and e.gang.phase == "Pending"
    assert e.worker == "b" and not e.evaluated
    assert [(w.name, w.chosen, w.fits, w.room) for w in e.workers] == [
        ("b", True, True, 0),
        ("a", False, False, 0),
    ]
    assert e.workers[0].domains == ["b-us1"] and e.workers[0].level == US and e.workers[0].flavor == "gb200"
    assert e.summary.splitlines() == [
        "Nominated to worker cluster b: its Kueue and gang check decide now.",
        "Dispatcher: nominated b: chosen: all 6 pods fit",
    ]
    text = explain_text(e)
    assert "Worker:    b" in text
    header, chosen, other = text.splitlines()[-3:]
    assert header.split() == ["WORKER", "CHOSEN", "FITS", "DOMAIN", "ROOM", "WHY"]
    assert chosen.split()[:5] == ["b", "yes", "yes", f"{US}=b-us1", "0"]
    assert other.split()[:5] == ["a", "no", "no", "-", "-"]


def test_an_admitted_gang_says_which_worker_runs_it(caches: Caches) -> None:
    admitted = dispatched("done", record=RECORD, clusterName="b")
    admitted["status"]["conditions"].append(cond("Admitted"))
    admitted["status"]["admissionChecks"][0].update(state="Ready", message='The workload was admitted on "b"')
    caches.put(WORKLOADS, admitted)
    e = explain(caches, "done")
    assert e.worker == "b" and e.gang.phase == "Admitted" and e.gang.bind_mode == ""
    assert e.summary.splitlines()[:2] == [
        "Admitted in worker cluster b: its pods run there.",
        'MultiKueue: The workload was admitted on "b"',
    ]


def test_a_gang_without_a_record_still_explains(caches: Caches) -> None:
    caches.put(WORKLOADS, dispatched("fresh", record=None))
    e = explain(caches, "fresh")
    assert not e.workers and e.worker == ""
    assert e.summary == "Quota is reserved on the manager; no worker cluster has room for the whole gang yet."


def test_manager_gangs_are_listed(caches: Caches) -> None:
    with serving(caches) as channel:
        listed = gangs_pb2_grpc.GangServiceStub(channel).ListGangs(gangs_pb2.ListGangsRequest(), timeout=10)
    assert [g.name for g in listed.gangs] == ["g"]
