"""`gangplugin serve --components multikueue`: the MultiKueue dispatcher, on a manager cluster
(off by default: a worker or a single cluster has nothing for it to do)."""

from __future__ import annotations

import threading

from gangplugin.kube.workqueue import start_workers
from gangplugin.multikueue.controller import WORKERS, DispatchSettings, MultiKueueDispatcher
from gangplugin.runtime.components import Runtime

# Only the leader nominates: two dispatchers would nominate two workers for one gang.
needs_leader = True

_settings = {"multikueue": DispatchSettings()}
_controllers: dict[int, MultiKueueDispatcher] = {}


def configure(settings: DispatchSettings) -> None:
    """Kueue's namespace (its kubeconfig Secrets) and the dispatcher's timeouts (from `serve`)."""
    _settings["multikueue"] = settings


def setup(runtime: Runtime) -> None:
    _controllers[id(runtime)] = MultiKueueDispatcher(
        runtime.client, runtime.informer, runtime.dispatcher("multikueue"), _settings["multikueue"]
    )


def start(runtime: Runtime) -> None:
    ctl = _controllers.pop(id(runtime))
    ctl.queue.add(WORKERS)
    # One worker: a pass must see the nominations of the one before it, and the worker
    # connections it decides on.
    start_workers(ctl.queue, ctl.reconcile, "multikueue", count=1)

    def stop() -> None:
        runtime.stop.wait()
        ctl.stop()

    threading.Thread(target=stop, name="multikueue-stop", daemon=True).start()
