"""What the simulator's plots draw: utilization averaged per bucket over long replays, identical
lines drawn once under all their names, titles and never-ran counts on the figures."""

from pathlib import Path

import pytest

from gangplugin.core.simulate import Outcome, Replay, Sample
from gangplugin.sim.report import binned_utilization, bucket_hours, plot, same_lines


def replay(samples: list[Sample], makespan: float, policy: str = "gangplugin", never: int = 0) -> Replay:
    outcomes = tuple(Outcome(f"j{i}", 4, 0.0, 1.0) for i in range(3)) + tuple(
        Outcome(f"n{i}", 4, None, None, never_ran="never fits") for i in range(never)
    )
    return Replay(policy, 10, outcomes, tuple(samples), makespan, 0.0, 0.0, 0.0)


def test_buckets_leave_at_most_150_of_them():
    assert bucket_hours(10) == 0.25
    assert bucket_hours(600) == 6
    assert bucket_hours(2000) == 24
    assert bucket_hours(100_000) == 168  # the widest there is


def test_utilization_is_the_time_weighted_mean_per_bucket():
    # 10 GPUs: 5 busy for 30 s, 10 for 60 s, 0 for 30 s; buckets of 60 s
    samples = [Sample(0, 5, 0, 0), Sample(30, 10, 0, 0), Sample(90, 0, 0, 0)]
    got = binned_utilization(replay(samples, makespan=120), 60)
    assert got == [(0, pytest.approx((5 * 30 + 10 * 30) / 600)), (60, pytest.approx(10 * 30 / 600))]


def test_a_sample_spanning_several_buckets_fills_each():
    got = binned_utilization(replay([Sample(0, 10, 0, 0)], makespan=250), 100)
    assert [u for _, u in got] == [pytest.approx(1.0), pytest.approx(1.0), pytest.approx(0.5)]


def test_identical_lines_are_grouped_and_near_ones_only_with_a_tolerance():
    a, b, c = ([0, 1], [1.0, 2.0]), ([0, 1], [1.0, 2.0]), ([0, 1], [1.2, 2.0])
    series = [("gangplugin", c), ("best-fit", a), ("first-fit", b)]
    assert same_lines(series) == [(["gangplugin"], c), (["best-fit", "first-fit"], a)]
    assert same_lines(series, tolerance=0.5) == [(["gangplugin", "best-fit", "first-fit"], c)]
    assert same_lines([("x", ([0], [1.0])), ("y", ([0, 1], [1.0, 1.0]))], 1.0)[1][0] == ["y"]


def test_the_figures_say_what_was_replayed_and_how_many_never_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import matplotlib.pyplot as plt

    titles: list[str] = []
    legends: list[str] = []
    real_savefig = plt.Figure.savefig

    def seen(fig: plt.Figure, *args: object, **kwargs: object) -> None:
        titles.append(fig.texts[0].get_text() if fig.texts else "")
        for ax in fig.axes:
            legend = ax.get_legend()
            legends.extend(t.get_text() for t in legend.get_texts())
        real_savefig(fig, *args, **kwargs)

    samples = [Sample(0, 5, 1, 0), Sample(3600, 0, 0, 0)]
    replays = [replay(samples, 3600, "gangplugin", never=2), replay(samples, 3600, "best-fit", never=2)]
    monkeypatch.setattr(plt.Figure, "savefig", seen)
    written = plot(replays, str(tmp_path), "shape.yaml (4 nodes), trace.csv (5 jobs) --pod-gpus 4")
    assert [Path(w).name for w in written] == ["utilization.png", "wait-cdf.png", "queue.png"]
    assert titles == ["shape.yaml (4 nodes), trace.csv (5 jobs) --pod-gpus 4"] * 3
    assert "gangplugin = best-fit (2 of 5 never ran)" in legends
    assert legends.count("gangplugin = best-fit") == 2  # utilization and queue
