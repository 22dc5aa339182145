"""bench/peers.py's figures from plain data: quality after the burst, partial gangs, start
times, the binding rate, the workload drawn from the Kalos trace, and the table's ratios."""

import math

from _peers import report
from _peers.figures import (
    NodeView,
    PodView,
    binding_rate,
    by_size,
    partial_gangs,
    percentile,
    quality,
    same_domains,
    start_times,
)
from _peers.workload import Gang, burst, gang, kalos_sizes, slice_size, stream


def ultraservers(count: int, per: int = 4) -> list[NodeView]:
    return [NodeView(f"us{u}-n{i}", f"us-{u}", 4) for u in range(count) for i in range(per)]


def pods(name: str, nodes: list[str | None]) -> list[PodView]:
    return [PodView(name, i, node, 4) for i, node in enumerate(nodes)]


def test_a_gang_split_over_two_ultraservers_is_not_in_its_domain():
    nodes = ultraservers(2)
    gangs = [Gang("a", 2), Gang("b", 2), Gang("c", 4, slice_size=2)]
    placed = [
        *pods("a", ["us0-n0", "us0-n1"]),
        *pods("b", ["us0-n2", "us1-n0"]),  # split
        *pods("c", ["us0-n3", "us1-n1", "us1-n2", "us1-n3"]),  # slice 0 split, slice 1 whole
    ]
    q = quality(nodes, placed, gangs)
    assert (q.gangs_placed, q.in_domain) == (3, 1)
    assert q.in_domain_share == 1 / 3


def test_fragmented_stranded_and_largest_for_the_first_waiting_gang():
    nodes = ultraservers(3)
    gangs = [Gang("a", 3), Gang("b", 1), Gang("wait", 3), Gang("later", 1)]
    placed = [*pods("a", ["us0-n0", "us0-n1", "us0-n2"]), *pods("b", ["us1-n0"]), *pods("wait", [None] * 3)]
    q = quality(nodes, placed, gangs)
    # us-0 has 1 free node and us-1 3 (both partly used); us-2 is empty
    assert q.fragmented_ultraservers == 2
    # "wait" needs 3 nodes of one UltraServer: us-0's 4 free GPUs are too few for it
    assert q.reference == "wait" and q.stranded_gpus == 4
    assert q.largest_whole == 4 and q.gangs_placed == 2


def test_with_nothing_waiting_stranded_is_counted_for_an_18_pod_gang():
    nodes = ultraservers(2, per=18)
    q = quality(nodes, pods("a", ["us0-n0"]), [Gang("a", 1)])
    assert q.reference == "an 18-pod gang"
    assert q.stranded_gpus == 17 * 4  # us-0 has 17 free nodes, us-1 its 18
    assert q.largest_whole == 18


def test_a_node_that_cannot_be_used_holds_no_free_gpus():
    nodes = [NodeView("n0", "us-0", 4, usable=False), NodeView("n1", "us-0", 4)]
    q = quality(nodes, [], [Gang("x", 2)])
    assert q.stranded_gpus == 4 and q.largest_whole == 1 and q.fragmented_ultraservers == 0


def test_partial_gangs_are_those_bound_piecemeal_for_more_than_five_seconds():
    sizes = {"whole": 3, "slow": 3, "stuck": 3, "none": 2}
    bound = {
        "whole": {0: 10.0, 1: 12.0, 2: 14.9},  # 4.9 s from first to last bind: not partial
        "slow": {0: 10.0, 1: 16.0, 2: 16.0},
        "stuck": {0: 10.0, 1: 11.0},  # one pod never bound: partial until the end
    }
    assert partial_gangs(sizes, bound, end=30.0) == {"slow": 6.0, "stuck": 20.0}


def test_start_times_only_of_gangs_running_whole_and_grouped_by_size():
    gangs = [Gang("a", 2), Gang("b", 2), Gang("c", 1)]
    running = {"a": {0: 5.0, 1: 7.0}, "b": {0: 6.0}, "c": {0: 3.0}}
    starts = start_times(gangs, {"a": 1.0, "b": 1.0, "c": 2.0}, running)
    assert starts == {"a": 6.0, "c": 1.0}
    assert by_size(gangs, starts) == {1: [1.0], 2: [6.0]}
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0 and math.isnan(percentile([], 95))


def test_binding_rate_runs_from_the_first_submission_to_the_last_bind():
    assert binding_rate([10.0, 11.0], [12.0, 13.0, 14.0, 20.0]) == 4 / 10
    assert binding_rate([10.0], []) == 0.0


def test_same_domains_counts_gangs_in_exactly_the_predicted_ultraservers():
    live = {"a": frozenset({"us-1"}), "b": frozenset({"us-1", "us-2"}), "c": frozenset({"us-3"})}
    predicted = {"a": frozenset({"us-1"}), "b": frozenset({"us-2"}), "c": frozenset({"us-3"})}
    assert same_domains(live, predicted) == ["a", "c"]


def test_the_workload_comes_from_the_kalos_trace_the_same_for_a_seed():
    sizes = kalos_sizes()
    assert set(sizes) == {1, 2, 4, 8, 16, 24, 32} and sizes[1] == 70  # 1- and 2-GPU jobs: one pod
    a, b = burst(1, 450), burst(1, 450)
    assert a == b and burst(2, 450) != a
    asked = sum(g.pods for g in a)
    assert 1.05 * 450 <= asked < 1.05 * 450 + 32
    assert {slice_size(p) for p in (1, 18, 24, 32, 36)} == {0, 12, 16, 18}
    assert gang("x", 24).slices() == [range(0, 12), range(12, 24)]
    assert Gang("p", 40, required=False).slices() == []
    s = stream(1, 450, seconds=600)
    assert s == stream(1, 450, seconds=600) and all(0 < x.at < 600 for x in s)
    assert [x.at for x in s] == sorted(x.at for x in s)


def test_the_table_gives_ratios_to_each_peer_and_judges_the_goals():
    ours = [{"burst pods/s": 10.0, "stranded GPUs": 0, "recovery 3 s": 9.0}] * 3
    tas = [{"burst pods/s": 20.0, "stranded GPUs": 8, "recovery 3 s": 30.0}, {"burst pods/s": 10.0}]
    floor = [{"burst pods/s": 40.0, "recovery 3 s": 1.0}]
    rows = [report.burst_rows, report.recovery_rows, report.preemption_rows]
    text = report.render({"gangplugin": ours, "kueue-tas": tas, "noop-check": floor}, rows)
    lines = {line.split("  ")[0]: line for line in text.splitlines()}
    rate = lines["burst: pods bound/s"]
    assert "15.0 (10.0-20.0)" in rate and "0.67x" in rate and "MISSED" in rate
    assert "met" in lines["quality: GPUs stranded"] and "0.00x" in lines["quality: GPUs stranded"]
    assert "0.30x" in lines["recovery: 3 nodes failed -> whole again s"]
    # the floor is no peer: its 1 s sets no goal (a ratio to it is shown: 9.00x)
    assert "9.00x" in lines["recovery: 3 nodes failed -> whole again s"]
    assert "<= 1/3 the best peer: met" in lines["recovery: 3 nodes failed -> whole again s"]
    assert "preemption: GPUs evicted" not in lines  # measured by nobody: no row
