"""A read model over watch caches fed plain objects (`tests.unit.api.cluster.Caches`)."""

from __future__ import annotations

from collections.abc import Iterable

from gangplugin.kube.client import JSON, WORKLOADS
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES, RESOURCE_FLAVORS, TOPOLOGIES
from gangplugin.readmodel.model import ReadModel
from tests.unit.api.cluster import Caches


def model_of(
    *,
    workloads: Iterable[JSON] = (),
    checks: Iterable[JSON] = (),
    policies: Iterable[JSON] = (),
    topologies: Iterable[JSON] = (),
    flavors: Iterable[JSON] = (),
) -> tuple[Caches, ReadModel]:
    """The caches holding these objects, and the read model over them."""
    caches = Caches()
    for resource, objs in (
        (WORKLOADS, workloads),
        (ADMISSION_CHECKS, checks),
        (GANG_POLICIES, policies),
        (TOPOLOGIES, topologies),
        (RESOURCE_FLAVORS, flavors),
    ):
        for obj in objs:
            caches.put(resource, obj)
    return caches, caches.model()
