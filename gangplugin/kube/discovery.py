"""API discovery: whether the API server serves a group/version, or one resource in it."""

from __future__ import annotations

from gangplugin.kube.client import Client, Resource, none_if_absent


def _resources(client: Client, group_version: str) -> list[str] | None:
    """The resources `group_version` serves; None when it is not served at all."""
    found = none_if_absent(lambda: client.request("GET", f"/apis/{group_version}"))
    if found is None:
        return None
    return [str(r.get("name")) for r in found.get("resources") or []]


def served(client: Client, group_version: str) -> bool:
    return _resources(client, group_version) is not None


def serves(client: Client, res: Resource) -> bool:
    """A group/version can be served without the resource: scheduling.k8s.io/v1beta1 serves
    PodGroups only with the GenericWorkload feature gate on."""
    return res.plural in (_resources(client, res.api_version) or [])
