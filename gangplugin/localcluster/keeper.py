"""The keeper: what kubelet is to a pod's containers, for a local cluster's processes.

`LocalCluster.up` starts it detached once the cluster is up (`python -m
gangplugin.localcluster.keeper <state dir>`, its log `logs/keeper.log`); `down` stops it first.
Every second it looks at the processes state.json records: one that exited (and was not
stopped on purpose: `Supervisor.stop` forgets a process before it signals it) is started again
with the command it was last started with, after kubelet's backoff (at once the first time, then
10 s doubling up to 5 minutes; a process that ran 10 minutes starts over). Each exit is logged in
the keeper's log and the process's own, with the last line the process wrote, and counted in
state.json's `restarts` (`make status` shows them). It does not wait for the process to be
healthy, as kubelet does not: what needs it waits for it.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from subprocess import Popen
from typing import Any

from gangplugin.localcluster.supervisor import changing_state, launch, ours, port_free, tail

FIRST_BACKOFF = 10.0
MAX_BACKOFF = 300.0
RESET_AFTER = 600.0
POLL = 1.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """kubelet's container restart backoff: `delay` is what the next exit waits."""

    delay: float = 0.0

    def after_exit(self, ran: float) -> tuple[float, Backoff]:
        """How long to wait before starting a process again that ran `ran` seconds, and the
        backoff after that start."""
        wait = 0.0 if ran >= RESET_AFTER else self.delay
        return wait, Backoff(min(MAX_BACKOFF, max(FIRST_BACKOFF, 2 * wait)))


@dataclass(frozen=True, slots=True)
class Watched:
    """One recorded process as the keeper follows it (monotonic seconds)."""

    pid: int
    since: float  # first seen running (or started by the keeper)
    backoff: Backoff = Backoff()
    exited: float | None = None  # when the keeper saw it gone
    due: float = 0.0  # when to start it again
    said_busy: bool = False


class Keeper:
    def __init__(self, state_dir: Path, log: Callable[[str], None] = print) -> None:
        self.state_dir, self.log = state_dir, log
        self.watched: dict[str, Watched] = {}
        self.children: dict[int, Popen[bytes]] = {}  # the processes it started: their exit status

    def tick(self, now: float) -> None:
        """Look at every recorded process once; start again those whose backoff is over."""
        with changing_state(self.state_dir) as state:
            procs: dict[str, int] = state.get("processes", {})
            commands: dict[str, Any] = state.get("commands", {})
            for pid in set(self.children) - set(procs.values()):  # stopped on purpose: reaped
                if self.children[pid].poll() is not None:
                    del self.children[pid]
            for name, pid in procs.items():
                w = self.watched.get(name)
                if w is None or w.pid != pid:  # new, or started again by someone else
                    w = Watched(pid, now, w.backoff if w else Backoff())
                if ours(self.state_dir, pid) or name not in commands:
                    self.watched[name] = w
                    continue
                if w.exited is None:
                    wait, backoff = w.backoff.after_exit(now - w.since)
                    w = replace(w, exited=now, due=now + wait, backoff=backoff)
                    self._exited(state, name, pid, now - w.since, wait)
                self.watched[name] = w
                if now >= w.due:
                    self._start(state, name, commands[name], now)
            for gone in set(self.watched) - set(procs):  # stopped on purpose: forgotten
                del self.watched[gone]

    def _exited(self, state: dict[str, Any], name: str, pid: int, ran: float, wait: float) -> None:
        child = self.children.pop(pid, None)
        status = f" with status {child.poll()}" if child is not None else ""
        last = tail(self.state_dir / "logs" / f"{name}.log", 1).strip()
        when = "at once" if not wait else f"in {wait:.0f}s"
        self._say(name, f"{name} (pid {pid}) exited{status} after {ran:.0f}s; starting it again {when}")
        self.log(f"  its last line: {last}")
        record = state.setdefault("restarts", {}).setdefault(name, {"count": 0})
        record.update(
            lastExit=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), lastLine=last[-300:], backoff=wait
        )

    def _start(self, state: dict[str, Any], name: str, command: dict[str, Any], now: float) -> None:
        w = self.watched[name]
        busy = [p for p in command.get("ports", []) if not port_free(p)]
        if busy:  # a killed process's threads still hold them: the next look
            if not w.said_busy:
                self.log(f"{name}: waiting for port(s) {', '.join(map(str, busy))} to be free")
                self.watched[name] = replace(w, said_busy=True)
            return
        child = launch(self.state_dir, name, command)
        self.children[child.pid] = child
        state["processes"][name] = child.pid
        record = state["restarts"][name]
        record["count"] += 1
        self.watched[name] = Watched(child.pid, now, w.backoff)
        self._say(name, f"{name} started again (pid {child.pid}; restart {record['count']})")

    def _say(self, name: str, message: str) -> None:
        """In the keeper's log and in the process's own, where someone reading it looks."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        self.log(f"{stamp} {message}")
        with (self.state_dir / "logs" / f"{name}.log").open("a") as out:
            out.write(f"--- keeper {stamp}: {message}\n")


def main() -> None:
    state_dir = Path(sys.argv[1]).resolve()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _s, _f: stop.set())
    keeper = Keeper(state_dir, lambda m: print(m, flush=True))
    print(f"keeping the processes of {state_dir}", flush=True)
    while not stop.wait(POLL) and (state_dir / "state.json").exists():
        keeper.tick(time.monotonic())


if __name__ == "__main__":
    main()
