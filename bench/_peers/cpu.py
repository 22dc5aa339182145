"""CPU seconds each process of the cluster spent over a part, from /proc (user + system time of
all its threads), and the bench's own (its watches, and the no-op check when it runs in it).

On the bench's 2 cores every component's CPU is taken from the others: a system whose own
process spends more of it slows the API server and the controllers every gang waits on, which
the hop and queue figures then show as waits in other components' queues."""

from __future__ import annotations

import os
from collections.abc import Mapping

TICK = os.sysconf("SC_CLK_TCK")
BENCH = "bench"


def seconds(pid: int) -> float | None:
    """User + system CPU seconds of `pid` so far; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # after "pid (comm) ": state ppid ... utime is the 14th field, stime the 15th
    fields = raw[raw.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def sample(processes: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far per process name (the bench's own as `bench`)."""
    out = {BENCH: seconds(os.getpid()) or 0.0}
    for name, pid in processes.items():
        if (spent := seconds(pid)) is not None:
            out[name] = spent
    return out


def difference(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds per process between two samples (a process that restarted in between counts
    from zero), busiest first."""
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    spent = {name: s if s >= 0 else after[name] for name, s in spent.items()}
    return dict(sorted(spent.items(), key=lambda kv: (-kv[1], kv[0])))


def line(spent: Mapping[str, float], wall: float, cores: int) -> str:
    """`12.3 of 30.0 CPU s (2 cores x 15.0 s): kube-apiserver 5.1, gangplugin 2.0, ...`."""
    total = sum(spent.values())
    parts = ", ".join(f"{name} {s:.1f}" for name, s in spent.items())
    return f"{total:.1f} of {cores * wall:.1f} CPU s ({cores} cores x {wall:.1f} s): {parts}"
