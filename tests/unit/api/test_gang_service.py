"""GangService over loopback gRPC: listing, phases and domains, explain with the admission
check's own decision, bad requests, and the watch stream."""

from __future__ import annotations

import threading

import grpc
import pytest

from gangplugin.api.proto import gangs_pb2, gangs_pb2_grpc
from gangplugin.kube.client import PODS, WORKLOADS
from tests.support.caches import Caches, owned, pod, serving, standard, workload

US = "topology.k8s.aws/ultraserver-id"


@pytest.fixture
def caches() -> Caches:
    c = standard()
    c.put(
        WORKLOADS,
        workload("run", 2, check="Ready", admitted=True, pinned={US: "us-1"}, message="gang admitted"),
    )
    for i in range(2):
        c.put(PODS, pod(f"run-{i}", "run", node=f"us1-{i}", ready=True))
    c.put(WORKLOADS, workload("fits", 3, message="gang does not fit now: (an older pass)"))
    c.put(WORKLOADS, workload("big", 6, message="gang does not fit now", retries=2))
    c.put(WORKLOADS, workload("queued", 2, check=None))
    c.put(WORKLOADS, workload("other", 2, queue="plain", check=None))  # not a gang: no gang check
    c.put(PODS, pod("pg-0", "pg", node="us2-0", ready=True, size=3))
    c.put(PODS, pod("pg-1", "pg", size=3))
    return c


def stub(channel: grpc.Channel) -> gangs_pb2_grpc.GangServiceStub:
    return gangs_pb2_grpc.GangServiceStub(channel)


def test_list_gangs_with_phase_ready_and_domain(caches: Caches) -> None:
    with serving(caches) as channel:
        reply = stub(channel).ListGangs(gangs_pb2.ListGangsRequest(namespace="team-a"), timeout=10)
    by_name = {g.name: g for g in reply.gangs}
    assert sorted(by_name) == ["big", "fits", "pg", "queued", "run"]
    run = by_name["run"]
    assert (run.phase, run.pods_ready, run.pods_total, run.domain_level, run.domain_value) == (
        "Running",
        2,
        2,
        US,
        "us-1",
    )
    assert (run.local_queue, run.cluster_queue, run.kind, run.age_seconds) == (
        "training",
        "training",
        "Workload",
        90,
    )
    assert by_name["fits"].phase == "Pending" and by_name["queued"].phase == "Queued"
    assert by_name["queued"].cluster_queue == "training"  # from its LocalQueue: no admission yet
    assert by_name["big"].retry_count == 2
    pg = by_name["pg"]
    assert (pg.kind, pg.phase, pg.pods_bound, pg.pods_total) == ("PodGang", "Pending", 1, 3)


def test_other_namespaces_are_filtered(caches: Caches) -> None:
    with serving(caches) as channel:
        assert not stub(channel).ListGangs(gangs_pb2.ListGangsRequest(namespace="team-b"), timeout=10).gangs
        assert len(stub(channel).ListGangs(gangs_pb2.ListGangsRequest(), timeout=10).gangs) == 5


def test_explain_uses_the_admission_decision_over_promised_capacity(caches: Caches) -> None:
    with serving(caches) as channel:
        fits = stub(channel).ExplainGang(
            gangs_pb2.ExplainGangRequest(namespace="team-a", name="fits"), timeout=10
        )
        big = stub(channel).ExplainGang(
            gangs_pb2.ExplainGangRequest(namespace="team-a", name="big"), timeout=10
        )
        run = stub(channel).ExplainGang(
            gangs_pb2.ExplainGangRequest(namespace="team-a", name="run"), timeout=10
        )
    # us-1 has 2 nodes left beside "run", us-2 3 beside pg's pod: 3 pods fit only in us-2.
    assert fits.evaluated and fits.fits_now and (fits.level, list(fits.domains)) == (US, ["us-2"])
    assert "it would fit in topology.k8s.aws/ultraserver-id=us-2" in fits.summary
    # 6 pods of 4 GPUs in one UltraServer of 4 nodes: never.
    assert big.evaluated and not big.fits_now and big.reason
    assert "Retried 2 times" in big.summary and big.summary.splitlines()[-1].startswith(
        "Now: it does not fit"
    )
    assert not run.evaluated and [(p.name, p.node, p.ready) for p in run.pods] == [
        ("run-0", "us1-0", True),
        ("run-1", "us1-1", True),
    ]
    assert run.summary.startswith(f"Running in {US}=us-1")


