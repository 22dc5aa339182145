"""The soak's observer (tests/soak/observer.py) on plain objects: each check fires on the state
it names and stays quiet on the legitimate look-alike; and the observer imports nothing of
gangplugin, so what it reports does not depend on the code it checks."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.soak import observer as obs
from tests.soak.observer import Observer, Window
from tests.support import objects

SOAK = Path(__file__).resolve().parents[1] / "soak"
T0 = 1_800_000_000.0  # whole seconds, as the API's timestamps
US = obs.ULTRASERVER


def ts(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the import rule ----------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            out.add("__import__")
    return out


@pytest.mark.parametrize("module", ["observer.py", "apiwatch.py"])
def test_the_observer_imports_nothing_of_gangplugin(module: str) -> None:
    imported = _imports(SOAK / module)
    ours = {m for m in imported if m.split(".")[0] in ("gangplugin", "tests", "bench", "__import__")}
    # apiwatch may use the observer, nothing else of the project (which would bring gangplugin)
    assert ours <= {"tests.soak.observer"}, f"{module} imports {sorted(ours)}"
    third_party = {m.split(".")[0] for m in imported - ours} - {"__future__"}

    assert third_party <= set(sys.stdlib_module_names) | {"httpx", "yaml"}, sorted(third_party)


# -- objects ------------------------------------------------------------------------------------


def node(name: str, us: str = "us-1", gpus: int = 4, ready: bool = True, **spec: Any) -> dict[str, Any]:
    return objects.node(name, us, gpus=gpus, memory="1700Gi", ready=ready, **spec)


def pod(
    name: str,
    gang: str | None = "wl",
    node_name: str | None = None,
    bound: float | None = None,
    ready: bool = False,
    gpus: int = 4,
    created: float = T0,
    mode: str = "Ungate",
    **spec: Any,
) -> dict[str, Any]:
    conds = []
    if node_name:
        conds.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(bound or created)})
        conds.append(
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastTransitionTime": ts(bound or created),
            }
        )
    requests = {"cpu": "1", "memory": "1Gi", obs.GPU: gpus}
    labels = {obs.BIND_MODE_LABEL: mode} if gang else {}
    p = objects.pod(
        name,
        gang=gang,
        node=node_name,
        requests=requests,
        conditions=conds,
        labels=labels,
        creationTimestamp=ts(created),
    )
    p["spec"].update(spec)
    return p


def workload(
    name: str = "wl",
    size: int = 4,
    state: str = "Ready",
    at: float = T0,
    us: str | None = "us-1",
    message: str = "gang admitted",
    **meta: Any,
) -> dict[str, Any]:
    check = objects.check_state(
        "gang", state, pinned={US: us} if us else {}, message=message, lastTransitionTime=ts(at)
    )
    return objects.workload(
        name,
        "ns",
        objects.podset(size),
        conditions=[objects.condition("QuotaReserved", lastTransitionTime=ts(at))],
        checks=[check],
        creationTimestamp=ts(at - 5),
        **meta,
    )


def cluster(o: Observer, nodes: int = 4, us: str = "us-1") -> None:
    for i in range(nodes):
        o.update("nodes", f"n{i}", node(f"n{i}", us), T0 - 100)


def checks(o: Observer) -> list[str]:
    return [v.check for v in o.violations]


# -- partly bound -------------------------------------------------------------------------------


def bind(o: Observer, times: list[float], size: int = 4) -> None:
    o.update("workloads", "ns/wl", workload(size=size), T0)
    for i in range(size):
        o.update("pods", f"ns/p{i}", pod(f"p{i}"), T0 + 0.5)
    for i, t in enumerate(times):
        o.update("pods", f"ns/p{i}", pod(f"p{i}", node_name=f"n{i}", bound=t), t + 0.2)


def test_a_gang_that_stops_being_bound_for_more_than_five_seconds_is_partly_bound() -> None:
    o = Observer()
    cluster(o)
    bind(o, [T0 + 1, T0 + 2, T0 + 3, T0 + 10])
    (v,) = o.violations
    assert v.check == "partly-bound" and v.subject == "ns/wl" and "no pod bound for 7s" in v.message
    assert {e.get("pod") for e in v.evidence if "pod" in e} == {f"ns/p{i}" for i in range(4)}


def test_a_gang_bound_steadily_is_fine_however_long_its_release_takes() -> None:
    o = Observer()
    cluster(o, 8)
    bind(o, [T0 + 1 + 4 * i for i in range(8)], size=8)  # 28 s in all, a pod every 4 s
    assert o.violations == []
    assert o.summary()["releaseSeconds"]["max"] == 28


def test_a_partly_bound_gang_still_partly_bound_at_the_end_is_reported() -> None:
    o = Observer()
    cluster(o)
    bind(o, [T0 + 1, T0 + 2])
    assert o.violations == []
    o.finish(T0 + 20)
    assert checks(o) == ["partly-bound"]


def test_time_kube_scheduler_was_down_and_its_backoff_after_are_excused() -> None:
    o = Observer()
    cluster(o)
    o.fault(Window(1, "restart-scheduler", obs.BINDING, T0 + 2, T0 + 4))
    # no pod bound over 3..17: 3..14 excused (down 2..4 and the 10 s backoff); 3 s remain
    bind(o, [T0 + 1, T0 + 2, T0 + 3, T0 + 17])
    assert o.violations == []


def test_a_node_fault_excuses_only_gangs_whose_domain_it_hits() -> None:
    o = Observer()
    cluster(o)
    o.update("nodes", "far", node("far", "us-2"), T0 - 100)
    o.fault(Window(1, "cordon", obs.NODES, T0 + 2, T0 + 4, nodes=("far",)))
    bind(o, [T0 + 1, T0 + 2, T0 + 3, T0 + 17])
    assert checks(o) == ["partly-bound"]
    assert not any("fault" in e for e in o.violations[0].evidence)


def test_a_gang_partly_bound_after_it_was_whole_is_recovering_not_partly_bound() -> None:
    o = Observer()
    cluster(o)
    bind(o, [T0 + 1, T0 + 1, T0 + 1, T0 + 1])
    o.update("pods", "ns/p0", None, T0 + 10)
    o.update("pods", "ns/p9", pod("p9", created=T0 + 10), T0 + 10)
    o.finish(T0 + 60)
    assert o.violations == []


def test_a_partly_bound_gang_evicted_ends_its_interval_at_the_eviction() -> None:
    o = Observer()
    cluster(o)
    bind(o, [T0 + 1, T0 + 2])
    wl = workload()
    wl["status"]["conditions"].append(
        {
            "type": "Evicted",
            "status": "True",
            "reason": "AdmissionCheck",
            "message": "requeued",
            "lastTransitionTime": ts(T0 + 4),
        }
    )
    o.update("workloads", "ns/wl", wl, T0 + 30)
    o.finish(T0 + 60)
    assert o.violations == []  # 1 .. 4: 3 s


# -- node over-committed ------------------------------------------------------------------------


def test_a_node_over_committed_for_two_seconds_is_reported_once() -> None:
    o = Observer()
    cluster(o, 1)
    o.update("pods", "ns/a", pod("a", None, "n0", T0), T0)
    o.update("pods", "ns/b", pod("b", None, "n0", T0), T0)
    o.tick(T0 + 1)
    assert o.violations == []
    o.tick(T0 + 3)
    o.tick(T0 + 5)
    (v,) = o.violations
    assert v.check == "node-overcommitted" and "nvidia.com/gpu 8 > 4" in v.message


def test_a_terminated_pod_does_not_hold_its_node() -> None:
    o = Observer()
    cluster(o, 1)
    done = pod("a", None, "n0", T0)
    done["status"]["phase"] = "Failed"
    o.update("pods", "ns/a", done, T0)
    o.update("pods", "ns/b", pod("b", None, "n0", T0), T0)
    o.tick(T0 + 1)
    o.tick(T0 + 5)
    assert o.violations == []


# -- stuck --------------------------------------------------------------------------------------


def test_an_admitted_gang_not_running_for_two_minutes_is_stuck() -> None:
    o = Observer()
    cluster(o)
    o.update("workloads", "ns/wl", workload(), T0)
    for t in range(0, 125, 2):
        o.tick(T0 + t)
    assert checks(o) == ["stuck-gang"]


def test_a_waiting_gang_with_a_reason_is_not_stuck_and_outages_do_not_count() -> None:
    o = Observer()
    cluster(o)
    o.update("workloads", "ns/wl", workload(state="Pending", message="gang does not fit now: ..."), T0)
    o.update("workloads", "ns/w2", workload("w2"), T0)
    o.fault(Window(1, "restart-apiserver", obs.ALL, T0 + 10, T0 + 60))
    for t in range(0, 125, 2):
        o.tick(T0 + t)
    assert o.violations == []  # w2: only 2 + 58 s of its 124 counted


# -- admitted twice -----------------------------------------------------------------------------


def test_a_gang_moved_to_another_domain_within_one_admission_is_admitted_twice() -> None:
    o = Observer()
    cluster(o)
    o.update("workloads", "ns/wl", workload(us="us-1"), T0)
    o.update("workloads", "ns/wl", workload(us="us-2"), T0 + 1)
    assert checks(o) == ["admitted-twice"]


def test_a_requeued_gang_admitted_again_elsewhere_is_fine() -> None:
    o = Observer()
    cluster(o)
    o.update("workloads", "ns/wl", workload(us="us-1"), T0)
    o.update("workloads", "ns/wl", workload(state="Pending", us=None, message="requeued"), T0 + 5)
    o.update("workloads", "ns/wl", workload(us="us-2", at=T0 + 10), T0 + 10)
    assert o.violations == []
    assert o.gangs["ns/wl"].admissions[-1].number == 2


def test_more_pods_bound_than_the_gang_has_is_admitted_twice() -> None:
    o = Observer()
    cluster(o, 6)
    o.update("workloads", "ns/wl", workload(size=2), T0)
    for i in range(3):
        o.update("pods", f"ns/p{i}", pod(f"p{i}", node_name=f"n{i}", bound=T0 + 1), T0 + 1)
    o.tick(T0 + 2)
    o.tick(T0 + 4)
    assert "admitted-twice" in checks(o)


# -- promised capacity --------------------------------------------------------------------------


def test_an_ultraserver_promised_more_than_its_usable_nodes_is_reported() -> None:
    o = Observer()
    cluster(o, 6)
    o.update("nodes", "n5", node("n5", ready=False), T0 - 50)  # NotReady long before
    o.update("workloads", "ns/a", workload("a", size=3), T0)
    o.update("workloads", "ns/b", workload("b", size=3, at=T0 + 1), T0 + 1)
    o.tick(T0 + 10)
    (v,) = o.violations
    assert v.check == "overpromised-ultraserver" and "24 GPUs" in v.message and "20" in v.message


def test_a_node_that_failed_just_before_the_admission_still_counts_as_usable() -> None:
    o = Observer()
    cluster(o, 6)
    o.update("nodes", "n5", node("n5", ready=False), T0 - 2)
    o.update("workloads", "ns/a", workload("a", size=3), T0)
    o.update("workloads", "ns/b", workload("b", size=3, at=T0 + 1), T0 + 1)
    o.tick(T0 + 10)
    assert o.violations == []


def test_plain_pods_bound_before_the_admission_count_against_it() -> None:
    o = Observer()
    cluster(o, 4)
    o.update("pods", "ns/plain", pod("plain", None, "n0", T0 - 30), T0 - 30)
    o.update("workloads", "ns/a", workload("a", size=4), T0)
    o.tick(T0 + 10)
    assert checks(o) == ["overpromised-ultraserver"]


# -- after the drain ----------------------------------------------------------------------------


def test_an_admitted_gang_still_holding_a_preemption_hold_is_left_behind() -> None:
    o = Observer()
    cluster(o)
    o.update("workloads", "ns/wl", workload(annotations={obs.PREEMPTION_ANNOTATION: "{}"}), T0)
    o.update("pods", "ns/gated", pod("gated", schedulingGates=[{"name": obs.PLACEMENT_GATE}]), T0)
    o.check_drained(T0 + 100)
    assert sorted(v.subject for v in o.violations) == ["ns/gated", "ns/wl"]
    assert set(checks(o)) == {"left-behind"}


def test_a_passed_backoff_on_an_admitted_gang_is_left_behind_a_future_one_is_not() -> None:
    o = Observer()
    cluster(o)
    o.update(
        "workloads", "ns/old", workload("old", annotations={obs.BACKOFF_UNTIL_ANNOTATION: ts(T0 - 10)}), T0
    )
    o.update(
        "workloads", "ns/new", workload("new", annotations={obs.BACKOFF_UNTIL_ANNOTATION: ts(T0 + 500)}), T0
    )
    o.check_drained(T0 + 100)
    assert [v.subject for v in o.violations] == ["ns/old"]


def test_everything_deleted_leaves_nothing() -> None:
    o = Observer(namespaces={"ns"})
    cluster(o)
    o.update("pods", "ns/stray", pod("stray"), T0)
    cq = {
        "metadata": {"name": "cq", "annotations": {obs.PLAN_QUOTA_ANNOTATION: '{"p5/nvidia.com/gpu": "0"}'}}
    }
    emptied = {"metadata": {"name": "cq2", "annotations": {obs.PLAN_QUOTA_ANNOTATION: "{}"}}}
    o.check_cleaned(
        T0,
        podgroups=[{"metadata": {"name": "wl", "namespace": "ns"}}],
        cluster_queues=[cq, emptied],
        plans=[],
    )
    assert sorted(v.subject for v in o.violations) == ["cq", "ns/stray", "ns/wl"]


# -- memory -------------------------------------------------------------------------------------


def test_rss_that_keeps_climbing_is_reported_a_plateau_is_not() -> None:
    o = Observer()
    for i in range(100):
        t = T0 + 10 * i
        o.rss("leaky", 1, 200 * 2**20 + 2 * i * 2**20, t)
        o.rss("level", 2, 200 * 2**20 + min(i, 10) * 2**20, t)
    o.finish(T0 + 1000)
    assert [v.subject for v in o.violations] == ["leaky (pid 1)"]


def test_quantities() -> None:
    assert obs.quantity("500m") == 0.5
    assert obs.quantity("64Gi") == 64 * 2**30
    assert obs.quantity("4") == 4
    assert obs.quantity("1.5k") == 1500


def test_a_gang_kueue_has_not_tried_yet_is_queued_only_behind_an_older_waiting_gang() -> None:
    o = Observer()
    cluster(o)

    def untried(name: str, created: float) -> dict[str, Any]:
        wl = workload(name, state="Pending", message="")
        wl["status"]["conditions"] = []
        wl["metadata"]["creationTimestamp"] = ts(created)
        wl["spec"]["queueName"] = "q"
        return wl

    o.update("workloads", "ns/old", untried("old", T0 - 10), T0)
    o.update("workloads", "ns/new", untried("new", T0), T0)
    for t in range(0, 125, 2):
        o.tick(T0 + t)
    assert [v.subject for v in o.violations] == ["ns/old"]  # nothing ahead of it, nothing said
