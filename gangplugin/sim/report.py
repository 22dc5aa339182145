"""What `gangctl simulate` prints and draws from the replays: the summary document (the `-o json`
contract docs/simulate.md states), its table, the capacity sweep's answer, and PNG plots."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
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


def plot(replays: Sequence[Replay], directory: str) -> list[str]:
    """Write utilization.png, wait-cdf.png and queue.png (one line per policy) into `directory`."""
    import matplotlib  # the `sim` extra; gangctl checks for it before replaying

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    written = []

    def save(fig: Any, name: str) -> None:
        path = os.path.join(directory, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110, metadata={"Software": None})  # no version stamp: same bytes per run
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for r in replays:
        t = [s.t / 3600 for s in r.samples]
        ax.step(
            t, [s.busy_gpus / max(r.total_gpus, 1) * 100 for s in r.samples], where="post", label=r.policy
        )
    ax.set(xlabel="hours", ylabel="GPUs allocated (%)", title="GPU utilization over time")
    ax.legend()
    save(fig, "utilization.png")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in replays:
        w = sorted(x / 3600 for x in waits(r))
        if w:
            ax.step(w, [(i + 1) / len(r.outcomes) for i in range(len(w))], where="post", label=r.policy)
    ax.set(xlabel="wait (hours)", ylabel="fraction of jobs", title="Gang wait time CDF", xscale="symlog")
    ax.legend()
    save(fig, "wait-cdf.png")

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for r in replays:
        ax.step([s.t / 3600 for s in r.samples], [s.queued for s in r.samples], where="post", label=r.policy)
    ax.set(xlabel="hours", ylabel="jobs waiting", title="Queue length over time")
    ax.legend()
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
