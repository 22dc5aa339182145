"""Whether a pod may go to a node at all: taints vs tolerations, nodeSelector, required node affinity.

Readiness, `spec.unschedulable` and resource fit are node state and live in the snapshot
(`topology.py`); this module holds the pod-side constraints as the API server defines them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Effects that keep a pod off a node unless tolerated; PreferNoSchedule is only a preference.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One `matchExpressions` (or `matchFields`, key `metadata.name`) entry of a node selector term."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False  # matchFields: the key is a node field (only metadata.name exists)

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if self.field:
            value: str | None = node_name if self.key == "metadata.name" else None
        else:
            value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        # Gt / Lt: the label and the single value are integers
        if value is None or not self.values:
            return False
        try:
            have, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound


@dataclass(frozen=True, slots=True)
class PodConstraints:
    """What a pod template says about nodes. Terms are ORed; requirements in a term are ANDed.

    `affinity_terms` is None when the pod has no required node affinity (every node matches);
    an empty tuple (or a term with no requirements) matches no node, as in Kubernetes.
    """

    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[tuple[Requirement, ...], ...] | None = None
    tolerations: tuple[Toleration, ...] = ()

    def untolerated(self, taints: tuple[Taint, ...]) -> Taint | None:
        """The first NoSchedule/NoExecute taint none of the tolerations covers, or None."""
        for taint in taints:
            if taint.effect in BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in self.tolerations):
                return taint
        return None

    def refusal(self, labels: Mapping[str, str], node_name: str, taints: tuple[Taint, ...]) -> str | None:
        """Why these constraints keep the pod off the node (an untolerated taint, or the
        nodeSelector/affinity), or None when they allow it."""
        taint = self.untolerated(taints)
        if taint is not None:
            return f"taint {taint} not tolerated"
        if not self.selects(labels, node_name):
            return "not matching nodeSelector/affinity"
        return None

    def selects(self, labels: Mapping[str, str], node_name: str) -> bool:
        """nodeSelector and required node affinity both match the node."""
        for key, value in self.node_selector:
            if labels.get(key) != value:
                return False
        if self.affinity_terms is None:
            return True
        return any(term and all(r.matches(labels, node_name) for r in term) for term in self.affinity_terms)
