"""Deletions a controller made that its watch has not shown yet (kube-controller-manager calls
these "expectations"). A reconcile woken between its DELETE and the watch event that follows
would see the pod still active and act on it a second time: replace the same failed node twice,
with a second Event naming another spare."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

Pod = TypeVar("Pod")


class DeletionExpectations:
    """Pod uids deleted here, each until the watch shows the pod deleting or finished, or
    `ttl` seconds pass (a pod gone before its deletion showed is not listed again)."""

    def __init__(self, ttl: float = 60.0) -> None:
        self.ttl = ttl
        self._deleted: dict[str, float] = {}  # uid -> when it was deleted
        self._lock = threading.Lock()

    def expect(self, uid: str, now: float) -> None:
        with self._lock:
            self._deleted[uid] = now

    def visible(
        self, pods: list[Pod], uid: Callable[[Pod], str], active: Callable[[Pod], bool], now: float
    ) -> list[Pod]:
        """`pods` without those deleted here that the watch still shows `active`."""
        with self._lock:
            for old in [u for u, at in self._deleted.items() if now - at >= self.ttl]:
                del self._deleted[old]
            if not self._deleted:
                return pods
            out = []
            for pod in pods:
                key = uid(pod)
                if key not in self._deleted:
                    out.append(pod)
                elif not active(pod):  # the watch caught up: it alone says what the pod is
                    del self._deleted[key]
                    out.append(pod)
            return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._deleted)
