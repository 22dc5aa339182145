"""Where `gangplugin serve` spends its CPU during a part of the bench (`bench/peers.py --profile`):
py-spy samples the running process from outside (no change to it, not paused: --nonblocking),
only the thread holding the GIL (--gil: Python's own CPU time; a thread waiting for the API
server or a lock is not counted), into a file of collapsed stacks; `top` reads it back as the
functions with the most samples, on their own and with what they call."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

RATE = 100  # samples a second


def py_spy() -> str:
    """The py-spy of this environment (pinned in pyproject.toml's dev extras)."""
    here = Path(sys.executable).with_name("py-spy")
    found = str(here) if here.exists() else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("--profile needs py-spy: pip install -e '.[dev]' (pyproject.toml pins it)")
    return found


@contextlib.contextmanager
def sampling(pid: int, out: Path) -> Iterator[None]:
    """Samples process `pid` (its threads, gangplugin's subprocesses none) into `out` while the
    block runs."""
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [py_spy(), "record", "--pid", str(pid), "--format", "raw", "--output", str(out)]
    with out.with_suffix(".log").open("w") as said:
        proc = subprocess.Popen(
            [*cmd, "--rate", str(RATE), "--nonblocking", "--gil"], stdout=said, stderr=subprocess.STDOUT
        )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes what it sampled and exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read(path: Path) -> tuple[Counter[str], Counter[str], int]:
    """Samples per function on its own (the top frame) and with its callees (anywhere in the
    stack, once per sample), and the samples in all, from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_short(f) for f in stack.split(";")]
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    return own, inclusive, total


def _short(frame: str) -> str:
    """`func (path/to/module.py:12)` as `func (module.py)`: one entry per function."""
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.split(':')[0]).name})" if where else name


def top(path: Path, n: int = 15) -> str:
    """The `n` functions with the most samples on their own and with their callees, as shares."""
    own, inclusive, total = read(path)
    if not total:
        return f"{path}: no samples"
    lines = [f"{path}: {total} samples ({total / RATE:.0f} CPU s)"]
    for title, counts in (("on its own", own), ("with its callees", inclusive)):
        lines.append(f"  most samples {title}:")
        lines += [f"    {100 * c / total:5.1f}%  {f}" for f, c in counts.most_common(n)]
    return "\n".join(lines)