def test_explain_counts_capacity_promised_to_an_admitted_gang(caches: Caches) -> None:
    # 2 pods fit best in us-1 (2 nodes free) unless "run", grown to 4 pods admitted into us-1
    # with 2 not bound yet, has them promised: then us-2 is the answer.
    caches.put(WORKLOADS, workload("fits", 2))
    with serving(caches) as channel:
        e = stub(channel).ExplainGang(
            gangs_pb2.ExplainGangRequest(namespace="team-a", name="fits"), timeout=10
        )
    assert e.fits_now and list(e.domains) == ["us-1"]
    caches.put(WORKLOADS, workload("run", 4, check="Ready", admitted=True, pinned={US: "us-1"}))
    with serving(caches) as channel:
        e = stub(channel).ExplainGang(
            gangs_pb2.ExplainGangRequest(namespace="team-a", name="fits"), timeout=10
        )
    assert e.fits_now and list(e.domains) == ["us-2"]


@pytest.mark.parametrize(
    ("request_", "code", "text"),
    [
        (gangs_pb2.GetGangRequest(name="run"), grpc.StatusCode.INVALID_ARGUMENT, "namespace: is required"),
        (gangs_pb2.GetGangRequest(namespace="team-a"), grpc.StatusCode.INVALID_ARGUMENT, "name: is required"),
        (gangs_pb2.GetGangRequest(namespace="team-a", name="other"), grpc.StatusCode.NOT_FOUND, "'other'"),
        (
            gangs_pb2.GetGangRequest(namespace="team-a", name="x" * 300),
            grpc.StatusCode.INVALID_ARGUMENT,
            "name:",
        ),
    ],
)
def test_bad_requests(
    caches: Caches, request_: gangs_pb2.GetGangRequest, code: grpc.StatusCode, text: str
) -> None:
    with serving(caches) as channel:
        with pytest.raises(grpc.RpcError) as err:
            stub(channel).GetGang(request_, timeout=10)
        assert err.value.code() == code and text in (err.value.details() or "")
        assert (
            stub(channel).GetGang(gangs_pb2.GetGangRequest(namespace="team-a", name="run"), timeout=10).name
            == "run"
        )


def test_watch_streams_changes_of_one_gang(caches: Caches) -> None:
    with serving(caches) as channel:
        call = stub(channel).WatchGangs(
            gangs_pb2.WatchGangsRequest(namespace="team-a", name="pg"), timeout=20
        )
        first = next(call)
        assert (first.type, first.gang.name, first.gang.pods_bound) == ("ADDED", "pg", 1)
        # A change to another gang is not sent; the third pod bound is.
        caches.put(PODS, pod("run-0", "run", node="us1-0", ready=False))
        caches.put(PODS, pod("pg-2", "pg", node="us2-2", ready=True, size=3))
        second = next(call)
        assert (second.type, second.gang.pods_bound, second.gang.pods_total) == ("MODIFIED", 2, 3)
        for name in ("pg-0", "pg-1", "pg-2"):
            caches.delete(PODS, pod(name, "pg"))
        events = [next(call)]
        while events[-1].type != "DELETED":
            events.append(next(call))
        assert events[-1].gang.name == "pg"
        call.cancel()


def test_watch_ends_when_the_server_stops(caches: Caches) -> None:
    stop = threading.Event()
    with serving(caches, stop) as channel:
        call = stub(channel).WatchGangs(gangs_pb2.WatchGangsRequest(namespace="team-a"), timeout=20)
        assert {next(call).gang.name for _ in range(5)} == {"big", "fits", "pg", "queued", "run"}
        stop.set()
        assert list(call) == []  # the stream closes cleanly within a second


def test_gangs_carry_their_owner_and_bind_mode(caches: Caches) -> None:
    caches.put(WORKLOADS, owned(workload("job-train-1a2b3", 2)))
    with serving(caches) as channel:
        reply = stub(channel).ListGangs(gangs_pb2.ListGangsRequest(namespace="team-a"), timeout=10)
    by_name = {g.name: g for g in reply.gangs}
    job = by_name["job-train-1a2b3"]
    assert (job.owner.group, job.owner.kind, job.owner.name) == ("batch", "Job", "train")
    assert job.bind_mode == "Ungate"  # the check's GangPolicy defaults
    assert not by_name["run"].HasField("owner")
    assert by_name["pg"].bind_mode == "Extender"


