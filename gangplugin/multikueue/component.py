"""`gangplugin serve --components multikueue`: the MultiKueue dispatcher, on a manager cluster
(off by default: a worker or a single cluster has nothing for it to do)."""

from __future__ import annotations

import threading

from gangplugin.kube.workqueue import start_workers
from gangplugin.multikueue.controller import WORKERS, DispatchSettings, MultiKueueDispatcher
from gangplugin.runtime.components import LeaderController, Runtime


class MultiKueue(LeaderController[MultiKueueDispatcher]):
    """Only the leader nominates: two dispatchers would nominate two workers for one gang."""

    name = "multikueue"

    def __init__(self, settings: DispatchSettings) -> None:
        super().__init__()
        self.settings = settings  # Kueue's namespace (its kubeconfig Secrets), the timeouts

    def build(self, runtime: Runtime) -> MultiKueueDispatcher:
        return MultiKueueDispatcher(
            runtime.client, runtime.informer, runtime.dispatcher("multikueue"), self.settings
        )

    def run(self, runtime: Runtime, ctl: MultiKueueDispatcher) -> None:
        ctl.queue.add(WORKERS)
        # One worker: a pass must see the nominations of the one before it, and the worker
        # connections it decides on.
        start_workers(ctl.queue, ctl.reconcile, "multikueue", count=1)

        def stop() -> None:
            runtime.stop.wait()
            ctl.stop()

        threading.Thread(target=stop, name="multikueue-stop", daemon=True).start()
