"""The pods of each gang and of each Kueue pod group: indexes over the pod cache, kept by its
events (in the read model's dispatcher order), so a gang's pods are found without a scan."""

from __future__ import annotations

import threading

from gangplugin.readmodel.records import DEFAULT_PODSET, PodRecord

GroupKey = tuple[str, str]  # (namespace, gang label or pod group name)


class PodIndex:
    def __init__(self) -> None:
        self._by_gang: dict[GroupKey, dict[str, PodRecord]] = {}
        self._by_group: dict[GroupKey, dict[str, PodRecord]] = {}
        self._lock = threading.Lock()

    def on_pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        pod = new or old
        assert pod is not None
        with self._lock:
            for index, was, now in (
                (self._by_gang, old and old.gang, new and new.gang),
                (self._by_group, old and old.pod_group, new and new.pod_group),
            ):
                if was and was != now:
                    _drop(index, (pod.namespace, was), pod.name)
                if now and new is not None:
                    index.setdefault((pod.namespace, now), {})[pod.name] = new

    def of_gang(self, namespace: str, gang: str) -> list[PodRecord]:
        with self._lock:
            return list(self._by_gang.get((namespace, gang), {}).values())

    def gangs(self) -> list[GroupKey]:
        """Every (namespace, gang label) some pod carries."""
        with self._lock:
            return list(self._by_gang)

    def of_group(self, namespace: str, group: str) -> list[PodRecord]:
        with self._lock:
            return list(self._by_group.get((namespace, group), {}).values())

    def placed(self, namespace: str, gang: str) -> dict[str, tuple[str, ...]]:
        """The nodes of the gang's active pods that hold one (bound, or pinned there:
        `PodRecord.bound`, what the capacity counts them on), per podset, sorted."""
        nodes: dict[str, list[str]] = {}
        for pod in self.of_gang(namespace, gang):
            if pod.active and pod.bound is not None:
                nodes.setdefault(pod.podset or DEFAULT_PODSET, []).append(pod.bound.node_name)
        return {podset: tuple(sorted(on)) for podset, on in sorted(nodes.items())}


def _drop(index: dict[GroupKey, dict[str, PodRecord]], key: GroupKey, name: str) -> None:
    pods = index.get(key)
    if pods is None:
        return
    pods.pop(name, None)
    if not pods:
        del index[key]
