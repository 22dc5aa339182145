"""Runs a local cluster's programs as plain processes, and stops them from any shell.

Each process runs detached in its own process group (it outlives the shell that started it) with
its log in `<state>/logs/<name>.log`. `<state>/state.json` records what runs (`processes`: name ->
pid), how each was started (`commands`: what the keeper needs to start it again as it was), its
restarts, the keeper's pid, and the options the cluster was started with, so `down` from another
shell stops exactly that and a second `up` finds the running cluster. A recorded pid counts only
while it is alive and its command line names the state directory: pids get reused. The shell that
runs `up`, a test restarting a component and the keeper (`keeper.py`) change the file at once:
each change reads and writes it whole under a lock (`state.lock`). A stopped process is forgotten
before it is signalled, so the keeper never starts again what was stopped on purpose.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.probes import Deadline

# How long a stopped process gets to exit before the next, harder step.
STOP_GRACE = 15.0
PORT_FREE_TIMEOUT = 30.0
_POLL = 0.3


@dataclass(frozen=True, slots=True)
class Process:
    """A program to run and how to tell it is ready. `health` returns False while it is not (it
    does not raise); `ports` are the ports it alone binds, waited free before it starts."""

    name: str
    argv: tuple[str, ...]
    health: Callable[[], bool]
    env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout: float = 60.0
    ports: tuple[int, ...] = ()
    # Its CPU niceness (`nice`): below 0, it gets more of a busy machine's CPU than the rest.
    nice: int = 0

    def command(self) -> dict[str, Any]:
        """What state.json records of it: enough to start it again as it was."""
        argv = ["nice", "-n", str(self.nice), *self.argv] if self.nice else list(self.argv)
        return {"argv": argv, "env": dict(self.env), "ports": list(self.ports)}


def launch(state_dir: Path, name: str, command: Mapping[str, Any]) -> subprocess.Popen[bytes]:
    """Start a recorded command detached, in its own process group, its output appended to
    `<state>/logs/<name>.log`."""
    log_dir = state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / f"{name}.log").open("ab") as out:
        return subprocess.Popen(
            command["argv"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # survives this shell; stopped by `down`
            env={**os.environ, **command.get("env", {})},
            cwd=state_dir,
        )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes, once all its threads are gone: a killed multi-threaded
    # process shows its leader as a zombie while other threads still hold its files (its
    # listening sockets among them), and a replacement started then cannot bind its port.
    try:
        if not _zombie(pid):
            return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_port_free(port: int, timeout: float = PORT_FREE_TIMEOUT) -> None:
    """Until 127.0.0.1:`port` can be bound (a killed process's sockets are closed), or `timeout`:
    then the program starting there says itself what holds it."""
    deadline = Deadline(timeout)
    while not port_free(port) and not deadline.passed():
        time.sleep(0.2)


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def read_state(state_dir: Path) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads((state_dir / "state.json").read_text())
        return state
    except (OSError, ValueError):
        return {}


def ours(state_dir: Path, pid: int) -> bool:
    """`pid` runs and is a process of the cluster in `state_dir` (its command line names it)."""
    return alive(pid) and str(state_dir) in cmdline(pid)


@contextlib.contextmanager
def changing_state(state_dir: Path) -> Iterator[dict[str, Any]]:
    """state.json to change, under the lock every writer takes; written back whole (atomically)
    when the block ends, deleted when the block empties it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / "state.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read_state(state_dir)
        yield state
        path = state_dir / "state.json"
        if not state:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(path)


class Supervisor:
    """The processes of the cluster rooted at `state_dir`; `options` are recorded beside them."""

    def __init__(
        self, state_dir: Path, log: Callable[[str], None], options: Mapping[str, Any] | None = None
    ) -> None:
        self.state_dir = state_dir
        self.state_file = state_dir / "state.json"
        self.log_dir = state_dir / "logs"
        self.options = dict(options or {})
        self._log = log

    def _recorded(self) -> dict[str, int]:
        procs: dict[str, int] = read_state(self.state_dir).get("processes", {})
        return procs

    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict[str, Any]]:
        with changing_state(self.state_dir) as state:
            state.setdefault("processes", {})
            yield state
            if self.options:
                state["options"] = self.options

    def running(self) -> dict[str, int]:
        """Recorded processes that still run and are still ours."""
        return {n: p for n, p in self._recorded().items() if ours(self.state_dir, p)}

    def keeper(self) -> int | None:
        """The keeper's pid while it runs (it starts again what exits: `keeper.py`)."""
        pid = read_state(self.state_dir).get("keeper")
        return pid if isinstance(pid, int) and ours(self.state_dir, pid) else None

    def is_running(self) -> bool:
        """Every recorded process runs, or the keeper does and starts again what does not (a
        cluster half of which died, with nothing to heal it, is not running)."""
        procs = self.running()
        return bool(procs) and (set(procs) == set(self._recorded()) or self.keeper() is not None)

    def start(self, proc: Process) -> None:
        """Start `proc` and wait until it is healthy; raises, with the end of its log, if it exits
        or is not healthy within its startup timeout (it stays recorded: `stop_all` ends it)."""
        if not any(str(self.state_dir) in arg for arg in proc.argv):
            raise ClusterError(
                f"{proc.name}'s command line names nothing under {self.state_dir}: a later `down` "
                "could not tell the process is this cluster's"
            )
        for port in proc.ports:
            wait_port_free(port)
        logf = self.log_dir / f"{proc.name}.log"
        with self._changing() as state:
            child = launch(self.state_dir, proc.name, proc.command())
            state["processes"][proc.name] = child.pid
            state.setdefault("commands", {})[proc.name] = proc.command()
        deadline = Deadline(proc.startup_timeout)  # of an idle machine
        while not deadline.passed():
            if child.poll() is not None:
                raise ClusterError(
                    f"{proc.name} exited with status {child.returncode} while starting; "
                    f"last lines of {logf}:\n{tail(logf)}"
                )
            if proc.health():
                self._log(f"  {proc.name} healthy (pid {child.pid})")
                return
            time.sleep(_POLL)
        raise ClusterError(
            f"{proc.name} did not become healthy within {proc.startup_timeout:.0f}s; "
            f"last lines of {logf}:\n{tail(logf)}"
        )

    def keep(self, argv: tuple[str, ...]) -> None:
        """Start the keeper (`argv`) unless it runs: from now on what exits is started again."""
        with self._changing() as state:
            if self.keeper() is None:
                state["keeper"] = launch(self.state_dir, "keeper", {"argv": argv}).pid

    def stop(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Forget one process (the keeper leaves it alone from then on), signal its group and wait
        until it is gone."""
        with self._changing() as state:
            pid = state["processes"].pop(name, None)
            state.get("commands", {}).pop(name, None)
        if pid is not None and ours(self.state_dir, pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
            if not _gone(pid):  # ignored the signal, or left its group: the process itself, for good
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                _gone(pid)
        elif pid is not None:
            with contextlib.suppress(OSError):  # no such process
                if _zombie(pid):  # a killed leader, no command line left, whose threads hold its ports
                    _gone(pid)

    def stop_all(self, *, quiet: bool = False) -> None:
        """Stop the keeper, then every process (TERM, then KILL), newest first, and forget the
        state."""
        keeper = self.keeper()
        if keeper is not None:  # first: it would start again what is being stopped
            with contextlib.suppress(ProcessLookupError):
                os.killpg(keeper, signal.SIGTERM)
            if not _gone(keeper):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(keeper, signal.SIGKILL)
        procs = self._recorded()
        ours_ = {n: p for n, p in procs.items() if ours(self.state_dir, p)}
        # Reverse start order: clients before the API server, the API server before etcd.
        for name, pid in reversed(list(ours_.items())):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            if not quiet:
                self._log(f"  stopping {name} (pid {pid})")
        deadline = time.monotonic() + STOP_GRACE
        while any(alive(p) for p in ours_.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in ours_.values():
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        if self.state_dir.exists():
            with changing_state(self.state_dir) as state:
                state.clear()


def _gone(pid: int) -> bool:
    """Waits up to STOP_GRACE for `pid` to exit; whether it did."""
    deadline = time.monotonic() + STOP_GRACE
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)
