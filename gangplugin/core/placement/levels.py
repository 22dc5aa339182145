"""The gang's own level: the narrowest required and the narrowest preferred level over its podsets
(the whole gang goes into one domain)."""

from __future__ import annotations

from typing import NamedTuple

from gangplugin.core.errors import InputError
from gangplugin.core.names import PREFERRED_TOPOLOGY_ANNOTATION, REQUIRED_TOPOLOGY_ANNOTATION
from gangplugin.core.placement.model import Gang
from gangplugin.core.topology import Snapshot


class GangLevels(NamedTuple):
    """Level indexes into the snapshot's levels, None where no podset asks for one."""

    required: int | None
    preferred: int | None


def gang_levels(snapshot: Snapshot, gang: Gang) -> GangLevels:
    """(required, preferred) level indexes of the gang (InputError for an unknown label)."""
    required: int | None = None
    preferred: int | None = None
    for i, podset in enumerate(gang.podsets):
        for label, annotation in (
            (podset.required_topology, REQUIRED_TOPOLOGY_ANNOTATION),
            (podset.preferred_topology, PREFERRED_TOPOLOGY_ANNOTATION),
        ):
            if label is None:
                continue
            level = snapshot.level_index(label)
            if level is None:
                raise InputError(
                    f"podSets[{i}].template.metadata.annotations.{annotation}",
                    f"unknown topology label {label!r}; the levels are {', '.join(snapshot.levels)}",
                )
            if annotation == REQUIRED_TOPOLOGY_ANNOTATION:
                required = level if required is None else max(required, level)
            else:
                preferred = level if preferred is None else max(preferred, level)
    return GangLevels(required, preferred)
