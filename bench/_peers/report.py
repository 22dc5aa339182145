"""The tables of the saved results: every figure per system as the median (min-max) of its
repetitions, with gangplugin's ratio to each other system and, where the issue sets one, whether
the goal is met (judged against the peers, never against the floor); then, for the Kueue systems,
where a gang's time goes hop by hop, and the writes to its Workload.

Each part of a repetition brings its own rows (a `Rows` function of this module, named with the
part in bench/peers.py's PARTS)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from _peers.figures import percentile, spread
from _peers.hops import HOPS
from gangplugin.core.table import table

OURS = "gangplugin"
# Not a peer: the floor of Kueue's AdmissionCheck contract (a check answering Ready at once).
FLOOR = "noop-check"
Reps = Sequence[Mapping[str, Any]]
# A goal against one peer: (ours, theirs, peer) -> met
Goal = Callable[[float, float, str], bool]


@dataclass(frozen=True)
class Row:
    label: str
    value: Callable[[Mapping[str, Any]], float]  # one repetition's figure (nan: none)
    higher_is_better: bool
    fmt: str = "{:.1f}"
    goal: Goal | None = None  # None: no goal
    goal_text: str = ""
    # the goal judged once against all peers' medians at once: (ours, {peer: theirs}) -> met
    goal_all: Callable[[float, Mapping[str, float]], bool] | None = None


# The rows of one part's figures, given every system's repetitions (some rows per gang size seen).
Rows = Callable[[Mapping[str, Reps]], list[Row]]


def figure(key: str) -> Callable[[Mapping[str, Any]], float]:
    def get(rep: Mapping[str, Any]) -> float:
        v = rep.get(key)
        return float(v) if isinstance(v, int | float) else math.nan

    return get


def start(part: str, size: int, q: float) -> Callable[[Mapping[str, Any]], float]:
    def get(rep: Mapping[str, Any]) -> float:
        return percentile((rep.get(f"{part} start s") or {}).get(str(size), []), q)

    return get


def listed(key: str, q: float) -> Callable[[Mapping[str, Any]], float]:
    """The q-th percentile of a figure that is one value per gang."""

    def get(rep: Mapping[str, Any]) -> float:
        return percentile(rep.get(key) or [], q)

    return get


def _all_sizes(results: Mapping[str, Reps], part: str) -> list[int]:
    seen = {k for reps in results.values() for r in reps for k in (r.get(f"{part} start s") or {})}
    return sorted(int(k) for k in seen)


def _at_most(o: float, t: float, _p: str) -> bool:
    return o <= t


def _none(o: float, _t: float, _p: str) -> bool:
    return o == 0


def _fewer(o: float, t: float, _p: str) -> bool:
    return o < t or o == 0


def count(name: str, key: str, goal: Goal, goal_text: str, *, higher_is_better: bool = False) -> Row:
    """A row of a whole number with a goal (partial gangs, stranded GPUs, ...)."""
    return Row(name, figure(key), higher_is_better, "{:.0f}", goal=goal, goal_text=goal_text)


def burst_rows(results: Mapping[str, Reps]) -> list[Row]:
    out = [
        Row(
            "burst: pods bound/s",
            figure("burst pods/s"),
            True,
            goal=lambda o, t, p: p not in ("kueue-tas", "volcano") or o >= t,
            goal_text=">= 1.0x Kueue TAS and Volcano",
        ),
        Row(
            "burst: submission -> first pod created p50 s",
            listed("burst first pod created s", 50),
            False,
            "{:.2f}",
            goal=lambda o, t, p: p != "kueue-tas" or o <= t,
            goal_text="<= Kueue TAS",
        ),
    ]
    for size in _all_sizes(results, "burst"):
        out += [Row(f"burst: {size}-pod gang start p{q} s", start("burst", size, q), False) for q in (50, 95)]
    return [
        *out,
        count(
            "quality: gangs whole in required domain %",
            "in domain %",
            lambda o, _t, _p: o == 100,
            "100%",
            higher_is_better=True,
        ),
        count("quality: UltraServers fragmented", "fragmented UltraServers", _fewer, "fewer than each"),
        count("quality: GPUs stranded", "stranded GPUs", _fewer, "fewer than each"),
        Row(
            "quality: largest gang one UltraServer takes (pods)", figure("largest whole gang"), True, "{:.0f}"
        ),
        Row("quality: gangs placed of the burst", figure("burst gangs placed"), True, "{:.0f}"),
        count("partial gangs seen (burst)", "burst partial gangs", _none, "0"),
    ]


def stream_rows(results: Mapping[str, Reps]) -> list[Row]:
    out = [count("partial gangs seen (stream)", "stream partial gangs", _none, "0")]
    for size in _all_sizes(results, "stream"):
        for q in (50, 95):
            goal = size == 16 and q == 50
            out.append(
                Row(
                    f"stream: {size}-pod gang start p{q} s",
                    start("stream", size, q),
                    False,
                    goal=_at_most if goal else None,
                    goal_text="<= each peer" if goal else "",
                )
            )
    return out


def big_rows(_results: Mapping[str, Reps]) -> list[Row]:
    return [
        Row(
            "big gang: submission -> all Running s",
            figure("big gang s"),
            False,
            goal=lambda o, t, p: p != "kueue-tas" or o <= t,
            goal_text="<= Kueue TAS",
        )
    ]


def recovery_rows(_results: Mapping[str, Reps]) -> list[Row]:
    return [
        Row("recovery: 1 node failed -> whole again s", figure("recovery 1 s"), False),
        Row(
            "recovery: 3 nodes failed -> whole again s",
            figure("recovery 3 s"),
            False,
            goal_text="<= 1/3 the best peer",
            goal_all=lambda o, peers: o <= min(peers.values()) / 3,
        ),
        Row("recovery: pods made again (3 nodes)", figure("recovery 3 pods moved"), False, "{:.0f}"),
    ]


def preemption_rows(_results: Mapping[str, Reps]) -> list[Row]:
    return [
        Row("preemption: high-priority gang Running s", figure("preemption s"), False),
        count("preemption: GPUs evicted", "preemption GPUs evicted", _at_most, "fewest"),
    ]


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


def _systems(results: Mapping[str, Reps]) -> list[str]:
    return list(dict.fromkeys(s for s in (OURS, *sorted(results)) if s in results))


def render(results: Mapping[str, Reps], rows: Sequence[Rows]) -> str:
    """The table of `results` (system -> its repetitions' figures), the rows of each of `rows`
    (a part's); gangplugin first, then each other system with gangplugin's ratio to it, and the
    goals."""
    systems = _systems(results)
    others = [s for s in systems if s != OURS]
    header = ["FIGURE", *(f"{s.upper()} ({len(results[s])} reps)" for s in systems)]
    if OURS in results:
        header += [f"/{p.upper()}" for p in others] + ["GOAL"]
    body = []
    for part_rows in rows:
        for row in part_rows(results):
            samples = {s: [row.value(r) for r in results[s]] for s in systems}
            if all(math.isnan(v) for vs in samples.values() for v in vs):
                continue
            line = [row.label, *(cell(samples[s], row.fmt) for s in systems)]
            if OURS in results:
                med = {s: spread(samples[s])[0] for s in systems}
                line += [ratio(med[OURS], med[p]) for p in others]
                line.append(_goal(row, med, [p for p in others if p != FLOOR]))
            body.append(line)
    return table(header, body)


def _goal(row: Row, med: Mapping[str, float], peers: Sequence[str]) -> str:
    if row.goal is None and row.goal_all is None:
        return ""
    ours = med[OURS]
    if math.isnan(ours):
        return f"{row.goal_text}: not measured"
    theirs = {p: med[p] for p in peers if not math.isnan(med[p])}
    if row.goal_all is not None:
        if not theirs:
            return f"{row.goal_text}: no peer measured"
        met = row.goal_all(ours, theirs)
    else:
        assert row.goal is not None
        met = all(row.goal(ours, t, p) for p, t in theirs.items()) if theirs else row.goal(ours, ours, OURS)
    return f"{row.goal_text}: {'met' if met else 'MISSED'}"


def hops_table(results: Mapping[str, Reps], key: str, size: int | None = None) -> str | None:
    """Where a gang's time went in the Kueue systems (`key`: "burst hops", "stream hops", "big
    hops"): per hop, the median over repetitions of the median seconds from submission (and, in
    brackets, from the hop before); `size`: the gangs of that size only (from submission)."""
    systems = [s for s in _systems(results) if any(r.get(key) for r in results[s])]
    if not systems:
        return None
    body = []
    for hop in HOPS:
        cells = []
        for s in systems:
            reps = [r[key] for r in results[s] if r.get(key)]
            if size is None:
                since = [h["since submission"][hop] for h in reps if hop in h["since submission"]]
                steps = [h["step"][hop] for h in reps if hop in h["step"]]
                text = f"{statistics.median(since):.2f}" if since else "-"
                if steps:
                    text += f" (+{statistics.median(steps):.2f})"
            else:
                since = [h["by size"][str(size)][hop] for h in reps if hop in h["by size"].get(str(size), {})]
                text = f"{statistics.median(since):.2f}" if since else "-"
            cells.append(text)
        if any(c != "-" for c in cells):
            body.append([hop, *cells])
    return table(["HOP", *(s.upper() for s in systems)], body)


def writes_table(results: Mapping[str, Reps], key: str) -> str | None:
    """The writes to a gang's Workload until Admitted, per writer (median of the repetitions'
    medians): whose writes a hop costs."""
    systems = [s for s in _systems(results) if any(r.get(key) for r in results[s])]
    if not systems:
        return None
    seen = {w for s in systems for r in results[s] for w in r.get(key) or {}}
    writers = sorted(seen, key=lambda w: (w != "all", w))

    def median(system: str, writer: str) -> str:
        seen = [r[key][writer] for r in results[system] if writer in (r.get(key) or {})]
        return f"{statistics.median(seen):g}" if seen else "-"

    body = [[w, *(median(s, w) for s in systems)] for w in writers]
    return table(["WRITER", *(s.upper() for s in systems)], body)


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


def full(results: Mapping[str, Reps], rows: Sequence[Rows]) -> str:
    """Every table of the saved results of one size."""
    out = [render(results, rows)]
    for title, text in (
        (
            "where a burst gang's time goes (median s from submission, (+ from the hop before))",
            hops_table(results, "burst hops"),
        ),
        (
            "where a 16-pod stream gang's time goes (median s from submission)",
            hops_table(results, "stream hops", size=16),
        ),
        (
            "where the big gang's time goes (s from submission, (+ from the hop before))",
            hops_table(results, "big hops"),
        ),
        (
            "writes to a burst gang's Workload until Admitted (median), by writer",
            writes_table(results, "burst workload writes"),
        ),
        (
            "writes to a burst gang's Workload since Admitted, until the burst ended (median), by writer",
            writes_table(results, "burst workload writes after"),
        ),
    ):
        if text:
            out += ["", title, text]
    if note := simulator_note(results):
        out += ["", note]
    return "\n".join(out)
