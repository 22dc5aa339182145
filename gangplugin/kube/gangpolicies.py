"""Which GangPolicy governs a gang, read from watch caches.

A gang that came through Kueue carries the `gangplugin.io/gang` label its Workload's name gives
(`core.admission.gang_id`); the Workload lists its admission checks; the one whose AdmissionCheck
has controllerName `gangplugin.io/gang` names the GangPolicy in `spec.parameters`; the policy's
`topologyName` names the Kueue Topology whose levels order the placement. The admission
controller and the extender both resolve a gang this way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gangplugin.core.admission import gang_id
from gangplugin.core.errors import InputError
from gangplugin.core.names import ADMISSION_CHECK_CONTROLLER
from gangplugin.core.policy import GangPolicy
from gangplugin.core.topology import DEFAULT_LEVELS
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.client import JSON
from gangplugin.kube.informer import object_key
from gangplugin.kube.records import levels_from_topology


class Cache(Protocol):
    """What is read of a watch cache (an `Informer`)."""

    def get(self, key: str) -> JSON | None: ...

    def items(self) -> list[JSON]: ...


class GangPolicies:
    def __init__(self, workloads: Cache, checks: Cache, policies: Cache, topologies: Cache) -> None:
        self.workloads = workloads
        self.checks = checks
        self.policies = policies
        self.topologies = topologies

    def our_checks(self) -> dict[str, str | None]:
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

    def policy(self, name: str | None) -> GangPolicy:
        """The GangPolicy by name (defaults for None); InputError when missing or invalid."""
        if name is None:
            return GangPolicy()
        obj = self.policies.get(name)
        if obj is None:
            raise InputError("spec.parameters.name", f"GangPolicy {name!r} does not exist")
        try:
            return rec.gang_policy_from_k8s(obj)
        except InputError as err:
            raise InputError(f"GangPolicy {name}: {err.field}", err.problem) from None

    def levels(self, policy: GangPolicy) -> tuple[str, ...]:
        if policy.topology_name is None:
            return DEFAULT_LEVELS
        topo = self.topologies.get(policy.topology_name)
        if topo is None:
            raise InputError("spec.topologyName", f"Topology {policy.topology_name!r} does not exist")
        return levels_from_topology(topo, f"Topology {policy.topology_name}")

    def workload_of_gang(self, namespace: str, gang: str) -> str | None:
        """The key ("ns/name") of the Workload whose gang id is `gang`."""
        if self.workloads.get(f"{namespace}/{gang}") is not None:
            return f"{namespace}/{gang}"
        for wl in self.workloads.items():  # a hashed gang id (long Workload name)
            meta = wl["metadata"]
            if meta.get("namespace") == namespace and gang_id(meta["name"]) == gang:
                return object_key(wl)
        return None

    @staticmethod
    def check_of(wl: Mapping[str, Any], ours: Mapping[str, str | None]) -> tuple[str, JSON] | None:
        """The Workload's state of the first of our admission checks it carries."""
        for state in (wl.get("status") or {}).get("admissionChecks") or []:
            if state.get("name") in ours:
                return str(state["name"]), dict(state)
        return None

    def of_gang(self, namespace: str, gang: str) -> tuple[GangPolicy, tuple[str, ...]] | None:
        """The policy and topology levels of a gang whose Workload carries our admission check;
        None for a gang that did not come through it (plain pods). InputError when the policy or
        its Topology is missing or invalid."""
        key = self.workload_of_gang(namespace, gang)
        wl = self.workloads.get(key) if key is not None else None
        if wl is None:
            return None
        ours = self.our_checks()
        found = self.check_of(wl, ours)
        if found is None:
            return None
        policy = self.policy(ours[found[0]])
        return policy, self.levels(policy)
