"""What `gangctl simulate` prints and draws from the replays: the summary document (the `-o json`
contract docs/simulate.md states), its table, the capacity sweep's answer, and PNG plots."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from gangplugin.core.simulate import Replay, percentile
from gangplugin.core.table import table


def waits(replay: Replay) -> list[float]:
    return [o.wait for o in replay.outcomes if o.wait is not None]


def policy_doc(replay: Replay) -> dict[str, Any]:
    """One policy's summary: exactly the keys of the documented `-o json` contract."""
    w = waits(replay)
    return {
        "policy": replay.policy,
        "gpuUtilization": round(replay.gpu_utilization, 4),
        "waitSeconds": {
            "p50": round(percentile(w, 50), 1),
            "p95": round(percentile(w, 95), 1),
            "max": round(max(w, default=0.0), 1),
        },
        "neverRan": sum(1 for o in replay.outcomes if o.never_ran is not None),
        "strandedGpuHours": round(replay.stranded_gpu_seconds / 3600, 1),
        "makespanSeconds": round(replay.makespan, 1),
    }


def summary_doc(jobs: int, replays: Sequence[Replay]) -> dict[str, Any]:
    return {"jobs": jobs, "policies": [policy_doc(r) for r in replays]}


def _hours(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def reason_kind(reason: str) -> str:
    """A never-ran reason without its numbers' detail (the part before the first `;`)."""
    return reason.split(";")[0]


def summary_table(jobs: int, replays: Sequence[Replay]) -> str:
    rows = []
    for r in replays:
        d = policy_doc(r)
        w = d["waitSeconds"]
        rows.append(
            [
                r.policy,
                f"{d['gpuUtilization'] * 100:.1f}%",
                _hours(w["p50"]),
                _hours(w["p95"]),
                _hours(w["max"]),
                d["neverRan"],
                f"{d['strandedGpuHours']:.0f}",
                f"{r.plan_unused_gpu_seconds / 3600:.0f}",
                sum(o.drained for o in r.outcomes),
                _hours(r.makespan),
            ]
        )
    header = [
        "POLICY",
        "GPU UTIL",
        "WAIT P50",
        "P95",
        "MAX",
        "NEVER RAN",
        "STRANDED GPU-H",
        "PLAN UNUSED GPU-H",
        "DRAINED",
        "MAKESPAN",
    ]
    out = [f"{jobs} jobs, {replays[0].total_gpus if replays else 0} GPUs", table(header, rows)]
    for r in replays:
        kinds = Counter(reason_kind(o.never_ran) for o in r.outcomes if o.never_ran is not None)
        if kinds:
            out.append(f"\nnever ran under {r.policy}:")
            out += [f"  {n} x {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(out)


def sweep_answer(points: Sequence[tuple[int, Sequence[Replay]]], max_p95: float) -> dict[str, int | None]:
    """Per policy, the smallest UltraServer count whose p95 wait is at most `max_p95` with every
    job run (None: no count in the sweep does it)."""
    answer: dict[str, int | None] = {}
    for count, replays in sorted(points, key=lambda p: p[0]):
        for r in replays:
            d = policy_doc(r)
            answer.setdefault(r.policy, None)
            if answer[r.policy] is None and d["neverRan"] == 0 and d["waitSeconds"]["p95"] <= max_p95:
                answer[r.policy] = count
    return answer


def sweep_doc(points: Sequence[tuple[int, Sequence[Replay]]], max_p95: float | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "sweep": [
            {"ultraServers": count, "policies": [policy_doc(r) for r in replays]} for count, replays in points
        ]
    }
    if max_p95 is not None:
        doc["maxP95WaitSeconds"] = max_p95
        doc["smallestUltraServers"] = sweep_answer(points, max_p95)
    return doc


def sweep_table(points: Sequence[tuple[int, Sequence[Replay]]], max_p95: float | None) -> str:
    rows = []
    for count, replays in points:
        for r in replays:
            d = policy_doc(r)
            rows.append(
                [
                    count,
                    r.policy,
                    f"{d['gpuUtilization'] * 100:.1f}%",
                    _hours(d["waitSeconds"]["p95"]),
                    d["neverRan"],
                ]
            )
    out = [table(["ULTRASERVERS", "POLICY", "GPU UTIL", "WAIT P95", "NEVER RAN"], rows)]
    if max_p95 is not None:
        for policy, smallest in sweep_answer(points, max_p95).items():
            verdict = f"{smallest} UltraServers" if smallest is not None else "no count in the sweep"
            out.append(f"{policy}: p95 wait <= {_hours(max_p95)} with every job run from {verdict}")
    return "\n".join(out)


#: Bucket widths (hours) the utilization plot averages over: the smallest that leaves at most
#: `_MAX_BUCKETS` of them, so 2,000 hours read as a curve, not as a comb of single events.
_BUCKET_HOURS = (0.25, 0.5, 1, 2, 3, 6, 12, 24, 48, 168)
_MAX_BUCKETS = 150


def bucket_hours(span_hours: float) -> float:
    """The utilization plot's bucket width for a replay spanning `span_hours`."""
    return next((w for w in _BUCKET_HOURS if span_hours / w <= _MAX_BUCKETS), _BUCKET_HOURS[-1])


def binned_utilization(replay: Replay, width_s: float) -> list[tuple[float, float]]:
    """(bucket start in seconds, mean share of GPUs allocated in it) from the first sample to
    the makespan's end: each sample's value weighted by the time it held within the bucket."""
    samples = replay.samples
    if not samples or replay.total_gpus <= 0:
        return []
    t0 = samples[0].t
    end = max(t0 + replay.makespan, samples[-1].t)
    count = max(1, math.ceil((end - t0) / width_s))
    busy = [0.0] * count
    for s, until in zip(samples, [*(x.t for x in samples[1:]), end], strict=True):
        until = min(until, t0 + count * width_s)
        first, last = int((s.t - t0) // width_s), math.ceil((until - t0) / width_s)
        for b in range(first, min(last, count)):
            lo, hi = max(s.t, t0 + b * width_s), min(until, t0 + (b + 1) * width_s)
            busy[b] += s.busy_gpus * max(hi - lo, 0.0)
    return [(t0 + b * width_s, busy[b] / (width_s * replay.total_gpus)) for b in range(count)]


def same_lines(series: Sequence[tuple[str, Any]], tolerance: float = 0.0) -> list[tuple[list[str], Any]]:
    """The policies whose plotted series (xs, ys) are the same, grouped (in first-seen order)
    with the first one's series: drawn once under all their names, as a line hidden under
    another says nothing. Same: equal xs, and ys within `tolerance` of each other."""
    out: list[tuple[list[str], Any]] = []
    for name, (xs, ys) in series:
        for names, (seen_xs, seen_ys) in out:
            if seen_xs == xs and all(abs(a - b) <= tolerance for a, b in zip(seen_ys, ys, strict=True)):
                names.append(name)
                break
        else:
            out.append(([name], (xs, ys)))
    return out


# One style per line, so lines that meet stay told apart where they cross.
_STYLES = (
    {"linestyle": "-", "linewidth": 2.2},
    {"linestyle": "--", "linewidth": 1.6},
    {"linestyle": ":", "linewidth": 1.8},
    {"linestyle": "-.", "linewidth": 1.4},
)


def plot(replays: Sequence[Replay], directory: str, title: str = "") -> list[str]:
    """Write utilization.png, wait-cdf.png and queue.png (one line per policy, identical ones
    merged) into `directory`; `title` names the cluster, the trace and the flags."""
    import matplotlib  # the `sim` extra; gangctl checks for it before replaying

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    written = []

    def figure(width: float, what: str) -> Any:
        fig, ax = plt.subplots(figsize=(width, 4.0))
        ax.set_title(what, fontsize=11)
        if title:
            fig.suptitle(title, fontsize=8, wrap=True)
        return fig, ax

    def draw(
        ax: Any,
        series: Sequence[tuple[str, Any]],
        note: Callable[[str], str] = lambda _: "",
        tolerance: float = 0.0,
    ) -> None:
        for i, (names, (xs, ys)) in enumerate(same_lines(series, tolerance)):
            label = " = ".join(names) + note(names[0])
            ax.step(xs, ys, where="post", label=label, **_STYLES[i % len(_STYLES)])
        merged = f"lines within {tolerance:g} of each other drawn once" if tolerance else None
        ax.legend(fontsize=8, title=merged, title_fontsize=7)

    def save(fig: Any, name: str) -> None:
        path = os.path.join(directory, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110, metadata={"Software": None})  # no version stamp: same bytes per run
        plt.close(fig)
        written.append(path)

    span = max((r.makespan for r in replays), default=0.0) / 3600
    width = bucket_hours(span)
    fig, ax = figure(8, f"GPU utilization over time (mean per {_hours(width * 3600)})")
    series = []
    for r in replays:
        binned = binned_utilization(r, width * 3600)
        series.append((r.policy, ([t / 3600 for t, _ in binned], [u * 100 for _, u in binned])))
    draw(ax, series, tolerance=0.5)  # half a percentage point: a line's width at this scale
    ax.set(xlabel="hours", ylabel="GPUs allocated (%)", ylim=(0, 105))
    save(fig, "utilization.png")

    fig, ax = figure(7, "Gang wait time CDF (of all jobs)")
    series, never = [], {}
    for r in replays:
        w = sorted(x / 3600 for x in waits(r))
        never[r.policy] = sum(1 for o in r.outcomes if o.never_ran is not None)
        if w:
            series.append((r.policy, (w, [(i + 1) / len(r.outcomes) for i in range(len(w))])))
    # the same curve is the same number of jobs run: one count per line
    draw(ax, series, lambda p: f" ({never[p]} of {len(replays[0].outcomes)} never ran)" if never[p] else "")
    ax.axhline(1.0, color="grey", linewidth=0.6)
    ax.set(xlabel="wait (hours)", ylabel="fraction of jobs", xscale="symlog", ylim=(0, 1.05))
    ax.set_xlim(left=0)
    save(fig, "wait-cdf.png")

    fig, ax = figure(8, "Queue length over time")
    draw(ax, [(r.policy, ([s.t / 3600 for s in r.samples], [s.queued for s in r.samples])) for r in replays])
    ax.set(xlabel="hours", ylabel="jobs waiting")
    save(fig, "queue.png")
    return written


def offerings_answer(results: Sequence[tuple[str, Replay]]) -> str | None:
    """The offering that runs every job with the least reserved capacity left idle (None: no
    offering runs every job)."""
    ran_all = [(r.plan_unused_gpu_seconds, oid) for oid, r in results if policy_doc(r)["neverRan"] == 0]
    return min(ran_all)[1] if ran_all else None


def offerings_doc(results: Sequence[tuple[str, Replay]]) -> dict[str, Any]:
    return {
        "offerings": [
            {
                "trainingPlanOfferingId": oid,
                **{k: v for k, v in policy_doc(r).items() if k != "policy"},
                "unusedReservedGpuHours": round(r.plan_unused_gpu_seconds / 3600, 1),
            }
            for oid, r in results
        ],
        "leastIdle": offerings_answer(results),
    }


def offerings_table(results: Sequence[tuple[str, Replay]]) -> str:
    rows = []
    for oid, r in results:
        d = policy_doc(r)
        unused = r.plan_unused_gpu_seconds / 3600
        rows.append([oid, _hours(d["waitSeconds"]["p95"]), d["neverRan"], f"{unused:.1f} GPU-h"])
    best = offerings_answer(results)
    verdict = (
        f"least idle reserved capacity with every job run: {best}"
        if best is not None
        else "no offering runs every job of the trace"
    )
    return table(["OFFERING", "WAIT P95", "NEVER RAN", "RESERVED, IDLE"], rows) + "\n" + verdict