def test_get_and_explain_by_the_job_that_owns_the_gang(caches: Caches) -> None:
    caches.put(WORKLOADS, owned(workload("job-train-1a2b3", 2)))
    caches.put(WORKLOADS, owned(workload("jobset-x-9f8e7", 2), "JobSet", "x", "jobset.x-k8s.io/v1alpha2"))
    with serving(caches) as channel:
        s = stub(channel)
        job = gangs_pb2.Owner(kind="job", name="train")  # the kind in any case, the group optional
        assert s.GetGang(gangs_pb2.GetGangRequest(namespace="team-a", owner=job), timeout=10).name == (
            "job-train-1a2b3"
        )
        jobset = gangs_pb2.Owner(group="jobset.x-k8s.io", kind="JobSet", name="x")
        e = s.ExplainGang(gangs_pb2.ExplainGangRequest(namespace="team-a", owner=jobset), timeout=10)
        assert e.gang.name == "jobset-x-9f8e7" and e.evaluated
        other_group = gangs_pb2.Owner(group="kubeflow.org", kind="JobSet", name="x")
        with pytest.raises(grpc.RpcError) as err:
            s.GetGang(gangs_pb2.GetGangRequest(namespace="team-a", owner=other_group), timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert "owner: JobSet.kubeflow.org 'x' owns no gang in namespace 'team-a'" in (
            err.value.details() or ""
        )


@pytest.mark.parametrize(
    ("request_", "text"),
    [
        (
            gangs_pb2.GetGangRequest(
                namespace="team-a", name="run", owner=gangs_pb2.Owner(kind="Job", name="t")
            ),
            "name: give either",
        ),
        (
            gangs_pb2.GetGangRequest(namespace="team-a", owner=gangs_pb2.Owner(name="t")),
            "owner.kind: is required",
        ),
        (
            gangs_pb2.GetGangRequest(namespace="team-a", owner=gangs_pb2.Owner(kind="Job")),
            "owner.name: is required",
        ),
    ],
)
def test_bad_owner_requests(caches: Caches, request_: gangs_pb2.GetGangRequest, text: str) -> None:
    with serving(caches) as channel, pytest.raises(grpc.RpcError) as err:
        stub(channel).GetGang(request_, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and text in (err.value.details() or "")


def test_a_job_owning_several_gangs_is_asked_for_by_name(caches: Caches) -> None:
    lws = ("LeaderWorkerSet", "vllm", "leaderworkerset.x-k8s.io/v1")
    caches.put(WORKLOADS, owned(workload("vllm-0-aaaaa", 2), *lws))
    caches.put(WORKLOADS, owned(workload("vllm-1-bbbbb", 2), *lws))
    request_ = gangs_pb2.GetGangRequest(
        namespace="team-a", owner=gangs_pb2.Owner(kind="LeaderWorkerSet", name="vllm")
    )
    with serving(caches) as channel, pytest.raises(grpc.RpcError) as err:
        stub(channel).GetGang(request_, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "owns 2 gangs (vllm-0-aaaaa, vllm-1-bbbbb)" in (err.value.details() or "")


def test_watch_by_owner_waits_for_the_workload_to_appear(caches: Caches) -> None:
    with serving(caches) as channel:
        call = stub(channel).WatchGangs(
            gangs_pb2.WatchGangsRequest(namespace="team-a", owner=gangs_pb2.Owner(kind="Job", name="train")),
            timeout=20,
        )
        caches.put(WORKLOADS, workload("unrelated", 2))  # not sent: another owner
        caches.put(WORKLOADS, owned(workload("job-train-1a2b3", 2)))
        first = next(call)
        assert (first.type, first.gang.name, first.gang.owner.name) == ("ADDED", "job-train-1a2b3", "train")
        caches.delete(WORKLOADS, owned(workload("job-train-1a2b3", 2)))
        assert next(call).type == "DELETED"
        call.cancel()
