"""The read model: one typed view of the gang check's world for every component (`model.py`).

`of(runtime)` is this process's one model over the cluster's watch caches; a MultiKueue worker
connection builds its own over the worker's caches (`ReadModel(informer, dispatcher)`)."""

from __future__ import annotations

from gangplugin.readmodel.model import ReadModel
from gangplugin.runtime.components import Runtime

NAME = "read-model"


def of(runtime: Runtime) -> ReadModel:
    """The process's read model (made, with its caches and handlers, by the first component
    that asks: ask in `setup`, before the caches start)."""
    return runtime.shared(NAME, lambda: ReadModel(runtime.informer, runtime.dispatcher(NAME), jobs=True))
