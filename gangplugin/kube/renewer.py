"""Leader election in a process of its own, so that nothing the serving process does (a long
admission pass, thousands of watch events, a full garbage collection, all of them holding the
GIL) can make a renewal late: a process that sleeps between renewals is woken at once by the
kernel, where a thread of a busy interpreter waits for the GIL behind the others.

The child (spawned: a fresh interpreter, no lock of the parent's threads) runs `LeaderElector`
with a client and connection of its own, and writes the monotonic instant its last successful
try began into memory it shares with the parent. The parent judges the renew deadline from that
memory alone (`lost_reason`), so neither its judgement nor the renewals wait on one of its own
threads: a parent starved of CPU or of the GIL keeps its Lease. A parent that is stopped
(SIGSTOP, a debugger) is not renewed for: past the deadline it loses the Lease, and finds that out
the moment it runs again, before it writes anything (`Client.fence`). The child dies with the
parent, and ignores SIGTERM: the parent decides when to release the Lease.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from gangplugin.core.leader import ElectionConfig
from gangplugin.kube.client import Client
from gangplugin.kube.lease import LeaderElector, Renewal

_PR_SET_PDEATHSIG = 1
_POLL = 0.2  # how often the child looks at its parent and its pipe


@dataclass(frozen=True, slots=True)
class ElectionTarget:
    """What the child needs to elect: the API server (a kubeconfig path; None: as `Client`
    finds it) and the Lease."""

    kubeconfig: str | None
    namespace: str
    name: str
    identity: str
    config: ElectionConfig


class RenewerProcess:
    """The parent's side: `run` (a thread of the parent) starts the child and relays what it
    says; `lost_reason` is for the main thread. `watched` is the process whose being stopped
    stops the renewals (default: this one)."""

    def __init__(
        self,
        target: ElectionTarget,
        on_renewed: Callable[[Renewal], None] = lambda _r: None,
        monotonic: Callable[[], float] = time.monotonic,
        watched: int | None = None,
    ) -> None:
        self.target, self.config = target, target.config
        self.on_renewed, self.monotonic = on_renewed, monotonic
        self.leading = threading.Event()
        self.holder: str | None = None
        self._lost: str | None = None
        ctx = multiprocessing.get_context("spawn")
        self._renewed_at = ctx.RawValue(ctypes.c_double, 0.0)
        self._conn, child_conn = ctx.Pipe()
        self._child = ctx.Process(
            target=_child_main,
            args=(target, child_conn, self._renewed_at, watched or os.getpid(), _parent_logs()),
            name="gangplugin-lease",
            daemon=True,
        )

    def running(self) -> bool:
        """The renewing process runs (it ends once this replica lost or released the Lease)."""
        return self._child.is_alive()

    @property
    def lease(self) -> str:
        return f"{self.target.namespace}/{self.target.name}"

    def lost_reason(self) -> str | None:
        """Why this replica must stop acting now (None while it may go on); reads shared memory
        only, so it answers on time however busy the rest of the process is."""
        if self._lost is not None:
            return self._lost
        renewed = self._renewed_at.value
        if self.leading.is_set() and self.monotonic() - renewed >= self.config.renew_deadline:
            return f"lease {self.lease} not renewed within {self.config.renew_deadline:g}s"
        return None

    def run(self, stop: threading.Event, on_started: Callable[[], None]) -> None:
        """Start the child and relay its news until `stop` (then the child releases the Lease)
        or until the child ends (then this replica has lost it, if it led)."""
        self._child.start()
        threading.Thread(target=self._stop_on, args=(stop,), name="leader-election-stop", daemon=True).start()
        try:
            while True:
                try:
                    news = self._conn.recv()
                except (EOFError, OSError):
                    break
                self._relay(news, on_started)
        finally:
            if not stop.is_set() and self._lost is None:
                self._lost = f"lease {self.lease}: the renewing process ended (exit code {self._exitcode()})"
            self.leading.clear()

    def _relay(self, news: tuple[Any, ...], on_started: Callable[[], None]) -> None:
        kind = news[0]
        if kind == "holder":
            self.holder = news[1]
        elif kind == "leading":
            self.holder = self.target.identity
            self.leading.set()
            on_started()
        elif kind == "renewed":
            self.on_renewed(Renewal(*news[1:]))
        elif kind == "lost":
            self._lost = news[1]
            self.leading.clear()

    def _stop_on(self, stop: threading.Event) -> None:
        stop.wait()
        try:
            self._conn.send(("stop",))
        except OSError:
            return
        self._child.join(timeout=10)

    def _exitcode(self) -> int | None:
        self._child.join(timeout=1)
        return self._child.exitcode


def _die_with_parent() -> None:
    """SIGKILL when the parent dies (Linux); the parent check in the loop covers the rest."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _parent_logs() -> tuple[int, type[logging.Formatter] | None]:
    """How this process logs, for the child to log alike: the root level and the first
    handler's formatter class (when it needs no arguments, as `serve`'s do)."""
    root = logging.getLogger()
    formatter = root.handlers[0].formatter if root.handlers else None
    if formatter is None:
        return root.level, None
    try:
        type(formatter)()
    except TypeError:
        return root.level, None
    return root.level, type(formatter)


def _log_like_parent(level: int, formatter: type[logging.Formatter] | None) -> None:
    handler = logging.StreamHandler()
    if formatter is not None:
        handler.setFormatter(formatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(max(logging.WARNING, level))  # a request every 2 s


def stopped(pid: int) -> bool:
    """`pid` is stopped (SIGSTOP, or at a debugger's breakpoint): it cannot act now."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("T", "t")


def _child_main(
    target: ElectionTarget,
    conn: Connection,
    renewed_at: ctypes.c_double,
    watched: int,
    logs: tuple[int, type[logging.Formatter] | None],
) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a SIGTERM to the group: the parent decides
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    _log_like_parent(*logs)
    parent = os.getppid()
    config = target.config
    # A request that hangs must leave time for another try within the renew deadline.
    client = Client.from_kubeconfig(target.kubeconfig, timeout=config.renew_deadline / 2)
    sending = threading.Lock()

    def send(*news: Any) -> None:
        with sending:
            conn.send(news)

    def renewed(r: Renewal) -> None:
        renewed_at.value = elector.last_renewed
        send("renewed", r.due, r.began, r.done)

    elector = LeaderElector(
        client,
        target.namespace,
        target.name,
        target.identity,
        config,
        on_renewed=renewed,
        may_renew=lambda: not stopped(watched),
    )
    stop, release = threading.Event(), threading.Event()

    def started() -> None:
        renewed_at.value = elector.last_renewed
        send("leading")

    def elect() -> None:
        elector.run(stop, started, release=release)

    thread = threading.Thread(target=elect, name="leader-election", daemon=True)
    thread.start()
    holder = None
    while thread.is_alive():
        if conn.poll(_POLL) and conn.recv()[0] == "stop":
            release.set()
            stop.set()
            break
        if os.getppid() != parent:
            os._exit(0)  # the parent is gone: nobody acts on this Lease any more
        if elector.holder != holder:
            holder = elector.holder
            send("holder", holder)
    thread.join(timeout=config.renew_deadline)
    if (why := elector.lost_reason()) is not None:
        send("lost", why)
    client.close()
