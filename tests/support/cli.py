"""gangctl run as a separate process, as a user runs it, and its output read as it prints it."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

# This checkout's gangctl in the interpreter running the tests (no installed script needed).
GANGCTL = [sys.executable, "-c", "from gangplugin.cli.main import main; main()"]


def gangctl_process(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`gangctl *args` in `cwd`, to its end."""
    return subprocess.run([*GANGCTL, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


class Running:
    """A command started in the background; its stdout line by line as it prints them, its
    stderr once it exits."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            list(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.errors: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self._stderr = threading.Thread(target=self._read_errors, daemon=True)
        self._stderr.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        self.errors.extend(self.proc.stderr)

    def next(self, timeout: float = 30) -> str:
        """The next line, within `timeout`; fails if none comes or the command ended."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout:g}s; seen: {self.seen}") from None
        assert line is not None, f"the command ended (status {self.proc.wait()}); seen: {self.seen}"
        self.seen.append(line)
        return line

    def until(self, wanted: Callable[[str], object], timeout: float, what: str) -> str:
        """The first line `wanted` holds for, waiting up to `timeout`, or fail with what was seen."""
        try:
            while (line := self.lines.get(timeout=timeout)) is not None:
                self.seen.append(line)
                if wanted(line):
                    return line
        except queue.Empty:
            pass
        raise AssertionError(f"{what}: not within {timeout}s; the command printed {self.seen}")

    def finish(self, timeout: float) -> tuple[int, str]:
        """Its exit status and stderr, once it exits; every stdout line is in `seen` (only the
        reader threads read the pipes: `communicate` would take the last lines from them)."""
        code = self.proc.wait(timeout=timeout)
        while (line := self.lines.get(timeout=timeout)) is not None:
            self.seen.append(line)
        self._stderr.join(timeout)
        return code, "".join(self.errors)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)
