"""API discovery: whether the API server serves a group/version, or one resource in it."""

from __future__ import annotations

from gangplugin.kube.client import ApiError, Client, Resource


def _resources(client: Client, group_version: str) -> list[str] | None:
    """The resources `group_version` serves; None when it is not served at all."""
    try:
        found = client.request("GET", f"/apis/{group_version}")
    except ApiError as err:
        if err.status == 404:
            return None
        raise
    return [str(r.get("name")) for r in found.get("resources") or []]


def served(client: Client, group_version: str) -> bool:
    return _resources(client, group_version) is not None


def serves(client: Client, res: Resource) -> bool:
    """A group/version can be served without the resource: scheduling.k8s.io/v1beta1 serves
    PodGroups only with the GenericWorkload feature gate on."""
    return res.plural in (_resources(client, res.api_version) or [])
