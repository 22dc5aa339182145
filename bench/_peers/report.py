"""The one table: every figure per system as the median (min-max) of its repetitions, with
gangplugin's ratio to each peer and, where the issue sets one, whether the goal is met."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from _peers.figures import percentile, spread
from gangplugin.core.table import table

OURS = "gangplugin"
Reps = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Row:
    label: str
    value: Callable[[Mapping[str, Any]], float]  # one repetition's figure (nan: none)
    higher_is_better: bool
    fmt: str = "{:.1f}"
    # the goal against one peer: (ours, theirs, peer) -> met; None: no goal
    goal: Callable[[float, float, str], bool] | None = None
    goal_text: str = ""


def figure(key: str) -> Callable[[Mapping[str, Any]], float]:
    def get(rep: Mapping[str, Any]) -> float:
        v = rep.get(key)
        return float(v) if isinstance(v, int | float) else math.nan

    return get


def start(part: str, size: int, q: float) -> Callable[[Mapping[str, Any]], float]:
    def get(rep: Mapping[str, Any]) -> float:
        return percentile((rep.get(f"{part} start s") or {}).get(str(size), []), q)

    return get


def _all_sizes(results: Mapping[str, Reps], part: str) -> list[int]:
    seen = {k for reps in results.values() for r in reps for k in (r.get(f"{part} start s") or {})}
    return sorted(int(k) for k in seen)


def rows(results: Mapping[str, Reps]) -> list[Row]:
    out = [
        Row(
            "burst: pods bound/s",
            figure("burst pods/s"),
            True,
            goal=lambda o, t, _p: o >= t,
            goal_text=">= 1.0x each",
        ),
    ]
    for size in _all_sizes(results, "burst"):
        out += [Row(f"burst: {size}-pod gang start p{q} s", start("burst", size, q), False) for q in (50, 95)]
    out += [
        Row(
            "big gang: submission -> all Running s",
            figure("big gang s"),
            False,
            goal=lambda o, t, p: p != "kueue-tas" or o <= t,
            goal_text="<= Kueue TAS",
        ),
        Row(
            "quality: gangs whole in required domain %",
            figure("in domain %"),
            True,
            "{:.0f}",
            goal=lambda o, _t, _p: o == 100,
            goal_text="100%",
        ),
        *(
            Row(
                f"quality: {label}",
                figure(key),
                False,
                "{:.0f}",
                goal=lambda o, t, _p: o < t or o == 0,
                goal_text="fewer than each",
            )
            for label, key in (
                ("UltraServers fragmented", "fragmented UltraServers"),
                ("GPUs stranded", "stranded GPUs"),
            )
        ),
        Row(
            "quality: largest gang one UltraServer takes (pods)", figure("largest whole gang"), True, "{:.0f}"
        ),
        Row("quality: gangs placed of the burst", figure("burst gangs placed"), True, "{:.0f}"),
        Row("partial gangs seen (burst)", figure("burst partial gangs"), False, "{:.0f}"),
        Row("partial gangs seen (stream)", figure("stream partial gangs"), False, "{:.0f}"),
    ]
    for size in _all_sizes(results, "stream"):
        out += [
            Row(f"stream: {size}-pod gang start p{q} s", start("stream", size, q), False) for q in (50, 95)
        ]
    out += [
        Row("recovery: 1 node failed -> whole again s", figure("recovery 1 s"), False),
        Row(
            "recovery: 3 nodes failed -> whole again s",
            figure("recovery 3 s"),
            False,
            goal=lambda o, t, p: p != "kueue-tas" or o <= t / 3,
            goal_text="<= 1/3 Kueue TAS",
        ),
        Row("preemption: high-priority gang Running s", figure("preemption s"), False),
        Row(
            "preemption: GPUs evicted",
            figure("preemption GPUs evicted"),
            False,
            "{:.0f}",
            goal=lambda o, t, _p: o <= t,
            goal_text="fewest",
        ),
    ]
    return out


def cell(samples: Sequence[float], fmt: str) -> str:
    med, lo, hi = spread(samples)
    if math.isnan(med):
        return "-"
    if lo == hi:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(lo)}-{fmt.format(hi)})"


def ratio(ours: float, theirs: float) -> str:
    if math.isnan(ours) or math.isnan(theirs):
        return "-"
    if theirs == 0:
        return "=" if ours == 0 else "inf"
    return f"{ours / theirs:.2f}x"


def render(results: Mapping[str, Reps]) -> str:
    """The table of `results` (system -> its repetitions' figures); gangplugin first, then each
    peer with gangplugin's ratio to it, and the goals."""
    systems = [s for s in (OURS, *sorted(results)) if s in results]
    systems = list(dict.fromkeys(systems))
    peers = [s for s in systems if s != OURS]
    header = ["FIGURE", *(f"{s.upper()} ({len(results[s])} reps)" for s in systems)]
    if OURS in results:
        header += [f"/{p.upper()}" for p in peers] + ["GOAL"]
    body = []
    for row in rows(results):
        samples = {s: [row.value(r) for r in results[s]] for s in systems}
        if all(math.isnan(v) for vs in samples.values() for v in vs):
            continue
        line = [row.label, *(cell(samples[s], row.fmt) for s in systems)]
        if OURS in results:
            med = {s: spread(samples[s])[0] for s in systems}
            line += [ratio(med[OURS], med[p]) for p in peers]
            line.append(_goal(row, med, peers))
        body.append(line)
    return table(header, body)


def _goal(row: Row, med: Mapping[str, float], peers: Sequence[str]) -> str:
    if row.goal is None:
        return ""
    ours = med[OURS]
    if math.isnan(ours):
        return f"{row.goal_text}: not measured"
    judged = [p for p in peers if not math.isnan(med[p])] or [OURS]
    met = all(row.goal(ours, med[p], p) for p in judged)
    return f"{row.goal_text}: {'met' if met else 'MISSED'}"


def simulator_note(results: Mapping[str, Reps]) -> str | None:
    """How often the simulator's best-fit put a gang of the burst in the UltraServers Kueue TAS
    chose live, replayed in submission order and in Kueue's admission order."""
    reps = results.get("kueue-tas", [])
    lines = []
    for order in ("submission", "admission"):
        seen = [
            r[f"simulator {order} order"]
            for r in reps
            if (r.get(f"simulator {order} order") or {}).get("compared")
        ]
        if not seen:
            continue
        med, lo, hi = spread([s["same"] / s["compared"] for s in seen])
        last = seen[-1]
        lines.append(
            f"simulator best-fit vs Kueue TAS live, burst in {order} order: {100 * med:.0f}% of gangs "
            f"in the same UltraServers ({100 * lo:.0f}-{100 * hi:.0f}%, {last['compared']} gangs both "
            f"placed; placed by the simulator only {len(last['simulator placed only'])}, live only "
            f"{len(last['live placed only'])})"
        )
        lines += [f"  differs: {d}" for d in last["differs"][:8]]
    return "\n".join(lines) or None
