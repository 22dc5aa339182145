"""`gangplugin serve --components multikueue`: the MultiKueue dispatcher, on a manager cluster
(off by default: a worker or a single cluster has nothing for it to do)."""

from __future__ import annotations

import threading

from gangplugin.kube.workqueue import start_workers
from gangplugin.multikueue.controller import WORKERS, DispatchSettings, MultiKueueDispatcher
from gangplugin.runtime.components import Runtime


class MultiKueue:
    # Only the leader nominates: two dispatchers would nominate two workers for one gang.
    needs_leader: bool = True

    def __init__(self, settings: DispatchSettings) -> None:
        self.settings = settings  # Kueue's namespace (its kubeconfig Secrets), the timeouts
        self._controller: MultiKueueDispatcher | None = None

    def setup(self, runtime: Runtime) -> None:
        self._controller = MultiKueueDispatcher(
            runtime.client, runtime.informer, runtime.dispatcher("multikueue"), self.settings
        )

    def start(self, runtime: Runtime) -> None:
        ctl = self._controller
        if ctl is None:
            raise RuntimeError("multikueue: start() before setup()")
        ctl.queue.add(WORKERS)
        # One worker: a pass must see the nominations of the one before it, and the worker
        # connections it decides on.
        start_workers(ctl.queue, ctl.reconcile, "multikueue", count=1)

        def stop() -> None:
            runtime.stop.wait()
            ctl.stop()

        threading.Thread(target=stop, name="multikueue-stop", daemon=True).start()
