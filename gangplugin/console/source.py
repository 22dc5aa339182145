"""What the console reads: one protocol, exactly what its pages need, as typed values.

`from_model.ReadModelSource` implements it over the read model (`gangplugin.readmodel`); the
pages never see a Kubernetes object. Every answer is computed from what the API server holds
(through the watch caches), so a console restarted at any moment shows the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from gangplugin.console.model import (
    ClusterMap,
    GangDetail,
    GangSummary,
    PlanSchedule,
    PolicySettings,
    QueueUsage,
    Topic,
)


class ConsoleSource(Protocol):
    def cluster_map(self) -> ClusterMap:
        """Every node in its topology domains, with its gangs and state."""
        ...

    def gangs(self) -> Sequence[GangSummary]:
        """Every gang (of every namespace: the pages keep to what the user may read)."""
        ...

    def gang(self, namespace: str, name: str) -> GangDetail | None:
        """One gang by its name (its Workload's, or a pod gang's label)."""
        ...

    def queues(self, now: datetime) -> Sequence[QueueUsage]:
        """Every ClusterQueue's quota and use."""
        ...

    def plans(self, now: datetime) -> Sequence[PlanSchedule]:
        """Every TrainingPlan's blocks at `now`."""
        ...

    def policies(self) -> Sequence[PolicySettings]:
        """Every GangPolicy with its settings in plain words."""
        ...

    def policy_object(self, name: str) -> dict[str, Any] | None:
        """The GangPolicy as stored (the form edits it)."""
        ...

    def subscribe(self, listener: Callable[[Topic], None]) -> None:
        """Call `listener` (on a thread of the source's) whenever what a topic shows may have
        changed."""
        ...
