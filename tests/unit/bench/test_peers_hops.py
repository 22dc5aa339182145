"""bench/peers.py's hop timing of Kueue gangs, from plain Workload events: which hop each event
passes, whose write each event is, and the medians over the gangs that ran."""

from _peers.hops import (
    HOPS,
    WorkloadSeen,
    admitted_without_pods,
    median_writes,
    see_workload,
    summary,
    writer,
)


def _wl(conditions=(), checks=(), managers=()):
    return {
        "metadata": {
            "name": "job-g-1",
            "managedFields": [
                {"manager": m, "operation": op, "subresource": sub, "time": t, "fieldsV1": {"f": t}}
                for m, op, sub, t in managers
            ],
        },
        "status": {
            "conditions": [{"type": c, "status": "True"} for c in conditions],
            "admissionChecks": [{"name": n, "state": s} for n, s in checks],
        },
    }


def test_each_hop_is_when_the_watch_first_saw_it_and_each_write_names_its_writer():
    seen = WorkloadSeen()
    created = ("kueue", "Update", "", "t1")
    see_workload(seen, _wl(managers=[created]), 1.0)
    listed = ("kueue", "Update", "status", "t2")
    see_workload(seen, _wl(checks=[("gang", "Pending")], managers=[created, listed]), 2.0)
    reserved = ("kueue-admission", "Apply", "status", "t3")
    see_workload(
        seen,
        _wl(["QuotaReserved"], [("gang", "Pending")], [created, listed, reserved]),
        3.0,
    )
    ours = ("gangplugin-admission", "Apply", "status", "t4")
    see_workload(
        seen,
        _wl(["QuotaReserved"], [("gang", "Ready")], [created, listed, reserved, ours]),
        4.5,
    )
    admitted = ("kueue-admission", "Apply", "status", "t5")
    see_workload(
        seen,
        _wl(["QuotaReserved", "Admitted"], [("gang", "Ready")], [created, listed, ours, admitted]),
        5.0,
    )
    # after admission: counted apart (the writes until Admitted are what a gang waits for; those
    # after wake Kueue's job reconciler, which still owes it PodsReady and the unsuspend)
    later = [("kueue", "Update", "", "t9")]
    see_workload(seen, _wl(["QuotaReserved", "Admitted"], [("gang", "Ready")], later), 9.0)
    assert seen.at == {
        "Workload created": 1.0,
        "check listed": 2.0,
        "quota reserved": 3.0,
        "check Ready": 4.5,
        "Admitted": 5.0,
    }
    assert seen.writes == {"kueue": 2, "kueue-admission": 2, "gangplugin-admission": 1}
    assert seen.after == {"kueue": 1}
    assert median_writes({"g": seen}, ["g"], after=True) == {"all": 1, "kueue": 1}


def test_kueue_s_pods_ready_write_is_a_hop_of_its_own_between_admitted_and_unsuspended():
    """With waitForPodsReady on, Kueue unsuspends a Job only in a reconcile after the one that
    wrote PodsReady: the hop names that wait (issue 32's traced burst: most of Admitted ->
    unsuspended)."""
    seen = WorkloadSeen()
    admitted = _wl(["QuotaReserved", "Admitted"], managers=[("kueue-admission", "Apply", "status", "t1")])
    see_workload(seen, admitted, 1.0)
    pods_ready = {"type": "PodsReady", "status": "False", "reason": "WaitForStart"}
    admitted["status"]["conditions"].append(pods_ready)
    see_workload(seen, admitted, 1.25)
    see_workload(seen, admitted, 2.0)  # written once: the first time seen is the hop
    assert seen.at["PodsReady written"] == 1.25
    assert HOPS.index("Admitted") < HOPS.index("PodsReady written") < HOPS.index("unsuspended")
    at = {"submitted": 0.0, **seen.at, "unsuspended": 1.5, "last pod Running": 3.0}
    assert summary({"g": at}, {"g": 1})["step"]["unsuspended"] == 0.25


def test_a_write_that_changed_no_managed_field_entry_has_an_unknown_writer():
    same = {("kueue", "Update/status"): "t1 {}"}
    assert writer(same, same) == "?"
    assert writer({}, {**same, ("b", "Apply/status"): "t2"}) == "b+kueue"


def test_the_summary_counts_only_gangs_that_ran_and_steps_from_the_hop_before():
    ran = {"submitted": 0.0, "Workload created": 0.5, "Admitted": 2.0, "last pod Running": 5.0}
    other = {"submitted": 1.0, "Workload created": 1.5, "Admitted": 4.0, "last pod Running": 7.0}
    waiting = {"submitted": 0.0, "Workload created": 9.0}
    out = summary({"a": ran, "b": other, "c": waiting}, {"a": 8, "b": 16, "c": 8})
    assert out["gangs"] == 2
    assert out["since submission"] == {
        "submitted": 0.0,
        "Workload created": 0.5,
        "Admitted": 2.5,
        "last pod Running": 5.5,
    }
    assert out["step"] == {"Workload created": 0.5, "Admitted": 2.0, "last pod Running": 3.0}
    assert out["by size"]["16"]["Admitted"] == 3.0 and "8" in out["by size"]
    assert list(out["since submission"]) == [h for h in HOPS if h in out["since submission"]]


def test_writes_count_the_admitted_gangs_only_and_a_gang_whose_workload_was_never_seen_is_none():
    admitted = WorkloadSeen()
    see_workload(admitted, _wl(managers=[("kueue", "Update", "", "t1")]), 1.0)
    see_workload(
        admitted,
        _wl(
            ["QuotaReserved", "Admitted"],
            managers=[("kueue", "Update", "", "t1"), ("kueue", "Apply", "status", "t2")],
        ),
        2.0,
    )
    waiting = WorkloadSeen()
    see_workload(waiting, _wl(managers=[("kueue", "Update", "", "t1")]), 1.0)
    got = median_writes({"a": admitted, "w": waiting}, ["a", "w", "never-made"])
    assert got["all"] == sum(admitted.writes.values()) and got["all"] >= 1
    assert median_writes({"w": waiting}, ["w", "never-made"]) == {}


def test_a_burst_is_not_settled_while_an_admitted_gang_has_no_pod():
    seen = {g: WorkloadSeen() for g in ("waiting", "owed", "started", "evicted")}
    see_workload(seen["waiting"], _wl(["QuotaReserved"], [("gang", "Pending")]), 1.0)
    for g in ("owed", "started", "evicted"):
        see_workload(seen[g], _wl(["QuotaReserved", "Admitted"], [("gang", "Ready")]), 2.0)
    see_workload(seen["evicted"], _wl([], [("gang", "Pending")]), 3.0)  # evicted, requeued
    assert admitted_without_pods(seen, created={"started"}) == ["owed"]
    assert seen["evicted"].at["Admitted"] == 2.0  # the hop stays when it was first seen
