"""How `gangplugin serve` runs its components: caches first (on every replica), then the
components that may run anywhere, then — once this replica holds the leader Lease — those whose
`needs_leader` is True (the controllers, and the extender and ungater whose gang plans
live in memory). Caches are synced once their first lists are held and handled by every
component's handlers (`Informer.wait_synced`).

The Lease is renewed by a process of its own (`kube/renewer.py`): nothing this process does can
make a renewal late. A leader that has not renewed within the renew deadline exits non-zero at
once (controller-runtime does the same): it restarts clean as a follower instead of acting on a
lease it may have lost; until it has exited, the API client refuses its writes (`Client.fence`),
whichever thread tries one first.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from gangplugin.core.leader import ElectionConfig
from gangplugin.kube.client import ApiError
from gangplugin.kube.informer import wait_all_synced
from gangplugin.kube.lease import Renewal, label_leader_pod
from gangplugin.kube.renewer import ElectionTarget, RenewerProcess
from gangplugin.runtime.components import Component, Runtime
from gangplugin.runtime.memory import freeze_long_lived
from gangplugin.runtime.metrics import LEADER, RENEW_LATENCY, RENEW_WAKEUP

log = logging.getLogger("gangplugin.serve")


class ServeError(RuntimeError):
    """`serve` cannot start; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Election:
    namespace: str
    name: str
    identity: str
    config: ElectionConfig
    pod: str | None = None  # this replica's pod (in its namespace), labelled while it leads
    kubeconfig: str | None = None  # the renewing process's API server, as `serve`'s (None: found)


def _observe(renewal: Renewal) -> None:
    RENEW_LATENCY.observe(renewal.latency)
    RENEW_WAKEUP.observe(renewal.wakeup)


class Server:
    """One `serve` process: `start` brings it up, `wait` blocks until it must end."""

    def __init__(self, runtime: Runtime, modules: dict[str, Component], election: Election | None) -> None:
        self.runtime, self.modules, self.election = runtime, modules, election
        self.anywhere = {n: m for n, m in modules.items() if election is None or not m.needs_leader}
        self.leader_only = {n: m for n, m in modules.items() if n not in self.anywhere}
        self.elector: RenewerProcess | None = None
        self._phase = "syncing watch caches"
        self._ready = threading.Event()
        self._leading_started = threading.Event()
        self._thread: threading.Thread | None = None

    def readiness(self) -> tuple[bool, str]:
        """Ready once caches are synced and the components this replica runs now are started.
        A follower is ready too (it serves its other components, and must not block a rollout);
        the body says which role it has."""
        if not self._ready.is_set():
            return False, self._phase
        if not self.leader_only:
            return True, f"serving {', '.join(self.anywhere)}"
        assert self.elector is not None
        if self._leading_started.is_set():
            return True, f"leader ({self.elector.lease}); serving {', '.join(self.modules)}"
        others = f"serving {', '.join(self.anywhere)}; " if self.anywhere else ""
        return True, (
            f"{others}standby for {', '.join(self.leader_only)}: "
            f"lease {self.elector.lease} held by {self.elector.holder or 'nobody yet'}"
        )

    def start(self, sync_timeout: float = 120.0) -> None:
        rt = self.runtime
        for mod in self.modules.values():
            mod.setup(rt)
        rt.start_informers()
        if not wait_all_synced(rt.informers(), timeout=sync_timeout):
            raise ServeError(
                f"watch caches did not sync within {sync_timeout:.0f}s; is the API server reachable?"
            )
        freeze_long_lived()  # the caches' first lists: most of what the process holds, for good
        for mod in self.anywhere.values():
            mod.start(rt)
        if self.leader_only:
            self._start_election()
        self._ready.set()
        log.info("serving %s", ", ".join(self.anywhere) or "nothing until leading")

    def _start_election(self) -> None:
        e = self.election
        assert e is not None
        target = ElectionTarget(e.kubeconfig, e.namespace, e.name, e.identity, e.config)
        elector = self.elector = RenewerProcess(target, on_renewed=_observe)
        LEADER.labels(elector.lease).set(0)
        if e.pod:
            self._label(False)  # a leader that restarted in the same pod is a follower now
        self._thread = threading.Thread(
            target=elector.run,
            args=(self.runtime.stop, self._on_leading),
            name="leader-election",
            daemon=True,
        )
        self.runtime.vital(self._thread)
        self._thread.start()
        log.info("waiting to lead %s", elector.lease, extra={"identity": e.identity})

    def _on_leading(self) -> None:
        assert self.elector is not None
        self.runtime.client.fence = self._fence
        try:
            for mod in self.leader_only.values():
                mod.start(self.runtime)
        except Exception as err:
            log.exception("starting the leader's components failed")
            self.runtime.fail(f"starting {', '.join(self.leader_only)} failed: {err}")
            return
        if self.election is not None and self.election.pod:
            self._label(True)
        LEADER.labels(self.elector.lease).set(1)
        self._leading_started.set()
        log.info("leading %s: started %s", self.elector.lease, ", ".join(self.leader_only))

    def _fence(self) -> None:
        """Before every write: refused once leadership may be lost, even before `wait` exits."""
        assert self.elector is not None
        if (why := self.elector.lost_reason()) is not None:
            raise ApiError(503, "LeadershipLost", f"not written: {why}")

    def _label(self, leading: bool) -> None:
        e = self.election
        assert e is not None and e.pod is not None
        try:
            label_leader_pod(self.runtime.client, e.namespace, e.pod, leading)
        except ApiError as err:
            what = "label" if leading else "unlabel"
            log.warning("could not %s pod %s/%s: %s", what, e.namespace, e.pod, err)

    def wait(self) -> int:
        """Block until stopped; the exit status: 0 for a clean stop (the Lease released), 1 when
        leadership was lost or a component failed."""
        rt = self.runtime
        poll = self.election.config.retry_period / 4 if self.election else 1.0
        while not rt.stop.wait(poll):
            why = self.elector.lost_reason() if self.elector is not None else None
            if why is not None:
                assert self.elector is not None
                LEADER.labels(self.elector.lease).set(0)
                log.error("stopping: %s; exiting so this replica restarts as a follower", why)
                return 1
        if rt.failure is not None:
            log.error("stopping: %s", rt.failure)
            return 1
        if self._thread is not None:
            self._thread.join(timeout=5)  # it releases the Lease on stop
        return 0
