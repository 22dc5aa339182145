"""Which check of ours a Workload carries, and under which GangPolicy and Topology.

A gang that came through Kueue carries the `gangplugin.io/gang` label its Workload's name gives
(`core.admission.gang_id`); the Workload lists its admission checks (its ClusterQueue's, in
`spec.admissionChecks` or `spec.admissionChecksStrategy`); the one whose AdmissionCheck has
controllerName `gangplugin.io/gang` names the GangPolicy in `spec.parameters`; the policy's
`topologyName` names the Kueue Topology whose levels order the placement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from gangplugin.core.errors import InputError
from gangplugin.core.names import ADMISSION_CHECK_CONTROLLER, MULTIKUEUE_CONTROLLER
from gangplugin.core.policy import GangPolicy
from gangplugin.core.topology import DEFAULT_LEVELS
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON
from gangplugin.kube.records import levels_from_topology
from gangplugin.readmodel.records import CheckEntry, WorkloadRecord

T_co = TypeVar("T_co", covariant=True)


class Cache(Protocol[T_co]):
    """What is read of a watch cache (an `Informer`)."""

    def get(self, key: str) -> T_co | None: ...

    def items(self) -> Sequence[T_co]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class OurCheck:
    """Our check on a Workload: the AdmissionCheck's name, its GangPolicy (None: the defaults)
    and the Workload's entry for it (None: Kueue has not listed it yet)."""

    name: str
    policy: str | None
    entry: CheckEntry | None


def cluster_queue_checks(cq: Mapping[str, Any]) -> list[str]:
    """The admission checks a ClusterQueue lists, in both of Kueue's ways."""
    spec = cq.get("spec") or {}
    names = [str(n) for n in spec.get("admissionChecks") or []]
    names += [
        str(r.get("name")) for r in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    ]
    return names


class Checks:
    """Our AdmissionChecks and their GangPolicies, read from watch caches; a policy is parsed
    once per resourceVersion, not once per gang and pass."""

    def __init__(self, checks: Cache[JSON], policies: Cache[JSON], topologies: Cache[JSON]) -> None:
        self.checks = checks
        self.policies = policies
        self.topologies = topologies
        self._parsed: dict[str | None, tuple[str | None, GangPolicy]] = {}

    def ours(self) -> dict[str, str | None]:
        """AdmissionCheck name -> GangPolicy name (None: defaults) for checks routed to us."""
        out: dict[str, str | None] = {}
        for ac in self.checks.items():
            if (ac.get("spec") or {}).get("controllerName") != ADMISSION_CHECK_CONTROLLER:
                continue
            try:
                out[ac["metadata"]["name"]] = rec.policy_name_of_check(ac)
            except InputError:
                continue  # reported on the AdmissionCheck's Active condition
        return out

    def multikueue(self) -> frozenset[str]:
        """A MultiKueue manager's MultiKueue AdmissionChecks (its gangs run in worker clusters)."""
        return frozenset(
            str(ac["metadata"]["name"])
            for ac in self.checks.items()
            if (ac.get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER
        )

    def of(self, record: WorkloadRecord, ours: Mapping[str, str | None]) -> OurCheck | None:
        """Our check among the Workload's entries (`ours`: `ours()`, read once per pass)."""
        entry = record.check(ours)
        return None if entry is None else OurCheck(name=entry.name, policy=ours[entry.name], entry=entry)

    def of_queue(self, cq: Mapping[str, Any] | None, ours: Mapping[str, str | None]) -> OurCheck | None:
        """Our check among those a ClusterQueue lists (a Workload Kueue has not listed it on yet)."""
        name = next((n for n in cluster_queue_checks(cq or {}) if n in ours), None)
        return None if name is None else OurCheck(name=name, policy=ours[name], entry=None)

    def policy(self, name: str | None) -> GangPolicy:
        """The GangPolicy by name (defaults for None); InputError when missing or invalid."""
        if name is None:
            return GangPolicy()
        obj = self.policies.get(name)
        if obj is None:
            raise InputError("spec.parameters.name", f"GangPolicy {name!r} does not exist")
        rv = obj["metadata"].get("resourceVersion")
        cached = self._parsed.get(name)
        if cached is not None and cached[0] == rv:
            return cached[1]
        try:
            policy = rec.gang_policy_from_k8s(obj)
        except InputError as err:
            raise InputError(f"GangPolicy {name}: {err.field}", err.problem) from None
        self._parsed[name] = (rv, policy)
        return policy

    def levels(self, policy: GangPolicy) -> tuple[str, ...]:
        """The topology levels a policy places by; InputError when its Topology is missing or invalid."""
        if policy.topology_name is None:
            return DEFAULT_LEVELS
        topo = self.topologies.get(policy.topology_name)
        if topo is None:
            raise InputError("spec.topologyName", f"Topology {policy.topology_name!r} does not exist")
        return levels_from_topology(topo, f"Topology {policy.topology_name}")

    def settings(self, name: str | None) -> tuple[GangPolicy, tuple[str, ...]]:
        """A check's policy and its levels; InputError when either cannot be used."""
        policy = self.policy(name)
        return policy, self.levels(policy)
