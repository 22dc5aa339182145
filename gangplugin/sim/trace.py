"""Job traces for `gangctl simulate`: the CSV format of deploy/traces/ and a seeded generator.

CSV columns (a header row; a column not named here is an error naming the closest known one):
`arrival_time` (seconds from the trace start), `gpu_workers` (pods), `gpu_per_worker` (GPUs per
pod), and the run time as `duration` (seconds) or `num_iteration` x `iteration_computing_time`.
Optional: `job_id` (else the row number), `max_runtime` (seconds; default the run time, as a job
that declares `gangplugin.io/max-runtime` honestly), `required_topology`, `preferred_topology`
(node labels), `priority` (the job's Kueue priority, a whole number; default 0, Kueue's without a
WorkloadPriorityClass), `checkpointable` (true or false, default false: the job may be evicted
early from a domain reserved for a gang of higher priority). The Kalos format's other columns
(`IGNORED`) are allowed and not read.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable, Mapping

from gangplugin.core.errors import InputError
from gangplugin.core.keys import did_you_mean
from gangplugin.core.simulate import Job

REQUIRED = ("arrival_time", "gpu_workers", "gpu_per_worker")
RUNTIME_COLUMNS = ("duration", ("num_iteration", "iteration_computing_time"))
OPTIONAL = ("job_id", "max_runtime", "required_topology", "preferred_topology", "priority", "checkpointable")
#: Columns of the Kalos trace format (deploy/traces/) the replay does not read.
IGNORED = (
    "iteration_networking_time",
    "ps",
    "cpu_per_gpu_worker",
    "cpu_per_ps_worker",
    "tensorsizes",
    "profiled_network",
)
#: Every column a trace may have: any other is an error, not silence (a misspelt `priorty` or
#: `max_runtme` would replay every job with the default).
COLUMNS = frozenset((*REQUIRED, "duration", "num_iteration", "iteration_computing_time", *OPTIONAL, *IGNORED))


def _number(row: Mapping[str, str | None], column: str, line: int, *, whole: bool = False) -> float:
    raw = (row.get(column) or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"line {line}: {column}", f"{raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(f"line {line}: {column}", f"{raw!r} must be a number >= 0")
    if whole and value != int(value):
        raise InputError(f"line {line}: {column}", f"{raw!r} must be a whole number")
    return value


def _priority(row: Mapping[str, str | None], line: int) -> int:
    raw = (row.get("priority") or "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise InputError(
            f"line {line}: priority", f"{raw!r} is not a whole number, like 100 or -10"
        ) from None
    if not -(2**31) <= value < 2**31:  # a WorkloadPriorityClass value is an int32
        raise InputError(f"line {line}: priority", f"{raw!r} is outside the int32 range")
    return value


def jobs_from_rows(rows: Iterable[Mapping[str, str | None]], columns: Iterable[str]) -> list[Job]:
    """Jobs from CSV rows (dicts by header). InputError naming the missing column or bad cell."""
    have = set(columns)
    unknown = sorted(have - COLUMNS)
    if unknown:
        column = unknown[0]
        raise InputError(f"column {column}", f"is not a trace column{did_you_mean(column, COLUMNS)}")
    missing = [c for c in REQUIRED if c not in have]
    if missing:
        raise InputError(f"column {missing[0]}", f"is missing; a trace needs {', '.join(REQUIRED)}")
    if "duration" not in have and not {"num_iteration", "iteration_computing_time"} <= have:
        absent = "num_iteration" if "num_iteration" not in have else "iteration_computing_time"
        raise InputError(
            f"column {absent}",
            "is missing; give the run time as duration, or num_iteration and iteration_computing_time",
        )
    jobs = []
    keys: set[str] = set()
    for i, row in enumerate(rows):
        line = i + 2  # the header is line 1
        key = (row.get("job_id") or "").strip() or str(i)
        if key in keys:
            raise InputError(f"line {line}: job_id", f"{key!r} appears twice")
        keys.add(key)
        if "duration" in have:
            runtime = _number(row, "duration", line)
        else:
            runtime = _number(row, "num_iteration", line) * _number(row, "iteration_computing_time", line)
        pods = int(_number(row, "gpu_workers", line, whole=True))
        gpus = int(_number(row, "gpu_per_worker", line, whole=True))
        if pods < 1:
            raise InputError(f"line {line}: gpu_workers", "a job has at least 1 worker")
        max_rt = (row.get("max_runtime") or "").strip()
        jobs.append(
            Job(
                key=key,
                arrival=_number(row, "arrival_time", line),
                pods=pods,
                gpus_per_pod=gpus,
                runtime=runtime,
                max_runtime=_number(row, "max_runtime", line) if max_rt else runtime,
                required_topology=(row.get("required_topology") or "").strip() or None,
                preferred_topology=(row.get("preferred_topology") or "").strip() or None,
                priority=_priority(row, line),
                checkpointable=_flag(row, "checkpointable", line),
            )
        )
    return jobs


def _flag(row: Mapping[str, str | None], column: str, line: int) -> bool:
    raw = (row.get(column) or "").strip().lower()
    if raw in ("", "false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise InputError(f"line {line}: {column}", f"{raw!r} is not true or false")


def read_trace(path: str) -> list[Job]:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            try:
                return jobs_from_rows(reader, reader.fieldnames or ())
            except InputError as err:
                raise InputError(f"{path}: {err.field}", err.problem) from err
    except OSError as err:
        raise InputError(path, f"cannot read: {err.strerror or err}") from err
    except (csv.Error, UnicodeDecodeError) as err:
        raise InputError(path, f"not a CSV file ({err})") from err


#: Gang sizes (pods) and their weights, shaped like the Kalos trace: many single pods, many of
#: 32-128 pods.
_SIZES = ((1, 28), (2, 4), (4, 5), (8, 7), (16, 4), (32, 16), (64, 24), (128, 12))


def synthetic(
    count: int,
    seed: int,
    *,
    gpus_per_pod: int = 8,
    mean_interarrival: float = 600.0,
    mean_runtime: float = 7200.0,
) -> list[Job]:
    """`count` jobs drawn from a seeded generator (the same seed gives the same jobs): Poisson
    arrivals, Kalos-like gang sizes, log-normal run times of the given mean."""
    rng = random.Random(seed)
    sizes = [s for s, _ in _SIZES]
    weights = [w for _, w in _SIZES]
    sigma = 1.0
    mu = math.log(mean_runtime) - sigma * sigma / 2
    t = 0.0
    jobs = []
    for i in range(count):
        t += rng.expovariate(1 / mean_interarrival)
        pods = rng.choices(sizes, weights)[0]
        runtime = round(rng.lognormvariate(mu, sigma), 1)
        jobs.append(Job(str(i), round(t, 1), pods, gpus_per_pod, runtime, runtime))
    return jobs
